"""One DGX-H100 row as a project and its simulated outcome: ``project_for`` maps a row (``nemo_h100_published``)
and its recipe (``nemo_h100_recipes``) onto the nearest expressible project, ``evaluate`` runs it.

Mappings follow the published columns and the row's recipe (``Recipe``):

- sequence parallelism on whenever tp > 1 (``WorkloadBaseConfig.__post_init__``; the Megatron-LM recipes set
  ``sequence_parallel``);
- Megatron-Core's fused (flash) attention: selective recomputation of the attention core (it stores what a
  flash kernel stores) plus the fusion chain attention → softmax (one kernel, no score traffic), as
  ``presets/projects/tpu-v4-llama2-7b.json`` expresses it; a recipe without recomputation runs 'none', which
  with the fused chain stores and runs the same;
- the distributed optimizer (ZeRO-1) with overlapped gradient reduction and parameter gather, or FSDP (ZeRO-3
  with prefetch)
  where the FSDP column says so; fp8 rows run ``--dtype fp8`` (weighted GEMMs on the fp8 units, with
  the quantization passes of ``Recipe.fp8_recipe``, the scaling the run used: ``mapping.formats.fp8_scaling``);
- MoE: ``expert_imbalance`` left unset: dropless rows take the statistical floor of force-balanced routing
  (``plan.routing_imbalance``), token-drop rows none; the recipe's expert tensor parallelism, token dispatcher,
  expert all-to-all overlap, selective recomputation modules, CUDA-graph scopes and fused router; a token-drop
  row routes at Megatron-Bridge's capacity factor 1 padded to capacity (``TOKEN_DROP_CAPACITY``).

Force-balanced routing (``moe_router_force_load_balancing``, Megatron-Core ``router.py`` ``RandomSTE``) replaces
the router's logits by fresh normal samples every forward: each token's top-k is a uniformly random k-subset of
the experts, so a rank's expert load is a sum over the ep group's tokens with a sub-percent spread (Qwen3-30B,
mbs 2 × 4096 tokens on each of 8 ep ranks, top-8 of 128 experts, 16 per rank: each token puts a hypergeometric
1 ± 0.91 slots on a rank, 65,536 ± 233 token-slots per rank, the busiest of 8 ranks 0.54 % above the mean).
That floor is what the unset ``expert_imbalance`` resolves to for a dropless row (``plan.routing_imbalance``:
1.005-1.018 over these rows); a trained router's further skew is not what these benchmarks measure.

Where a published mapping or recipe setting cannot be expressed, the nearest one that can is run and the row
says what was changed (``Row.gaps``): that list is the point of this check as much as the errors are.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass

from nemo_h100_models import chunk_layers, model_spec
from nemo_h100_published import Row
from nemo_h100_recipes import FP8_BF16_LAYERS, FP8_SCALING, TOKEN_DROP_CAPACITY
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import Mapping, Project, RunSettings
from tilewright.engine.ir.mapping import TensorFormats
from tilewright.engine.ir.workload import LlamaSpec
from tilewright.engine.simulate import simulate

FLASH = [["attention", "softmax"]]  # Megatron-Core's fused attention: one kernel, scores stay on chip


def _largest_divisor(n: int, limit: int, also: int) -> int:
    return max(d for d in range(1, limit + 1) if n % d == 0 and also % d == 0)


def project_for(row: Row, engine: str = "analytic") -> Project:
    """The nearest expressible project; fills ``row.gaps`` with what differs from the published run."""
    p, r = row.pub, row.pub.run_recipe
    spec = model_spec(p.model, p.seq)
    gaps: list[str] = []
    dp = p.gpus // (p.tp * p.pp * p.cp)
    ep = p.ep
    etp = (r.expert_tp or p.tp) if ep > 1 and p.tp > 1 else None  # None: tp (ours and Megatron's)
    if ep > 1 and (p.tp * dp) % (ep * (etp or p.tp)):
        experts = spec.moe.experts if spec.moe else 1
        ep = _largest_divisor(dp, dp, experts)
        gaps.append(f"ep {p.ep} × expert tp {etp or p.tp} does not fold over tp×dp ({p.tp}×{dp}): run at ep {ep}")
    layout = None
    if p.vp > 1 and spec.layers % (p.pp * p.vp):  # Megatron's uneven interleaved layout
        layout = chunk_layers(p.model, spec.layers, p.pp, p.vp)
    if p.token_drop and spec.moe is not None:  # drop-and-pad at capacity 1: balanced by construction, no host sync
        spec = spec.model_copy(update={"moe": spec.moe.model_copy(update={"capacity_factor": TOKEN_DROP_CAPACITY})})
    if spec.moe is not None and r.load_balancing != spec.moe.load_balancing:  # the recipe's balancing loss
        spec = spec.model_copy(update={"moe": spec.moe.model_copy(update={"load_balancing": r.load_balancing})})
    if not r.rope_fusion and isinstance(spec, LlamaSpec):  # Megatron-Core's eager RoPE (plan.eager_rope)
        spec = spec.model_copy(update={"rope_fusion": False})
    mbs = r.micro_batch or p.mbs
    if mbs != p.mbs:
        gaps.append(f"published MBS {p.mbs} contradicts the recipe's micro_batch_size {mbs} (and the row's own GA): "
                    f"run at mbs {mbs}")
    # the fp8 rows' scaling recipe (mapping.formats.fp8_scaling: perf.op_cost's quantization kernels)
    # and the layers it keeps in bf16 (``FP8_BF16_LAYERS``: perf.formats' edge layers)
    first, last = FP8_BF16_LAYERS[r.fp8_recipe]
    formats = (TensorFormats(fp8_scaling=FP8_SCALING[r.fp8_recipe], bf16_first_layers=first, bf16_last_layers=last)
               if p.precision == "fp8" else TensorFormats())
    gaps.extend(r.unmodelled)
    if r.mtp_layers:
        spec = spec.model_copy(update={"mtp_layers": r.mtp_layers})
    row.gaps = gaps
    mapping = Mapping(
        tp=p.tp, pp=p.pp, dp=dp, cp=p.cp, ep=ep, expert_tp=etp, sequence_parallel=p.tp > 1, interleave=p.vp,
        pipeline_layers=layout, micro_batch=mbs, global_batch=p.gbs, fusion=FLASH,
        recompute=r.recompute, recompute_layers=r.recompute_layers,
        recompute_modules=list(r.recompute_modules) if r.recompute_modules is not None else None,
        cuda_graph_scope=list(r.cuda_graph_scope) if r.cuda_graph_scope is not None else None,
        fused_cross_entropy=True,  # cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="te" in every recipe
        overlap_tp_comm=r.tp_overlap is not None and p.tp > 1,  # tp_comm_overlap with the recipe's userbuffers
        tp_overlap_reduce_scatter=r.tp_overlap_rs,
        # the distributed optimizer with overlap_grad_reduce and overlap_param_gather: Megatron-Bridge's
        # CommOverlapConfig._get_optimizer_overlap_cfgs sets both whenever dp > 1 with the distributed optimizer
        # (src/megatron/bridge/training/comm_overlap.py), the Megatron-LM recipes as their YAMLs say
        # (nemo_h100_recipes); FSDP prefetches (fsdp sets overlap_param_gather itself)
        zero=0 if p.fsdp else 1, fsdp=p.fsdp, overlap_grad_reduce=r.dp_overlap, overlap_param_gather=r.dp_overlap,
        fp8_param_gather=p.precision == "fp8" and r.fp8_param_gather,  # fp8 weights only, gathered in fp8
        overlap_ep_comm=r.overlap_ep_comm, delay_wgrad_compute=r.delay_wgrad, ep_dispatcher=r.dispatcher,
        formats=formats,
        moe_router_fusion=r.router_fusion, optimizer_moments=r.optimizer_moments,
        optimizer_master=r.optimizer_master, grad_reduce_in_fp32=r.grad_reduce_in_fp32,
        log_params_norm=r.log_norms, log_num_zeros_in_grad=r.log_norms,  # plan.train_logging
        # every recipe runs Megatron-Core with Transformer Engine's layers (transformer_impl transformer_engine,
        # Megatron-Core's default and Megatron-Bridge's): their host time per op (plan.framework_host)
        host_framework="mcore-te",
        # the scripts' rule (BRIDGE_H100) whenever dp, pp and vp are all > 1; an FSDP run (ZeRO-3) has no post-step
        # gather to overlap (plan.checks), and no FSDP row is pipelined
        overlap_param_gather_with_optimizer_step=(r.param_gather_with_step and not p.fsdp
                                                  and dp > 1 and p.pp > 1 and p.vp > 1),
    )
    return Project(name=row.label, hardware=load_system("dgx-h100"), workload=spec, mapping=mapping,
                   run=RunSettings(dtype=p.precision, engine=engine))


@dataclass
class Outcome:
    row: Row
    tokens_per_gpu: float
    our_tflops: float
    breakdown: dict[str, float]
    oom: bool
    wall_s: float

    @property
    def error(self) -> float:
        return self.tokens_per_gpu / self.row.pub.tokens_per_gpu - 1

    @property
    def nv_tflops(self) -> float:
        """Our tokens/s in NVIDIA's FLOPs per token (their TFLOP/s over their tokens/s)."""
        p = self.row.pub
        return self.tokens_per_gpu * p.tflops_per_gpu / p.tokens_per_gpu


