"""Host (CPU) work of Megatron-Core's MoE layer per pass, beside what ``plan.launch`` charges a dense layer.

A GPU's segment lasts max(device, host) (``plan.launch``). ``launch.KERNELS``/``HOST_CALLS`` count one op kind's
framework work from Megatron-LM's GPT layer; an MoE layer's ops (router, routing, routed experts, combine) stand
for far more Python than a dense op of the same kind: the router's top-k, score and aux-loss bookkeeping, the
token dispatcher's metadata, device-to-host copies and autograd Functions, and Transformer Engine's
``GroupedLinear``, whose work grows with the local experts (experts / ep). This module counts it for one MoE
layer, per op of ours, and the plan charges the count *instead of* the op kind's generic one (``host_s``). Under
the overlapped expert-parallel schedule (``mapping.overlap_ep_comm``) the layer's schedule nodes add their own host
work on top: ``plan.a2a_host``.

Counted from the public code (NVIDIA/Megatron-LM ``megatron/core/transformer/moe``; NVIDIA/TransformerEngine
``transformer_engine/pytorch/module/grouped_linear.py`` and ``csrc/extensions/cast.cpp``) for the configuration
NVIDIA's published MoE runs use: the all-to-all dispatcher, ``moe_permute_fusion``, dropless, aux-loss load
balancing (softmax scores, top-k before softmax), ``TEGroupedMLP`` with the fused weighted SwiGLU, expert tensor
parallelism 1; bf16, or fp8 with current scaling (FP8-CS). Three kinds of host work, each at its own cost:

- ``kernels``: launches through PyTorch's eager path (Python, autograd, ATen dispatch): ``host_dispatch_s``;
- ``calls``: framework calls that launch nothing (views, module and method calls, ``torch.empty``, stream and
  event calls, a D2H copy's bookkeeping; a Python autograd ``Function``'s apply or backward counts 3, as in
  ``plan.launch``): ``host_call_s``;
- ``per_expert``: calls made once per local expert inside each ``GroupedLinear`` (two per layer: fc1 with gate
  and up fused, fc2), at ``host_call_s``. Kernels TE launches from a C++ loop (current scaling's amax, scale and
  cast-transpose per expert) pay ``cudaLaunchKernel`` without Python, autograd or ATen: counted here as calls;
- ``per_expert_gemms``: the cuBLASLt GEMMs TE's multi-stream path issues per local expert (``GroupedLinear``'s
  ``general_grouped_gemm`` → ``nvte_multi_stream_cublas_gemm`` → ``cublas_gemm`` once per expert), at
  ``host_dispatch_s``. Each ``cublas_gemm`` call builds its matmul descriptor, four matrix layouts and a preference
  with its alignment attributes, asks ``cublasLtMatmulAlgoGetHeuristic`` for an algorithm, launches and destroys
  them all again (TransformerEngine ``transformer_engine/common/gemm/cublaslt_gemm.cu``, read at 5c62f7283a65;
  later versions keep the per-call heuristic query): no algorithm cache. RAFT measured that un-memoized
  cuBLASLt path at about 10 us of host from entering its matmul wrapper to the kernel's launch, 5 us once the
  heuristic and descriptors were memoized (rapidsai/raft pull request #1736, 2023, NVTX ranges) — the preset's
  ``host_dispatch_s`` (10 us, an eager PyTorch launch), not a plain call's ``host_call_s`` (3 us). Forward one
  GEMM per expert, backward two (data and weight gradients), bf16 and fp8 alike.

Per group (forward; backward), ``n`` = local experts:

- router (``router.py`` ``TopKRouter.forward``/``gating``, ``moe_utils.router_gating_linear``): the input and
  weight casts to the router's fp32 and the logits GEMM (3 kernels); module, jitter, bias-dtype and gating
  calls, the gating Function (9 calls). Backward: its Function (3), the two GEMMs and the cast back (3 kernels).
- routing (``router.py`` ``routing``/``aux_loss_load_balancing``/``apply_load_balancing_loss``,
  ``moe_utils.topk_routing_with_score_function``, ``compute_routing_scores_for_aux_loss``,
  ``get_tokens_per_expert_and_token_count``, ``switch_load_balancing_loss_func``, ``MoEAuxLossAutoScaler``,
  ``save_to_aux_losses_tracker``): top-k, softmax, cast, the probabilities' and the map's zeros/scatter/int/bool
  (9); the aux loss's own softmax, top-k and map (6), the counts' sum, the loss's sum, product, sum and scale
  (5); the tracker's division and accumulation (2) — 22 kernels; 27 calls (views, nested helpers, the
  reduction region's and the auto-scaler's Functions, the tracker). Backward: 11 kernels (the auto-scaler's
  ones and product, the loss's and both softmaxes' and top-k's gradients), 8 calls.
- dispatch (``token_dispatcher.py`` ``MoEAlltoAllTokenDispatcher.dispatch_preprocess``,
  ``preprocess``, ``_maybe_dtoh_and_synchronize``, ``dispatch_all_to_all``, ``dispatch_postprocess``;
  ``moe_utils.permute``/``sort_chunks_by_idxs``; ``tensor_parallel.mappings.all_to_all``): the counts' sums,
  the metadata all-gather over tp × ep and its reshapes (8 kernels), four non-blocking D2H copies of the
  splits (4), the fused permutation's three row-id-map kernels and the sort's chunk map (4: the permutation
  and sort kernels themselves are ``PassBuilder._stream``'s), the probabilities' all-to-all (1; the tokens' is the
  plan's collective) — 17 kernels; 58 calls (asserts and views, the four sync-point checks, the side stream's
  wait, context and event, each copy's ``record_stream`` and ``numpy``, the permutation's, sort's and two
  all-to-alls' Functions and buffers, ``TEGroupedMLP.forward``'s ``tolist`` and ``unsqueeze``), fp8 4 more
  (``Fp8Padding`` of the tokens and the probabilities). The host issues 15 kernels and 36 calls of it
  (metadata, copies, permutation) before the dropless forward's host sync, right after routing: they are
  charged with our routing op ("preprocess"), where the device still has the layer's earlier work to run;
  the rest (all-to-all calls, the sort's map, ``TEGroupedMLP``'s entry) with ``experts_up`` and fc1. Backward:
  the probabilities' all-to-all (1 kernel); the sort's, two all-to-alls' and the permutation's Functions and
  buffers (15 calls).
- gate: Megatron-Core's fc1 computes gate and up in one ``GroupedLinear``: nothing of its own.
- activation (``experts.py`` ``bias_act_func``, ``fusions/fused_bias_swiglu.weighted_bias_swiglu_impl``): 1
  kernel, 7 calls; backward 2 kernels (input and probabilities), 3 calls.
- combine side, on our ``experts_down``: ``_apply_bias`` (1 call), the sort back (``combine_preprocess``: the
  transposed splits' ``ravel`` copy and the chunk map, 2 kernels; Function and buffers), the combine's
  all-to-all Function — 13 calls, fp8 3 more (``Fp8Unpadding``). Backward: 6 calls.
- combine (``combine_postprocess``: the fused un-permutation's Function and buffer; ``MoELayer.forward``'s
  module call and its route/dispatch/compute/combine methods): 1 kernel, 15 calls; backward 1 kernel, 4 calls.
- each ``GroupedLinear`` (TE ``GroupedLinear.forward``/``_GroupedLinear.forward``, Megatron-Core's
  ``TEGroupedLinear``): fixed 27 calls (module calls, ``prepare_forward``, quantizer lookup, the Function, the
  output buffer, the grouped-GEMM wrapper, saving, the multi-stream events); per expert bf16 4 calls and its
  cuBLAS GEMM (the weight's attribute, its split view, its ``cast_if_needed``, its saved tensors), fp8 12 calls
  and the GEMM (the attribute, two quantizers' ``set_usage``, ``split_quantize``'s three buffers and current
  scaling's three kernels — its fused multi-tensor kernel is for delayed scaling only —, the weight workspace,
  saving, usage). Backward fixed 22 calls (the Function, restore, the dgrad buffer, two grouped GEMMs' wrappers
  and events); per expert the dgrad and wgrad GEMMs and bf16 5 calls (main-grad lookup, split view,
  ``handle_custom_ddp_from_mcore`` and its dummy ``torch.empty``, ``clear_tensor_data``), fp8 11 (the grad
  output's three buffers and three quantize kernels instead of the view, the weight's usage).

Not counted: NCCL's per-peer calls inside an uneven all-to-all, the tensor-parallel gathers of an expert-TP
layer, the shared experts (an ordinary MLP: ``plan.launch``'s counts), capacity-factor routing (padded: the
dispatcher's counts shrink; charged as dropless), and the extra kernels' device floors (host time only). The
flex dispatcher (``Mapping.ep_dispatcher`` 'deepep') is charged the all-to-all dispatcher's counts (its router
and GroupedLinear are the same code).

The fp8 recipe (``mapping.formats.fp8_scaling``) changes ``split_quantize``'s per-expert work (TE
``csrc/extensions/cast.cpp``: ``split_quantize``, ``multi_tensor_quantize_impl``,
``bulk_allocate_fp8_blockwise_tensors``), counted above for current scaling ('tensor'), the same for the
grad output's quantization in the backward:

- 'delayed': every expert's Float8Quantizer with a column-wise copy takes TE's one fused kernel for all
  tensors (``nvte_multi_cast_transpose``): the three kernels per expert go, one launch per GroupedLinear comes;
- 'block': the outputs are allocated in bulk (one row-wise and one column-wise buffer for all experts) and each
  expert is quantized by one kernel (``quantize_transpose_vector_blockwise`` computes its own scales): the
  three buffers and two of the three kernels per expert go, two allocations per GroupedLinear come;
- 'mxfp8': buffers allocated per expert as for current scaling, one kernel per expert instead of three.

``mapping.moe_router_fusion`` (Megatron-Core ``--moe-router-fusion``: ``moe_utils``'s ``fused=True`` branches call
Transformer Engine's ``transformer_engine/pytorch/router.py``) replaces the routing group's eager chain by three
autograd Functions, each one pybind call that launches one kernel (counted as an eager launch: Python, pybind,
the library's launch) and allocates its outputs in C++:

- ``topk_routing_with_score_function`` → ``fused_topk_with_score_function`` (``FusedTopkScoreFunction``): the
  top-k, softmax, cast and the probabilities' and map's zeros/scatter/int/bool (9 kernels) become 1; calls: the
  wrapper, ``_validate_routing_map_format``, the Function (3), ``mark_non_differentiable`` and
  ``save_for_backward`` (7), less the eager path's nested ``compute_topk`` (1);
- ``compute_routing_scores_for_aux_loss`` → ``fused_compute_score_for_moe_aux_loss``: the aux loss's softmax,
  top-k and map (6 kernels) become 1; calls: wrapper, validation, Function, ``save_for_backward`` (6);
- ``switch_load_balancing_loss_func`` → ``fused_moe_aux_loss`` (``FusedAuxLoss``): the loss's sum, product, sum
  and scale (4 kernels) become 1 (the counts' sum stays); calls: wrapper, Function, ``save_for_backward`` (5);
- unchanged: the counts' sum, the tracker's 2 kernels, the auto-scaler and the rest of the 27 calls.

Forward 22 − 8 − 5 − 3 = 6 kernels, 27 + 6 + 6 + 5 = 44 calls. Backward: the auto-scaler's ones and product stay
(2 kernels), the loss's, both softmaxes' and the top-k's gradients (9) become the three Functions' backward
kernels (3): 5 kernels; calls 8 + three Functions' backward (9) + their gradient buffers (``torch.empty_like``,
``torch.empty``: 2) = 19. So the fusion saves host time only where a launch (``host_dispatch_s``) costs more
than the calls it adds (``host_call_s``): on dgx-h100 16 · 8 − 17 · 3 = 77 µs forward, 6 · 8 − 11 · 3 = 15 µs
backward per MoE layer. The routing op's device cost is one kernel over the scores with or without it (the
plan never charged the eager chain's extra device floors, above): the fused path changes nothing there.

A router trained without a load-balancing loss (``MoESpec.load_balancing`` 'none', ``ExpertInfo.aux_loss`` False:
Megatron-Core's ``moe_router_load_balancing_type`` "none", which Megatron-Bridge's gpt-oss model sets —
``GPTOSSProvider`` in ``src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py`` and ``GPTOSSBridge.provider_bridge``
in ``gpt_oss_bridge.py``, NVIDIA-NeMo/Megatron-Bridge, read at 355cef457010 and 0e4d6ed607e0) skips the routing
group's aux-loss part (``AUX_LOSS``). ``TopKRouter.routing`` (NVIDIA/Megatron-LM
``megatron/core/transformer/moe/router.py``, every copy read with the fused router, 2025-2026) runs that part
only ``if self.training and torch.is_grad_enabled() and self.is_aux_loss_enabled()``, and
``is_aux_loss_enabled`` is true only when 'aux_loss', 'seq_aux_loss' or 'global_aux_loss' is the routing type
with a coefficient above 0 (``get_aux_loss_coeff``); "none" takes the same ``topk_routing_with_score_function``
as the others and nothing else. The part, per pass:

- forward, eager: the aux scores' softmax, top-k and map (6 kernels), the counts' sum (1), the loss's sum,
  product, sum and scale (4), the tracker's division and accumulation (2): 13 kernels; calls
  ``compute_routing_scores_for_aux_loss``, ``_apply_aux_loss`` and its coefficient lookup,
  ``get_tokens_per_expert_and_token_count`` and the tensor-parallel reduction's Function (3),
  ``switch_load_balancing_loss_func``, ``attach_and_log_load_balancing_loss``, ``save_to_aux_losses_tracker``,
  the auto-scaler's Function (3), ``_apply_seq_aux_loss`` and ``_apply_global_aux_loss`` with their lookups (4):
  17, less the two further lookups ``is_aux_loss_enabled`` makes when no type matches: 15 calls;
- forward, fused: the fused score and loss kernels (1 each) instead of 6 and 4, the counts' sum and the
  tracker's 2: 5 kernels; calls 17 + the two fused Functions' (6 and 5, above) − 2 = 26;
- backward, eager: the auto-scaler's ones and product (2), the aux scores' softmax gradient (1) and the loss's
  gradient (3: of the 9 gradient kernels above, the routing path's own are 5 — the scatter's gather, the cast,
  the softmax's gradient, the top-k's zeros and scatter — and the loss's the remainder): 6 kernels; calls the
  auto-scaler's and the reduction's Function backward (3 each): 6;
- backward, fused: the auto-scaler's 2 and the two fused Functions' backward kernels: 4; calls 6 + those
  Functions' backward (3 each) + one of the two gradient buffers: 13.

The routing group keeps forward 9 kernels and 12 calls (fused 1 and 18), backward 5 and 2 (fused 1 and 6). Other
balancing types ('seq_aux_loss', 'global_aux_loss', DeepSeek-V3's expert bias) are charged as 'aux_loss'.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.engine.ir.hardware import Compute
from tilewright.engine.ir.mapping import Fp8Scaling
from tilewright.engine.ir.ops import MoERole, Op, OpKind
from tilewright.engine.perf.device import issues_kernels
from tilewright.engine.plan.launch import host_time


@dataclass(frozen=True, slots=True)
class HostCount:
    """Host work of one group of Megatron-Core's MoE code in one pass (module docstring)."""

    kernels: int = 0  # eager launches: host_dispatch_s each
    calls: int = 0  # calls that launch nothing: host_call_s each
    per_expert: int = 0  # calls per local expert (GroupedLinear): host_call_s each
    per_expert_gemms: int = 0  # cuBLASLt GEMMs per local expert (GroupedLinear): host_dispatch_s each

    def minus(self, other: HostCount) -> HostCount:
        """This count without ``other``, a part of it (the routing group without its aux loss)."""
        return HostCount(self.kernels - other.kernels, self.calls - other.calls,
                         self.per_expert - other.per_expert, self.per_expert_gemms - other.per_expert_gemms)

    def seconds(self, local_experts: int, compute: Compute) -> float:
        return host_time(self.kernels + self.per_expert_gemms * local_experts,
                         self.calls + self.per_expert * local_experts, compute)


