"""The search's second stage: expert and context parallelism, ZeRO-2/3 and FSDP, optimizer offload.

The fast evaluator (``estimate``) times the dense space (tp, pp, dp, micro-batch, interleave, recompute,
sequence parallelism, ZeRO 0/1, placement) from cached layer costs. The dimensions here change what the
passes themselves carry — all-to-all dispatch and combine (``plan.experts``), the K/V ring
(``plan.context``), per-layer gathers and reduce-scatters (``plan.sharding``), host-link streams of the
optimizer step (``plan.residency``) — so each candidate that uses one is timed by building its plan and
running the analytic engine: the same functions the engines use, one place for each formula, at about
0.1 s a candidate instead of microseconds. To keep that affordable the stage varies only *seeds* from the
first stage: the fastest candidates it kept (where ep, cp or a cheaper gradient reduction can win time)
and the fastest that missed memory (where sharding, ep, cp or offload can make them fit); for MoE models
also one seed per expert-parallel degree, varied at that degree only (``moe``).

Variants of a seed (tp, pp, dp, micro-batch, interleave, recompute, sp) on the same devices and batch:

- ep: each divisor e > 1 of dp that divides the routed experts (MoE models); with tp > 1 also whole experts
  per rank (expert_tp 1, Megatron-Core's ETP 1) with sequence parallelism at each such divisor of tp × dp (MoE
  parallel folding), ep 1 included (every expert whole on each rank's own tokens), at the seed's ZeRO stage only;
- cp: each c > 1 with 2c dividing the sequence, the ring's c ranks taken from the seed's dp replicas (dp/c
  data-parallel × c context-parallel: the micro-batch count grows by c, the pipeline bubble shrinks), from its
  tensor group (tp/c) or from the devices it leaves idle (``context_shapes``), at each ZeRO stage and FSDP (they
  shard over the dp · c replicas, dp 1 included), for MoE models also with each ep dividing dp · c (the experts
  split over those replicas) at the seed's ZeRO-1 or below;
- ZeRO 2, ZeRO 3 and FSDP (dp > 1), each also with ep;
- the optimizer state in host memory (a node with a host memory and a host link), on the seeds that
  missed memory;
- tensor-parallel all-gathers and reduce-scatters pipelined with their GEMMs (``mapping.overlap_tp_comm``,
  Transformer Engine's userbuffers) on the kept seeds with tp > 1 and sequence parallelism;
- gradients reduced in buckets under the last backward (Megatron ``--overlap-grad-reduce``), on the kept
  seeds with dp > 1, at their own ZeRO stage and at ZeRO-2, and on each context-parallel variant (the overlap
  option; FSDP always prefetches);
  and, for each expert-parallel variant at the seed's ZeRO stage, its all-to-all hidden behind another
  micro-batch's compute (``mapping.overlap_ep_comm``, DualPipe-style), that also with the weight gradients
  delayed to hide the backward's all-to-all (``mapping.delay_wgrad_compute``);
- the MoE token exchange node by node (``mapping.ep_dispatcher`` 'deepep': one copy per destination node
  over the network, forwarded inside it) for each expert-parallel variant whose group spans nodes, at the
  seed's ZeRO stage, with and without the overlap: the flat all-to-all sends each token to each of its
  experts' ranks, so which one wins depends on top-k, the node limit and the two fabrics;
- around the best candidates ranked, once the variants above are timed (``second_stage.extend``): each overlap
  option they lack (``overlap_twins``), the neighbouring ZeRO stages (``zero_steps``) and micro-batches
  (``micro_batch_steps``), which the seeds' variants combine only partly;
- selective recomputation of the module lists NVIDIA's recipes use (``RECOMPUTE_RECIPES``, Megatron-Core's
  ``--recompute-modules``; ``perf.recompute``), on the seeds that use full recomputation (the lists re-run
  less) or that missed memory with the default selective recomputation (core_attn: they store less), at most
  ``RECIPES_PER_SEED`` lists the model has every module of, at the seed's ep and ZeRO-1 where dp > 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from tilewright.engine.engines.analytic.engine import AnalyticEngine
from tilewright.engine.errors import InputError
from tilewright.engine.hardware import elaborate
from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.project import EngineKind, Project
from tilewright.engine.ir.workload import TransformerDims
from tilewright.engine.perf.device import DeviceModel
from tilewright.engine.perf.recompute import MODULES, present
from tilewright.engine.plan.checks import check_project, ep_overlap_runs
from tilewright.engine.plan.plan import Plan, build_plan
from tilewright.engine.plan.residency import available_levels
from tilewright.engine.search.parallel.candidate import DISPATCHERS, Candidate, replicas
from tilewright.engine.search.space import divisors
from tilewright.engine.workloads import build_workload
from tilewright.engine.workloads.graph import WorkloadGraph

# Megatron-Core recompute-module lists, most specific first (``with_recipes`` keeps those the model has):
# "fine-grained recomputation" of MoE models, ``--recompute-modules mla_up_proj layernorm moe_act``
# (NVIDIA/Megatron-LM megatron/core/transformer/moe/README.md, memory optimisations; the DeepSeek-V3 recipe)
# and its non-MLA form with the attention core; the dense MLP beside MLA's up projections or the attention
# core (Megatron-MoE-ModelZoo's DeepSeek-V3/Kimi-K2 recipes add ``mlp`` for their dense layers).
RECOMPUTE_RECIPES: tuple[tuple[str, ...], ...] = (
    ("mla_up_proj", "layernorm", "moe_act"),
    ("core_attn", "layernorm", "moe_act"),
    ("mla_up_proj", "mlp"),
    ("core_attn", "mlp"),
)
RECIPES_PER_SEED = 2  # module lists tried per seed: each costs a plan
LONG_SEQUENCE = 8192  # tokens from which cp is explored by default (Megatron-LM uses cp for long contexts)
ZERO_CHOICES = ("0", "1", "2", "3", "fsdp")


@dataclass
class Extensions:
    """What the second stage may vary, and what the ranking may show (``allows``)."""

    eps: list[int] = field(default_factory=lambda: [1])
    cps: list[int] = field(default_factory=lambda: [1])
    zeros: list[int] = field(default_factory=lambda: [0, 1, 2, 3])
    fsdp: bool = True
    offload: str | None = None  # host memory name, None: no offload
    overlap: bool = True  # try overlapping the gradient reduction with the last backward
    dispatchers: list[str] = field(default_factory=lambda: ["alltoall"])  # MoE token exchanges to try
    node_devices: int = 0  # devices per node (0: unknown), where an ep group starts to span nodes
    devices: int = 0  # the search's device budget (0: unknown), which a context ring may fill (``context_shapes``)
    # recompute-module lists to try (``RECOMPUTE_RECIPES``); None: the recipes the model has (``with_recipes``)
    recipes: list[tuple[str, ...]] | None = None

    @property
    def active(self) -> bool:
        return (
            any(e > 1 for e in self.eps)
            or any(c > 1 for c in self.cps)
            or any(z >= 2 for z in self.zeros)
            or self.fsdp
            or self.offload is not None
            or self.overlap
            or any(d != "alltoall" for d in self.dispatchers)
            or self.recipes is None
            or bool(self.recipes)
        )

    def allows(self, c: Candidate) -> bool:
        """A candidate the user's restrictions admit to the ranking (first-stage ones are seeds otherwise)."""
        if c.fsdp:
            zero_ok = self.fsdp
        else:
            zero_ok = c.zero in self.zeros or replicas(c) == 1  # without replicas every stage is the same mapping
        overlap_ok = self.overlap or not (c.overlap_grad_reduce or c.overlap_ep or c.overlap_tp)
        modules_ok = c.recompute_modules is None or self.recipes is None or c.recompute_modules in self.recipes
        return (zero_ok and c.ep in self.eps and c.cp in self.cps and overlap_ok
                and c.dispatcher in self.dispatchers and modules_ok)


