"""CUDA-graphed training: what Megatron-Core's ``--cuda-graph-scope`` replays, and the host time it saves.

A GPU segment lasts max(device, host) (``plan.launch``): in eager mode the host issues every kernel (Python,
autograd, ATen, ``cudaLaunchKernel``), which small layers cannot hide. Megatron-Core captures parts of each
layer as CUDA graphs (``--cuda-graph-impl transformer_engine``: Transformer Engine's ``make_graphed_callables``,
a forward and a backward graph per captured callable; ``local``: its own ``CudaGraphManager``) and replays them:
the captured kernels are launched by one graph launch, so the host's per-kernel dispatch and the framework's
calls around them vanish for those ops. ``mapping.cuda_graph_scope`` names the parts, Megatron-Core's
``CudaGraphScope`` (``megatron/core/transformer/enums.py``):

- ``attn``: the attention part of a layer, ``TransformerLayer._forward_attention`` — the input norm, the
  projections (MLA's too), the core attention, the output projection and its bias-dropout-add;
- ``mlp``: a dense layer's MLP part, ``_forward_mlp`` — the pre-MLP norm, the MLP, its bias-dropout-add;
- ``moe``: the whole MoE layer, drop-and-pad routing only (a capacity factor): dropless routing needs the
  token counts on the host (the dispatcher's device-to-host copy and sync, ``plan.experts``), which a graph
  cannot capture;
- ``moe_router``: the pre-MLP norm, the router and its top-k/aux-loss routing, and the shared experts (unless
  they overlap the dispatch, which we do not model); ``moe_preprocess``: the token dispatcher's preprocessing
  before the host sync (``moe_host``'s ``preprocess`` group), with ``moe_router`` only. The routed experts,
  the all-to-alls and the combine stay eager;
- ``mamba``: Mamba layers (no workload of ours has them: refused as absent);
- ``full_iteration`` (``--cuda-graph-impl local`` only, alone): the whole forward-backward of an iteration,
  every op, one graph launch per iteration.

Sources: NVIDIA/Megatron-LM ``megatron/core/transformer/enums.py`` (the scopes),
``transformer_config.py`` ``__post_init__`` (``full_iteration`` needs ``local`` and no other scope; no
recomputation with graphs except selective recomputation under Transformer Engine, and not of what a scope
captures: ``RECOMPUTE_CONFLICTS``), ``cuda_graphs.py`` ``TECudaGraphHelper`` (Transformer Engine refuses
``full_iteration``), ``megatron/core/transformer/moe/README.md`` (partial graphs: ``moe`` token-drop only,
``moe_router`` with the shared experts, ``moe_preprocess`` with ``moe_router``; DeepSeek-V3 trained with
``attn moe_router moe_preprocess``).

**Host cost.** A captured op issues nothing from the host (``host_s`` 0, or for the routing op only its eager
groups, ``moe_host.group_seconds``). Each run of consecutive captured ops of a layer is one graph replay per
pass, forward and backward alike, charged one ``host_dispatch_s``: the graphed callable's Python and
``cudaGraphLaunch``, whose host cost is that of one kernel launch, a few µs (NVIDIA, "Getting Started with
CUDA Graphs", developer.nvidia.com/blog/cuda-graphs: one launch for the whole graph instead of one per
kernel). ``full_iteration`` launches once per iteration: nothing per pass. The device's per-kernel floor
(``Compute.fixed_op_s``, ``launch.extra_launches``) stays: a graph removes the host's dispatch, not the
kernels. Collectives keep their latency (their NCCL launch is part of it).

**Host synchronisations.** ``full_iteration`` also removes the per-pass drains ``plan.train_step`` charges
and the data-parallel reduction's, not the optimizer step's (``plan.train_step``'s docstring; the passes carry
``ChunkPass.captured``); the partial scopes leave them all (they sit between the captured callables).

Not modelled: the graphs' memory (static input/output buffers and the capture pools), the selective
recompute pass (it re-runs only modules outside the captured scopes, eagerly, as Megatron-Core refuses the
others), and a shared expert overlapped with the dispatch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tilewright.engine.ir.hardware import Compute
from tilewright.engine.ir.ops import MoERole, Op, OpKind
from tilewright.engine.perf.recompute import DEFAULT_MODULES, DENSE_MLP, consumers, local_name, named, with_role
from tilewright.engine.plan.moe_host import Fp8, group_seconds

Match = Callable[[Op, list[Op]], bool]

ATTENTION = ("q_down", "q_norm", "q_up", "q_proj", "kv_down", "kv_norm", "kv_up", "qkv", "qk_norm", "attention",
             "softmax", "attention_dropout", "out_proj", "dropout1", "post_attention_norm", "residual1")
ATTENTION_INPUTS = ("qkv", "q_down", "q_proj", "kv_down")  # what the input norm feeds
MLP_TAIL = ("dropout2", "post_mlp_norm", "residual2")  # the MLP's (or MoE layer's) bias-dropout-add
FULL_ITERATION = "full_iteration"


def _feeds(names: Sequence[str]) -> Match:
    """A norm some op of ``names`` reads: the input norm of the module that op begins."""
    return lambda op, ops: op.kind is OpKind.norm and any(local_name(r) in names for r in consumers(op, ops))


def _dense(ops: list[Op]) -> bool:
    return not any(o.moe is not None for o in ops)


_MOE_INPUTS = ("router", "experts_up", "experts_gate", "shared_up", "shared_gate")


@dataclass(frozen=True)
class Part:
    """Ops of a scope that ``match``: wholly captured (``groups`` None), or only these groups of their
    Megatron-Core host work (``moe_host.GROUPS``)."""

    match: Match
    groups: frozenset[str] | None = None


SCOPES: dict[str, tuple[Part, ...]] = {
    "attn": (Part(named(*ATTENTION)), Part(_feeds(ATTENTION_INPUTS))),
    "mlp": (Part(lambda op, ops: _dense(ops) and (local_name(op) in DENSE_MLP + MLP_TAIL
                                                  or _feeds(DENSE_MLP)(op, ops))),),
    "moe": (Part(lambda op, ops: not _dense(ops) and (op.moe is not None or local_name(op) in MLP_TAIL
                                                      or _feeds(_MOE_INPUTS)(op, ops))),),
    "moe_router": (Part(with_role(MoERole.router, MoERole.shared)),
                   Part(with_role(MoERole.routing), frozenset({"routing"})),
                   Part(lambda op, ops: not _dense(ops) and _feeds(("router",))(op, ops))),
    "moe_preprocess": (Part(with_role(MoERole.routing), frozenset({"preprocess"})),),
    "mamba": (),
    FULL_ITERATION: (Part(lambda _op, _ops: True),),
}
# selective recomputation Megatron-Core refuses beside a scope (transformer_config.py __post_init__)
RECOMPUTE_CONFLICTS: dict[str, tuple[str, ...]] = {
    "attn": ("core_attn", "mla_up_proj"),
    "mlp": ("mlp",),
    "moe": ("moe_act", "moe", "shared_experts"),
    "moe_router": ("moe", "shared_experts"),
}
GRAPH_LAUNCH_DISPATCHES = 1  # host cost of one graph replay, in kernel dispatches (module docstring)


@dataclass(frozen=True, slots=True)
class Capture:
    """One op under CUDA graphs: wholly replayed, or only ``groups`` of its MoE host work; ``launches``: graph
    replays charged with it (the first op of each run of captured ops)."""

    whole: bool
    groups: frozenset[str] = frozenset()
    launches: int = 0

    def host(self, op: Op, backward: bool, host: float, framework: bool, ep: int, fp8: Fp8,
             compute: Compute, fused_router: bool = False) -> float:
        """The op's host seconds under graphs, from its eager ``host`` (``framework``: ``host`` counts
        Megatron-Core's MoE groups, ``moe_host``; else a partial capture saves nothing we could name)."""
        launch = self.launches * GRAPH_LAUNCH_DISPATCHES * compute.host_dispatch_s
        if self.whole:
            return launch
        if not framework or not self.groups:
            return host + launch
        return max(0.0, host - group_seconds(op, self.groups, backward, ep, fp8, compute, fused_router)) + launch