@dataclass
class Measured:
    """One project simulated as the training benchmarks read it: per-GPU tokens/s and model TFLOP/s, the time
    breakdown, whether it ran out of (device or host) memory, and the simulation's wall time."""

    tokens_per_gpu: float
    tflops: float
    breakdown: dict[str, float]
    oom: bool
    wall_s: float


def measure(project: Project) -> Measured:
    """Simulate ``project`` (shared by calibrate_nemo_h100, calibrate_fsdp and calibrate_moe_gpu)."""
    t0 = time.perf_counter()
    res = simulate(project)
    wall = time.perf_counter() - t0
    m = res.metrics_json()
    tflops = res.model_flops_per_iteration / res.iteration_time_s / res.devices / 1e12
    return Measured(m["tokens_per_s"] / res.devices, tflops, m["time_breakdown_s"],
                    res.oom is not None or res.host_oom is not None, wall)


def evaluate(row: Row, engine: str = "analytic") -> Outcome:
    m = measure(project_for(row, engine))
    return Outcome(row, m.tokens_per_gpu, m.tflops, m.breakdown, m.oom, m.wall_s)


CLEAN = "all but reported regressions"  # the rows whose release's maintainers reported no regression of them
CLEAN_MOE = "moe but reported regressions"


def summary(outcomes: list[Outcome]) -> dict[str, float]:
    """Mean |error| of tokens/s per GPU by family (dense/MoE) and precision (bf16/fp8), overall, and over the rows
    no reported regression explains (``Published.regression``)."""
    groups: dict[str, list[float]] = defaultdict(list)
    for o in outcomes:
        groups["all"].append(abs(o.error))
        groups["moe" if o.row.moe else "dense"].append(abs(o.error))
        groups[o.row.pub.precision].append(abs(o.error))
        if not o.row.pub.regression:
            groups[CLEAN].append(abs(o.error))
            if o.row.moe:
                groups[CLEAN_MOE].append(abs(o.error))
    return {k: sum(v) / len(v) for k, v in groups.items()}