# group → (forward, backward), module docstring
GROUPS: dict[str, tuple[HostCount, HostCount]] = {
    "router": (HostCount(3, 9), HostCount(3, 3)),
    "routing": (HostCount(22, 27), HostCount(11, 8)),
    "preprocess": (HostCount(15, 36), HostCount()),  # the dispatcher before the host sync
    "dispatch": (HostCount(2, 22), HostCount(1, 15)),  # after it: all-to-all calls, sort map, TEGroupedMLP entry
    "gate": (HostCount(), HostCount()),
    "activation": (HostCount(1, 7), HostCount(2, 3)),
    "combine_side": (HostCount(2, 13), HostCount(0, 6)),
    "combine": (HostCount(1, 15), HostCount(1, 4)),
}
# the routing group under mapping.moe_router_fusion (module docstring): (forward, backward)
FUSED_ROUTING: tuple[HostCount, HostCount] = (HostCount(6, 44), HostCount(5, 19))
# the routing group's load-balancing loss, skipped without one (module docstring): fused? → (forward, backward)
AUX_LOSS: dict[bool, tuple[HostCount, HostCount]] = {
    False: (HostCount(13, 15), HostCount(6, 6)),
    True: (HostCount(5, 26), HostCount(4, 13)),
}
FP8_PADDING: dict[str, int] = {"dispatch": 4, "combine_side": 3}  # Fp8Padding / Fp8Unpadding calls, forward
# one GroupedLinear: (forward, backward), bf16 and fp8
GROUPED_LINEAR: dict[bool, tuple[HostCount, HostCount]] = {
    False: (HostCount(0, 27, 4, 1), HostCount(0, 22, 5, 2)),
    True: (HostCount(0, 27, 12, 1), HostCount(0, 22, 11, 2)),
}
# split_quantize per recipe against current scaling's (module docstring): (calls per GroupedLinear, per expert)
FP8_SPLIT_QUANTIZE: dict[Fp8Scaling, tuple[int, int]] = {
    Fp8Scaling.tensor: (0, 0),
    Fp8Scaling.delayed: (1, -3),  # one fused multi-tensor cast-transpose instead of 3 kernels per expert
    Fp8Scaling.block: (2, -5),  # two bulk buffers instead of 3 per expert; 1 kernel per expert instead of 3
    Fp8Scaling.mxfp8: (0, -2),  # 1 kernel per expert instead of 3
}
Fp8 = bool | Fp8Scaling  # an fp8 GroupedLinear's recipe; True: current scaling ('tensor'); False: bf16