def layer_graphs(ops: list[Op], scope: Sequence[str]) -> dict[str, Capture]:
    """Per op name of one layer (in forward order), what ``scope`` captures of it; ops left eager are absent.
    Each run of consecutive captured ops is one graph, its first op charged the replay (none per pass under
    ``full_iteration``: one replay per iteration)."""
    if not scope:
        return {}
    caught: dict[str, tuple[bool, frozenset[str]]] = {}
    for name in dict.fromkeys(scope):
        for part in SCOPES.get(name, ()):
            for op in ops:
                if part.match(op, ops):
                    whole, groups = caught.get(op.name, (False, frozenset()))
                    caught[op.name] = (whole or part.groups is None, groups | (part.groups or frozenset()))
    per_pass = FULL_ITERATION not in scope
    out: dict[str, Capture] = {}
    running = False
    for op in ops:
        got = caught.get(op.name)
        if got is None:
            running = False
            continue
        out[op.name] = Capture(got[0], frozenset() if got[0] else got[1], int(per_pass and not running))
        running = True
    return out


def present(layers: Sequence[list[Op]], name: str) -> bool:
    """Whether any layer holds something scope ``name`` captures."""
    return any(part.match(op, ops) for ops in layers for part in SCOPES[name] for op in ops)


_ABSENT = {
    "attn": "no attention layers", "mlp": "no dense MLP layers", "moe": "no mixture-of-experts layers",
    "moe_router": "no mixture-of-experts layers", "moe_preprocess": "no mixture-of-experts layers",
    "mamba": "no Mamba layers (not modelled)",
}