def first_stage_only() -> Extensions:
    """No second stage: the dense space the fast evaluator times (tp, pp, dp, …, ZeRO 0/1)."""
    return Extensions(eps=[1], cps=[1], zeros=[0, 1], fsdp=False, offload=None, overlap=False, recipes=[])


def default_extensions(
    project: Project,
    hw: HardwareGraph,
    dev: DeviceModel,
    eps: list[int] | None = None,
    cps: list[int] | None = None,
    zeros: list[str] | None = None,
    offload: bool = True,
    overlap: bool = True,
    dispatchers: list[str] | None = None,
    recipes: list[tuple[str, ...]] | None = None,
) -> Extensions:
    """The default space for this model and system, narrowed by the CLI's lists (None: the default)."""
    spec = project.workload
    moe = spec.moe if isinstance(spec, TransformerDims) else None
    seq = spec.seq_len if isinstance(spec, TransformerDims) else 0
    if eps is None:
        eps = list(divisors(moe.experts)) if moe is not None else [1]
    if cps is None:
        cps = [c for c in (1, 2, 4, 8) if seq % c == 0] if seq >= LONG_SEQUENCE else [1]
    chosen = zeros if zeros is not None else list(ZERO_CHOICES)
    if dispatchers is None:
        dispatchers = list(DISPATCHERS) if moe is not None else ["alltoall"]
    return Extensions(
        eps=sorted(set(eps)),
        cps=sorted(set(cps)),
        zeros=sorted({int(z) for z in chosen if z != "fsdp"}),
        fsdp="fsdp" in chosen,
        offload=host_memory(hw, dev) if offload else None,
        overlap=overlap,
        dispatchers=sorted(set(dispatchers)),
        node_devices=node_devices(hw),
        recipes=recipes,
    )