def grouped_linear(backward: bool, fp8: Fp8) -> HostCount:
    """One GroupedLinear's host work in one pass, bf16 or under an fp8 recipe."""
    base = GROUPED_LINEAR[bool(fp8)][backward]
    if not fp8:
        return base
    calls, per_expert = FP8_SPLIT_QUANTIZE[Fp8Scaling.tensor if fp8 is True else Fp8Scaling(fp8)]
    return HostCount(base.kernels, base.calls + calls, base.per_expert + per_expert, base.per_expert_gemms)


# the groups that run a GroupedLinear: fc1 after the dispatch, fc2 on the combine side
LINEAR_GROUPS = frozenset({"dispatch", "combine_side"})


def groups(op: Op) -> tuple[str, ...]:
    """The groups of Megatron-Core's MoE layer an op of ours stands for (the routing op also for the
    dispatcher's work before the host sync: the host issues it right after routing); () for an op without MoE
    metadata or a shared expert (an ordinary MLP)."""
    info = op.moe
    if info is None:
        return ()
    if info.role is MoERole.router:
        return ("router",)
    if info.role is MoERole.routing:
        return ("routing", "preprocess")
    if info.role is MoERole.combine:
        return ("combine",)
    if info.role is not MoERole.expert:
        return ()
    if info.dispatch_elems_per_token > 0:
        return ("dispatch",)
    if info.combine_elems_per_token > 0:
        return ("combine_side",)
    return ("activation",) if op.kind is OpKind.elementwise else ("gate",)