def _dropless(layers: Sequence[list[Op]]) -> bool:
    """Whether an MoE layer routes without a capacity factor: its dispatcher syncs the host on the counts."""
    return any(op.moe is not None and op.moe.capacity_factor is None for ops in layers for op in ops)


def problems(scope: list[str], layers: Sequence[list[Op]], train: bool, recompute: str,
             recompute_modules: list[str] | None) -> list[str]:
    """What is wrong with ``mapping.cuda_graph_scope`` for a workload's transformer ``layers`` (Megatron-Core's
    rules, module docstring); ``recompute``: the mapping's recomputation ('none', 'selective', 'full')."""
    if not train:
        return ["CUDA-graphed training; an inference runtime's graphs are the device's Compute.runtime_graphs"]
    if not scope:
        return ["give at least one scope (None: no CUDA graphs)"]
    unknown = [s for s in dict.fromkeys(scope) if s not in SCOPES]
    if unknown:
        return [f"unknown scope{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} (known: {', '.join(SCOPES)})"]
    if FULL_ITERATION in scope:
        if len(set(scope)) > 1:
            return [f"{FULL_ITERATION} captures the whole iteration and takes no other scope "
                    "(Megatron-Core: cuda_graph_impl local, cuda_graph_scope [full_iteration])"]
        if recompute != "none":
            return [f"{FULL_ITERATION} (cuda_graph_impl local) does not run with activation recomputation "
                    f"(recompute '{recompute}')"]
        if _dropless(layers):
            return [f"{FULL_ITERATION} cannot capture dropless MoE: its dispatcher copies the token counts to the "
                    "host every layer, which a captured iteration cannot wait for (give the MoE a capacity factor)"]
        return []
    out = [f"'{name}': the model has nothing it captures: {_ABSENT.get(name, 'no such part')}"
           for name in dict.fromkeys(scope) if not present(layers, name)]
    if "moe_preprocess" in scope and "moe_router" not in scope:
        out.append("'moe_preprocess' needs 'moe_router' (the dispatcher's preprocessing follows the router)")
    if "moe" in scope and "moe_router" in scope:
        out.append("'moe' already captures the router: give 'moe' or 'moe_router', not both")
    if "moe" in scope and _dropless(layers):
        out.append("'moe' captures drop-and-pad MoE only: dropless routing syncs the host on the token counts "
                   "(use 'moe_router' and 'moe_preprocess', or give the MoE a capacity factor)")
    if recompute == "full":
        out.append("CUDA graphs do not run with full recomputation (Megatron-Core: selective only)")
    elif recompute == "selective":
        modules = DEFAULT_MODULES if recompute_modules is None else recompute_modules
        for name in dict.fromkeys(scope):
            clash = [m for m in modules if m in RECOMPUTE_CONFLICTS.get(name, ())]
            if clash:
                out.append(f"'{name}' cannot be captured while selective recomputation re-runs "
                           f"{', '.join(clash)} (Megatron-Core refuses it)")
        if "layernorm" in modules and {"attn", "mlp"} <= set(scope) and {"moe", "moe_router"} & set(scope):
            out.append("'layernorm' recomputation leaves no norm outside these scopes (Megatron-Core refuses it)")
    return out