def with_recipes(ext: Extensions, workload: WorkloadGraph) -> Extensions:
    """``ext`` with its recompute-module lists resolved: by default the ``RECOMPUTE_RECIPES`` whose every module
    the model's blocks have (``perf.recompute.present``; ``plan.checks`` refuses the others), at most
    ``RECIPES_PER_SEED``; a list the user gave is kept as given (the checks refuse what the model lacks)."""
    if ext.recipes is not None:
        return ext
    layers = [workload.layer_ops(i) for i in workload.block_layers]
    has = {name for name in MODULES if any(present(ops, name) for ops in layers)}
    chosen = [r for r in RECOMPUTE_RECIPES if set(r) <= has][:RECIPES_PER_SEED]
    return replace(ext, recipes=chosen)


def node_devices(hw: HardwareGraph) -> int:
    """Devices per node (the fewest any node holds): an expert-parallel group of more ranks spans nodes."""
    counts: dict[str, int] = {}
    for d in hw.devices:
        parent = d.node.rsplit("/", 1)[0]
        counts[parent] = counts.get(parent, 0) + 1
    return min(counts.values(), default=0)


def host_memory(hw: HardwareGraph, dev: DeviceModel) -> str | None:
    """The name of a host memory the devices reach over a host link, if any."""
    for name, info in available_levels(hw, 0, dev).items():
        if info.level == "host" and info.bandwidth > 0:
            return name
    return None