def count(name: str, backward: bool, fp8: Fp8, fused_router: bool = False,
          aux_loss: bool = True) -> tuple[HostCount, ...]:
    """The counts one group's pass runs: its own (the routing group's fused one under ``fused_router``,
    ``mapping.moe_router_fusion``, without its load-balancing loss unless ``aux_loss``), its GroupedLinear's,
    fp8's padding calls."""
    own = FUSED_ROUTING[backward] if fused_router and name == "routing" else GROUPS[name][backward]
    if name == "routing" and not aux_loss:
        own = own.minus(AUX_LOSS[fused_router][backward])
    out = [own]
    if name in LINEAR_GROUPS:
        out.append(grouped_linear(backward, fp8))
        if fp8 and not backward:
            out.append(HostCount(calls=FP8_PADDING[name]))
    return tuple(out)


def framework_host(op: Op, backward: bool, ep: int, fp8: Fp8, compute: Compute,
                   fused_router: bool = False) -> float | None:
    """Host seconds of Megatron-Core's code behind one MoE op's pass on a device a host framework drives kernel
    by kernel (``issues_kernels``), to be charged instead of ``launch.host_seconds``; None elsewhere (grids and
    wafers, non-MoE ops, shared experts): the generic charge stands. ``ep``: expert-parallel ranks (the local
    experts are experts / ep; ``fused_router``: ``mapping.moe_router_fusion``)."""
    names = groups(op)
    if not names or not issues_kernels(compute):
        return None
    return group_seconds(op, names, backward, ep, fp8, compute, fused_router)


def group_seconds(op: Op, names: tuple[str, ...] | frozenset[str], backward: bool, ep: int, fp8: Fp8,
                  compute: Compute, fused_router: bool = False) -> float:
    """Host seconds of the named groups of one MoE op's pass: all of ``framework_host``, or the part a CUDA
    graph replays instead (``plan.cuda_graphs``: the router and routing under ``moe_router``, the dispatcher's
    work before the host sync under ``moe_preprocess``)."""
    local = max(1, op.moe.experts // max(ep, 1)) if op.moe is not None else 1
    aux = op.moe.aux_loss if op.moe is not None else True
    return sum(c.seconds(local, compute) for name in names for c in count(name, backward, fp8, fused_router, aux))