def variants(seed: Candidate, ext: Extensions, spec: object, fits: bool) -> list[Candidate]:
    """The second stage's candidates around one seed (module docstring); ``fits``: the seed fits in
    memory (offload only helps those that do not)."""
    moe = spec.moe if isinstance(spec, TransformerDims) else None
    seq = spec.seq_len if isinstance(spec, TransformerDims) else 0
    base = replace(seed, zero=min(seed.zero, 1))
    out: list[Candidate] = []
    eps = [e for e in ext.eps if e == 1 or (moe is not None and seed.dp % e == 0 and moe.experts % e == 0)]
    shard: list[tuple[int, bool]] = [(0, False)]  # without dp every ZeRO stage is the same mapping
    if seed.dp > 1:
        shard = [(z, False) for z in ext.zeros] + ([(3, True)] if ext.fsdp else [])
    for ep in eps:
        for zero, fsdp in shard:
            out.append(replace(base, ep=ep, zero=zero, fsdp=fsdp))
    if moe is not None and seed.tp > 1 and seed.sequence_parallel:  # whole experts per rank, ep folded over
        # tp × dp (``plan.experts``; expert tp below tp needs sequence parallelism, as Megatron-LM asserts), ep 1
        # included: every expert whole on each rank's own tokens
        out += [replace(base, ep=e, expert_tp=1) for e in ext.eps
                if (seed.tp * seed.dp) % e == 0 and moe.experts % e == 0]
    contexts: list[Candidate] = []
    context_shard = [(z, False) for z in ext.zeros] + ([(3, True)] if ext.fsdp else [])
    for cp in ext.cps:
        if cp <= 1 or seq % (2 * cp):  # 2·cp chunks a sequence (``plan.checks``)
            continue
        for tp, dp in context_shapes(seed, cp, ext.devices):
            ctx = replace(base, tp=tp, dp=dp, cp=cp, sequence_parallel=base.sequence_parallel and tp > 1)
            # ZeRO shards over the dp · cp replicas (``candidate.replicas``, Megatron-Core's distributed optimizer on
            # the data-and-context group), so at dp 1 too each stage is a mapping of its own
            contexts += [replace(ctx, zero=zero, fsdp=fsdp) for zero, fsdp in context_shard]
            # with expert parallelism too, the experts split over the stage's dp · cp replicas (``plan.checks``)
            contexts += [replace(ctx, ep=e) for e in ext.eps
                         if e > 1 and moe is not None and (dp * cp) % e == 0 and moe.experts % e == 0]
    out += contexts
    if ext.offload is not None and not fits:
        out += [replace(c, offload=ext.offload) for c in out if c.zero >= 1 or c.dp == 1]
    if ext.overlap and fits and seed.tp > 1 and seed.sequence_parallel:  # its GEMMs hide the seed's tp comm
        out.append(replace(base, overlap_tp=True))
    if ext.overlap and fits and seed.dp > 1:  # overlap hides time; it frees no memory
        for zero in sorted({base.zero, 2} & set(ext.zeros)):
            out.append(replace(base, zero=zero, overlap_grad_reduce=True))
        # each expert-parallel variant at the seed's ZeRO stage, its all-to-all overlapped too
        # where Megatron-Core runs it (``checks.ep_overlap_runs``: the checks refuse it otherwise)
        out += [replace(c, overlap_ep=True) for c in list(out) if c.ep > 1 and c.zero == base.zero and not c.fsdp
                and c.cp == 1 and c.offload is None and ep_overlap_runs(c.pp, c.interleave, c.recompute)]
        # … and with its weight gradients delayed to hide the backward's all-to-all too (Megatron-Core
        # --delay-wgrad-compute, ``plan.passes``): never slower in this model, tried beside it all the same
        out += [replace(c, delay_wgrad=True) for c in list(out) if c.overlap_ep]
    if ext.overlap:  # each context-parallel variant's gradients (over its dp · cp replicas) hidden the same way:
        # tried whether or not the seed fits, since regrouping dp as cp shrinks its activations
        out += [replace(c, overlap_grad_reduce=True) for c in contexts if not c.fsdp]
    out += _recompute_variants(seed, ext, fits)
    if "deepep" in ext.dispatchers and ext.node_devices:
        # the node-by-node exchange only differs from the flat one when an ep group spans nodes: with
        # Megatron's rank order (tp fastest, then dp) a group is tp × ep consecutive ranks
        out += [replace(c, dispatcher="deepep") for c in list(out)
                if c.ep > 1 and c.expert_tp is None and c.zero == base.zero and not c.fsdp and c.cp == 1
                and c.offload is None and c.tp * c.ep > ext.node_devices]
    seen: set[Candidate] = set()
    unique = []
    for c in out:
        if c.extended and c not in seen:
            seen.add(c)
            unique.append(c)
    return unique


def context_shapes(seed: Candidate, cp: int, devices: int) -> list[tuple[int, int]]:
    """(tp, dp) of the seed's context-parallel variants at ``cp``: the ring's ranks taken from its data-parallel
    replicas (dp / cp; the micro-batch count grows by cp), from its tensor group (tp / cp: a long sequence's
    activations split along the sequence rather than the hidden dimension), or from the devices the seed leaves idle
    (``devices``, the search's budget; 0: unknown). The dp regrouping alone never reached a ring on more devices than
    the seed's dp, and dp divides the global batch: a long-sequence run has few sequences per batch, so with 8 GPUs
    and 2 sequences of 16k tokens the rings of tp 2 × dp 2 × cp 2 were outside the space (a brute force over every
    mapping found them 18 % faster than the search's best; ``tests/test_search_brute_force.py`` checks one sequence
    on 4 GPUs, where no ring was reached at all)."""
    out = []
    if seed.dp % cp == 0:
        out.append((seed.tp, seed.dp // cp))
    if seed.tp % cp == 0:
        out.append((seed.tp // cp, seed.dp))
    if devices and seed.devices * cp <= devices:
        out.append((seed.tp, seed.dp))
    return list(dict.fromkeys(out))


def overlap_twins(c: Candidate, ext: Extensions) -> list[Candidate]:
    """``c`` with one more overlap option on, each where it applies (none when ``ext`` tries no overlap): the
    gradient reduction under the last backward (dp · cp replicas, not FSDP, which always prefetches), the
    tensor-parallel collectives under their GEMMs (tp > 1 with sequence parallelism), the experts' all-to-all behind
    another micro-batch (ep > 1, where Megatron-Core runs it: ``checks.ep_overlap_runs``) and, with it, the delayed
    weight gradients. Overlap frees no memory, so a candidate that fits fits with its twins too (the plan confirms),
    and each option hides a different communication: ``second_stage.extend`` tries these twins on the best
    candidates it ranked, since ``variants`` tries the options one at a time on the seeds that fit and never on
    the sharded variants of those that do not (e.g. ZeRO-2 with the overlapped reduction, 10-16 % faster than the
    search's best on models that only fit sharded, on 4 and 8 GPUs, ``tests/test_search_brute_force.py``)."""
    if not ext.overlap:
        return []
    out = []
    if replicas(c) > 1 and not c.fsdp and not c.overlap_grad_reduce:
        out.append(replace(c, overlap_grad_reduce=True))
    if c.tp > 1 and c.sequence_parallel and not c.overlap_tp:
        out.append(replace(c, overlap_tp=True))
    if c.ep > 1 and not c.overlap_ep and ep_overlap_runs(c.pp, c.interleave, c.recompute):
        out.append(replace(c, overlap_ep=True))
    if c.overlap_ep and not c.delay_wgrad:
        out.append(replace(c, delay_wgrad=True))
    return out


def zero_steps(c: Candidate, ext: Extensions) -> list[Candidate]:
    """``c`` (not FSDP) at the ZeRO stages next to its own among those ``ext`` tries, with its overlap options: the
    seeds' overlap variants keep the seed's stage (``variants``), so an overlapped expert all-to-all was tried at
    ZeRO-0 and the distributed optimizer without it, never both (1 % faster together on Mixtral 8x7B over 16 H100s,
    ``tilewright search presets/projects/mixtral-8x7b-dgx-h100.json --devices 16 --global-batch 16``).
    ``second_stage.extend`` tries these steps on its best candidates; none without replicas to shard over."""
    if c.fsdp or replicas(c) <= 1:
        return []
    stages = sorted(set(ext.zeros))
    if c.zero not in stages:
        return []
    i = stages.index(c.zero)
    return [replace(c, zero=stages[j]) for j in (i - 1, i + 1) if 0 <= j < len(stages)]


def micro_batch_steps(c: Candidate, global_batch: int) -> list[Candidate]:
    """``c`` at the next smaller and the next larger micro-batch its replicas' share of the batch allows. The first
    stage stops growing the micro-batch at the first that misses memory under ZeRO 0/1 and seeds the second stage
    with that one, so a variant that fits only sharded (ZeRO-2/3, FSDP, offload, ep, cp) was never tried at the
    larger micro-batch its freed memory holds (3 % faster on a model that fits only sharded,
    ``tests/test_search_brute_force.py``); ``second_stage.extend`` tries these steps on its best candidates."""
    per = global_batch // c.dp
    options = divisors(per) if per * c.dp == global_batch else ()
    if c.micro_batch not in options:
        return []
    i = options.index(c.micro_batch)
    return [replace(c, micro_batch=options[j]) for j in (i - 1, i + 1) if 0 <= j < len(options)]


def _recompute_variants(seed: Candidate, ext: Extensions, fits: bool) -> list[Candidate]:
    """The seed with selective recomputation of each recipe's modules (module docstring): for a seed under full
    recomputation (a list re-runs less of each layer) or one that missed memory with the default selective
    recomputation or none (a list stores less); ZeRO-1 where dp > 1 for the latter (it frees memory too)."""
    if not ext.recipes or seed.recompute_modules is not None:
        return []
    if seed.recompute is Recompute.full:
        zero = min(seed.zero, 1)
    elif not fits:
        zero = 1 if seed.dp > 1 and 1 in ext.zeros else min(seed.zero, 1)
    else:
        return []
    return [replace(seed, recompute=Recompute.selective, recompute_modules=r, zero=zero) for r in ext.recipes]


@dataclass
class Exact:
    """A candidate timed by the plan and the analytic engine: iteration time, peak memory, fits."""

    iteration_time_s: float
    peak_memory_bytes: float
    fits: bool


@dataclass
class Planner:
    """What every plan of one search shares: the model's workload graph and the system elaborated once per
    device count (a grown system differs) — elaborating thousands of devices costs more than a plan, and the
    collective shapes cached on a graph (``perf.collectives``) serve every plan on it. ``make_plan``'s plan
    (training) from the same graph and workload, for the second stage and the re-simulation alike."""

    workload: WorkloadGraph
    graphs: dict[int, HardwareGraph] = field(default_factory=dict)

    def plan(self, p: Project) -> Plan:
        devices = p.mapping.devices
        if devices not in self.graphs:
            self.graphs[devices] = elaborate(p.hardware, devices_needed=devices)
        return build_plan(p, self.graphs[devices], self.workload)


def exact_evaluator(
    project: Project, global_batch: int, planner: Planner | None = None
) -> Callable[[Candidate], Exact | None]:
    """Time candidates as ``tilewright run`` would with the analytic engine; None for a mapping the checks
    refuse (``plan.checks``: e.g. an ep that does not divide the stage's replicas, or a stage too small).
    ``planner``: the search's (None: one of its own, the same model for every candidate)."""
    run = project.run.model_copy(update={"engine": EngineKind.analytic})
    engine = AnalyticEngine(timeline=False, energy=False)
    planner = planner or Planner(build_workload(project.workload))

    def evaluate(c: Candidate) -> Exact | None:
        try:
            p = project.model_copy(update={"mapping": c.mapping(global_batch, project.mapping), "run": run})
        except ValueError:
            return None
        if check_project(p, workload=planner.workload):
            return None
        try:
            r = engine.run(planner.plan(p))
        except (InputError, ValueError):
            return None
        return Exact(r.iteration_time_s, r.peak_memory_bytes, r.oom is None and r.host_oom is None)

    return evaluate
