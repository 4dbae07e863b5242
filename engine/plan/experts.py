"""Expert parallelism for mixture-of-experts layers (``mapping.ep``; Lepikhin et al. 2020, Megatron-LM's
``--expert-model-parallel-size``), from the metadata the workload puts on MoE ops (``ir.ops.ExpertInfo``).

The ep ranks are carved out of the data-parallel replicas (ep divides dp): replicas ``k·ep … k·ep + ep − 1``
of a stage share their experts, each holding experts / ep of them, while every other weight stays whole on
every replica. That is Megatron-Core's layout with the experts split over the tensor group like any other
column/row op (expert tensor parallelism ``etp`` = tp, its default). With ``Mapping.expert_tp`` below tp
(MoE parallel folding, Liu et al. 2025, arXiv 2504.14960; Megatron-Core ``--expert-tensor-parallel-size``,
every Megatron-Bridge MoE recipe runs ETP 1) the MoE layer re-reads the stage's ranks: flattened
r = d·tp + t (replica d, tensor rank t) becomes r = ((k·ep) + e)·etp + u (expert-tensor rank u, expert rank
e, expert-data-parallel index k), Megatron-Core's expert rank generator (order tp-ep-dp). An ep group shares
(k, u) — ep × etp must divide tp × dp, not ep dp — an expert-tensor group shares (k, e) (etp consecutive
tensor ranks of one replica), an expert-data-parallel group shares (e, u): tp·dp / (ep·etp) ranks
(``group_comm.folded_groups``). The dense ops keep tp.

The same reading holds at ep 1 (``expert_tp × ep × expert_dp = tp × cp × dp`` in Megatron-Core's expert rank
generator, ``parallel_state.initialize_model_parallel``, for any expert_tp dividing tp): no all-to-all, each
expert-tensor group of etp consecutive tensor ranks runs every routed expert on its own tokens, each
expert's weights split by etp (``TEGroupedMLP``/``SequentialMLP`` in ``moe/experts.py`` build their
column/row-parallel linears with ``tp_group=pg_collection.expt_tp``) and replicated over a replica's
tp / etp groups, their gradients reduced over the tp · dp / etp ranks holding the same shard
(``experts_apart``: the plan counts the experts apart whenever ep > 1 or etp ≠ tp). The token dispatcher
takes its tensor group from the same place (``MoETokenDispatcher``: ``tp_group = pg_collection.expt_tp``,
``tp_ep_group = pg_collection.tp_ep``, etp × ep ranks), so ``MoEAllGatherTokenDispatcher.token_dispatch``
gathers the layer's tokens over etp ranks — not at all at etp 1 (it gathers only when
``tp_size > 1 or ep_size > 1``) — and Megatron-LM asks for sequence parallelism with MoE and tensor
parallelism (``training/arguments.py``): each rank's tokens are its sequence shard (``plan.checks``).

With context parallelism (``mapping.cp``) the stage's replicas are its dp · cp ones (replica d · cp + c,
Megatron's dense order tp-cp-dp; ``plan.plan.build_plan``), and the MoE layer folds over all of them:
Megatron-Core's expert rank generator has cp = 1 and expert data parallelism tp · cp · dp / (ep · etp) of a
stage (``initialize_model_parallel``), so everything above reads dp · cp for dp — ep divides cp · dp
(ep × etp divides tp × cp × dp when folded), an ep group may span context and data-parallel ranks, and the
expert-data-parallel group (gradient reduction, ZeRO sharding) is tp · cp · dp / (ep · etp) ranks. Each
device runs micro_batch / cp samples' worth of tokens, so its all-to-all carries those tokens. Per device:

- routed-expert weights (``role == expert``): ``params / ep`` (and / etp instead of / tp when folded:
  ``shard_experts`` rewrites the op so the plan's split by tp yields ``params / (ep·etp)``);
- routed-expert work: unchanged on a balanced router — the device runs the token-slots the ep ranks route
  to its experts, as many as its own tokens have — times ``mapping.expert_imbalance`` (≥ 1), the busiest
  device's load over the mean, which sets the pace of every rank that waits for it in the combine (left unset:
  dropless routing's statistical floor, ``plan.routing_imbalance``, resolved once per plan);
- an all-to-all over the ep group before the first routed-expert op (dispatch: each token's hidden vector to
  each of its expert slots) and after the last (combine: the outputs back); the backward moves the same
  amounts in reverse. Of a device's buffer, (ep − 1)/ep leaves it. An imbalanced router sizes it by the
  busiest rank, which receives ``expert_imbalance`` × its share in the dispatch and sends as much back in the
  combine (``busiest``); the permutation of a rank's own tokens stays balanced. With tensor parallelism each
  tensor rank sends 1/tp of it (tokens split by sequence, Megatron's all-to-all dispatcher), whatever etp.
  After the dispatch Megatron-Core's all-to-all dispatcher gathers what the device *received* — token-slots,
  each token once per expert slot routed to it — over the expert-tensor group, and reduce-scatters as many
  before the combine (``MoEAlltoAllTokenDispatcher.dispatch_postprocess``, ``combine_preprocess``:
  ``gather_from_sequence_parallel_region`` / ``reduce_scatter_to_sequence_parallel_region`` over
  ``expt_tp_group``). So with ep > 1 the plan sizes the gather and reduction around the routed experts by the
  token-slots (``gathered_elems``: token-slots · hidden, top_k × the dense layer's tokens · hidden, times the
  capacity factor when padded), over the tensor group at etp = tp, over the expert-tensor groups with etp / tp
  of the bytes below it, none at etp 1 (``expert_tp_comm``). Without expert parallelism (ep 1, and every pass
  that is not training) the all-gather dispatcher's collective is the dense one:
  ``MoEAllGatherTokenDispatcher`` gathers the layer's tokens before routing (tokens · hidden) and
  reduce-scatters them after the local un-permutation — over the tensor group at etp = tp, over the
  expert-tensor groups (etp / tp of the bytes) below it, none at etp 1. A device's expert GEMMs then run etp /
  tp of its replica's token-slots on 1/etp of the width: FLOPs per device stay flops / tp on a balanced
  router. The flex dispatcher (``'deepep'``) has no separate gather — its exchange spans the tp × ep group and
  sends a token to every tensor rank of an expert — but moves the same token-slots to the same ranks, so the
  plan charges it the same gather. All pairs exchange at once: one phase whose per-link use counts the routes
  crossing it (``all_to_all``), with NCCL's per-call cost of a grouped send/recv on fabrics that name its
  protocols (``exchange_latency``: ~11 µs on one DGX H100 node at tiny sizes, as nccl-tests measures). With
  ``Mapping.ep_dispatcher`` 'deepep' (DeepEP, Megatron-Core's flex dispatcher with DeepEP or HybridEP) a token
  crosses the network once per destination node and is forwarded inside the node (``hierarchical_all_to_all``),
  its nodes capped by node-limited routing (``MoESpec.max_nodes_per_token``).

Gradients of the routed experts are reduced (and, with ZeRO-1/2, their updated weights gathered) over the
dp / ep replicas that hold the same experts (Megatron-Core's expert-data-parallel group; tp·dp / (ep·etp)
ranks when folded, ``expert_dp``), the other weights' over all replicas (``Plan.dp_collective``); ZeRO
shards the experts' optimizer state (and gradients, weights at stages 2, 3) over that group too
(``perf.memory.expert_model_state``), and ZeRO-2/3's per-layer gathers and reduce-scatters of the experts
run over it (``plan.sharding``, kind ``edp:``). Not modelled: token
dropping at a capacity factor beyond the FLOPs the workload already pads.

**The dispatcher's own work on a GPU** (Megatron-Core's ``MoEAlltoAllTokenDispatcher``,
``megatron/core/transformer/moe/token_dispatcher.py``, with ``moe_permute_fusion``: one kernel per
permutation), beyond the router GEMM, the routing op and the combine (the un-permutation, weighted by the
router's probabilities) that the workload already has (``dispatch_work``):

- ``dispatch_preprocess`` permutes the rank's tokens into expert order (``permute``: each token's hidden
  vector gathered once per expert slot, token-slots × hidden elements read and written);
- ``dispatch_postprocess`` sorts the received token-slots by local expert when a rank holds more than one
  (``sort_chunks_by_idxs``: read and written once more), and ``combine_preprocess`` sorts them back before
  the combine's all-to-all (the combine's un-permutation is the workload's ``combine`` op). Both run on the
  far side of the expert-tensor collective — the sort after ``gather_from_sequence_parallel_region`` over
  the expert-tensor group, its inverse before the reduce-scatter — so with expert tensor parallelism they
  cover the etp ranks' gathered token-slots: etp × the slots the device's own all-to-all brings;
- the backward runs each permutation's inverse over the gradients: the same traffic, in reverse order;
- dropless (no capacity factor), ``preprocess`` copies the per-expert token counts to the host
  (``tokens_per_expert``, the all-to-all's ``input_splits``/``output_splits``, the grouped GEMM's
  ``m_splits``) and ``_maybe_dtoh_and_synchronize`` waits for them at one sync point per layer forward
  (``before_ep_alltoall`` with ep > 1 or several local experts, else ``before_finish``): the host's lead is
  thrown away once per MoE layer per forward (``launch.drain_seconds``). The backward reuses the counts (the
  all-to-all's autograd function and ``GroupedLinear`` keep the splits): no sync. With a capacity factor
  Megatron-Core pads every expert to its capacity (``drop_and_pad``) and never syncs;
- the host's own work around every MoE op (router, routing, dispatcher, ``GroupedLinear`` per local expert,
  combine: ``plan.moe_host``) replaces the op kind's generic ``launch.host_seconds`` (``DispatchWork.host_s``):
  it binds where the device runs the layer faster than the host issues it;
- fp8 grouped GEMMs need every expert's rows in multiples of the recipe's alignment, so ``TEGroupedMLP``
  (``megatron/core/transformer/moe/experts.py``, ``forward``: ``quantization_padding`` of the permuted tokens
  before fc1, ``quantization_unpadding`` of fc2's output) copies the token-slots into a padded buffer and back
  out (``fp8_padded``). Transformer Engine's ``Fp8Padding`` (``transformer_engine/pytorch/module/
  fp8_padding.py``) returns its input untouched only when every split is aligned already; otherwise it
  allocates the padded tensor and copies every row into it (``tex.fused_multi_row_padding``), its backward
  copies the gradient's rows back out (``fused_multi_row_unpadding``); ``Fp8Unpadding`` (``fp8_unpadding.py``)
  is its inverse (``torch.split`` and ``torch.cat`` forward, ``fused_multi_row_padding`` backward). Each pass
  reads and writes the op's token-slots once more (``DispatchWork.pad_bytes``: the same slots as the sort,
  the expert-tensor group's gathered ones), beside the op on the side of its all-to-all. Alignment: 16 rows,
  32 for MXFP8 (``Fp8Padding.align_size``). Dropless, a layer's counts are whatever the router chose: all
  local experts aligned by chance with probability about (1/16)^local — charged always. Drop-and-pad, every
  local expert gets ep · etp capacities (``get_capacity`` over the rank's tokens · top_k): padded only when
  that is unaligned (the NeMo Qwen3-30B token-drop rows: 512 rows per capacity, none). The probabilities are
  padded too (one fp32 per row against a row of hidden elements: not counted), and the padded rows' extra
  GEMM work (under align − 1 rows per expert) is left out. Megatron-Core's ``moe_router_padding_for_fp8``
  (pads the routing map instead, default off, no recipe here sets it) is not modelled.
- biased experts (``ExpertInfo.output_bias``, gpt-oss: ``add_bias_linear``) add fc2's bias outside the grouped
  GEMM, one expert at a time (``expert_bias_kernels``). ``TEGroupedMLP`` builds fc1 with ``skip_bias_add=False``
  (Transformer Engine's ``GroupedLinear`` adds that bias inside its GEMMs) but fc2 with ``skip_bias_add=True``,
  and its ``forward`` ends with ``_apply_bias(output, output_bias, tokens_per_expert, permuted_probs)``::

      torch.cat([t + b * p for t, b, p in zip(torch.split(output, tokens_per_expert), bias_parallel,
                                              torch.split(permuted_probs, tokens_per_expert))])

  (NVIDIA/Megatron-LM ``megatron/core/transformer/moe/experts.py``, ``TEGroupedMLP._apply_bias``, the same in
  every copy read, 2025-2026): each bias is scaled by its tokens' routing probabilities (the combine sums
  the weighted expert outputs, so the bias must be weighted too), which the GEMM epilogue cannot do. Eager
  PyTorch, per local expert: ``b * p`` writes the expert's rows (one kernel; b and p are a row and a column),
  ``t + …`` reads two and writes one (one kernel); then ``torch.cat`` reads and writes every row once (one
  kernel): 2·L + 1 kernels over 6 passes of the rows' bytes (L local experts). Autograd's backward, per
  expert: ``MulBackward0`` for the bias (``grad · p``, a kernel reading and writing the rows, reduced to the
  bias's shape by a second kernel reading them) and for the probabilities (``grad · b``, the same two);
  ``AddBackward0`` and ``CatBackward0`` hand views on; then ``torch.split``'s backward concatenates the
  rows' gradients (one kernel, one read and one write) and the probabilities' (one kernel, negligible
  bytes): 4·L + 2 kernels over 8 passes. Charged at the activations' width (a bias, the probabilities and the
  output in one dtype: an fp32 ``permuted_probs`` would promote the products to fp32 and add a cast, not
  counted); the rows are the combine side's (the sorts', etp ranks' gathered slots with ep > 1). Only under
  Megatron-Core's training code (``framework``); the recomputed activation (``moe_act``) does not re-run it.
- a clamped gated unit (``ExpertInfo.glu_clamp``, gpt-oss: ``TransformerDims.glu_clamp``) runs Megatron-Core's
  ``weighted_bias_quick_geglu_impl`` (NVIDIA/Megatron-LM ``megatron/core/fusions/fused_bias_geglu.py``, the
  path ``TEGroupedMLP.bias_act_func`` takes for ``quick_gelu`` with ``gated_linear_unit``; Megatron-Bridge's
  ``GPTOSSProvider``: ``activation_func`` quick_gelu, ``glu_linear_offset`` 1.0, ``activation_func_clamp_value``
  7.0, ``bias_activation_fusion`` True). Its fused kernel (a ``jit_fuser`` Function, the activation op's own
  cost) is preceded by eager PyTorch (``glu_clamp_kernels``)::

      x_glu, x_linear = input.chunk(2, -1)
      input = torch.cat((x_glu.clamp(min=None, max=clamp_value),
                         x_linear.clamp(min=-clamp_value, max=clamp_value)), -1)
      linear_offset = torch.tensor(linear_offset, dtype=input.dtype, device=input.device)

  Forward: two clamps (each reads and writes one half) and the concatenation (reads and writes both): 8
  passes of a half's bytes in 3 kernels; then ``torch.tensor`` of a Python scalar on the device, a blocking
  host-to-device copy (``memcpy_and_sync``: ``cudaMemcpyAsync`` then ``cudaStreamSynchronize``; pytorch/pytorch
  issue #120996, ``plan.deepspeed_host``): its copy's floor, then a drain (``launch.drain_seconds``) before the
  fused kernel. A CUDA-graph-safe variant replacing it by ``input.new_full`` is carried as a patch by
  MLCommons' gpt-oss training reference (``PATCH_GEGLU_GRAPH_SAFE``), not by Megatron-Core. Backward (autograd,
  ``clamp_backward`` in PyTorch's ``FunctionsManual.cpp``): the gate's clamp with a max only is a comparison
  (reads the saved input, writes a 1-byte mask) and a ``where`` (reads the mask and the gradient, writes one),
  beside the zero scalar it fills; the linear half's clamp with both bounds two comparisons, a
  ``logical_and_`` and the ``where``, beside its zero; then ``chunk``'s backward concatenates the halves'
  gradients (reads and writes both): 9 kernels. Selective recomputation of ``moe_act`` (``CheckpointWithoutOutput``
  re-runs ``bias_act_func``) pays the forward again, its copy and drain with it.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.hardware import Compute
from tilewright.engine.ir.mapping import Fp8Scaling, Mapping
from tilewright.engine.ir.ops import ExpertInfo, MoERole, Op, TensorSplit
from tilewright.engine.ir.project import Project
from tilewright.engine.perf.collective_costs import costs_of, protocol_choice
from tilewright.engine.perf.collective_phase import Collective, Phase, route_latency
from tilewright.engine.perf.device import issues_kernels
from tilewright.engine.plan.launch import drain_seconds
from tilewright.engine.plan.moe_host import Fp8, framework_host

EP_PREFIX = "ep:"  # expert parallelism's all-to-all, a segment collective (``plan.sharding``)
ETP_PREFIX = "etp:"  # a routed expert's tensor-parallel collective over its expert-tensor group (etp < tp)
# NCCL's send/recv protocols: LL while a peer's bytes fit nChannels × NCCL_P2P_LL_THRESHOLD (16 KiB), else
# Simple; never LL128 (src/enqueue.cc, the p2p planner). The all-to-all is grouped send/recv (``exchange_latency``).
P2P_PROTOCOLS = frozenset({"LL", "Simple"})


def expert_tp_of(mapping: Mapping, train: bool = True) -> int:
    """The expert-tensor-parallel degree in force: ``mapping.expert_tp`` (None: tp, Megatron's default),
    with or without expert parallelism (ep 1 folds too: every routed expert on every expert-tensor group);
    tp in a pass that is not training (serving splits every op by tp)."""
    if not train or mapping.expert_tp is None:
        return mapping.tp
    return mapping.expert_tp


def experts_apart(ep: int, etp: int, tp: int) -> bool:
    """Whether the routed experts have a layout of their own: expert parallelism, or expert tensor
    parallelism differing from tp (ep 1 included). Then their weights are counted apart, their gradients
    reduced and their ZeRO shards held over the expert-data-parallel group (``expert_dp``); otherwise
    they are split over tp like every other op and reduced with the dense weights, bit for bit as before."""
    return ep > 1 or etp != tp


def expert_dp(tp: int, dp: int, ep: int, etp: int) -> int:
    """Ranks of a stage holding the same routed-expert shard (Megatron-Core's expert-data-parallel group):
    tp · dp / (ep · etp); dp / ep when etp = tp. With context parallelism ``dp`` is the stage's dp · cp
    replicas (the expert rank generator folds cp in)."""
    return max(tp * dp // max(ep * etp, 1), 1)


def shard_experts(ops: list[Op], ep: int, imbalance: float, tp: int = 1, etp: int | None = None) -> list[Op]:
    """A layer's ops as one ep rank holds and runs them (module docstring). With ``etp`` below ``tp`` (MoE
    parallel folding) a routed-expert op is rewritten so that the plan's tensor-parallel split by tp
    (``perf.op_cost``, ``perf.memory``) yields one device's share: params · tp / etp (→ params / (ep · etp)),
    the stacked GEMM's rows · etp / tp and its split dimension · tp / etp (→ m · etp / tp, width / etp); its
    FLOPs and tensors stay (→ / tp: the same token-slot share of the stage's work, ``flops / tp``)."""
    fold = etp is not None and etp != tp
    if ep <= 1:  # one rank runs every expert over all the routed tokens: no busier rank than the mean
        imbalance = 1.0
    if ep <= 1 and not fold:
        return ops
    out = []
    for op in ops:
        if op.moe is not None and op.moe.role is MoERole.expert:
            update: dict[str, object] = {
                "params": op.params / ep,
                "flops": op.flops * imbalance,
                "bwd_flops": op.backward_flops * imbalance,
            }
            if imbalance != 1.0:
                update["moe"] = busiest(op.moe, imbalance)
            if fold:
                update["params"] = op.params / ep * tp / etp  # type: ignore[operator]
                if op.gemm is not None:
                    update["gemm"] = folded_gemm(op, tp, etp)  # type: ignore[arg-type]
            op = op.model_copy(update=update)
        out.append(op)
    return out


def busiest(info: ExpertInfo, imbalance: float) -> ExpertInfo:
    """A routed-expert op's metadata as the busiest ep rank sees it under ``mapping.expert_imbalance``: its
    experts get ``imbalance`` × their share of the tokens (``tokens_fraction``), so the dispatch brings it
    ``imbalance`` × the token-slots a balanced router would and the combine sends as many back. An
    all-to-all finishes when its busiest receiver (and the links into it) has its bytes, and every rank
    waits for it: the exchange is sized by that rank's receive (``exchange``) — the per-link model spreads
    the same bytes over every route, the busiest rank's own links the ones that bind. What a rank sends of
    its own tokens stays balanced (``own_share``: the dispatcher's permutation)."""
    return info.model_copy(update={
        "tokens_fraction": info.tokens_fraction * imbalance,
        "dispatch_elems_per_token": info.dispatch_elems_per_token * imbalance,
        "combine_elems_per_token": info.combine_elems_per_token * imbalance,
    })


def received_scale(info: ExpertInfo) -> float:
    """The token-slots an ep rank receives over a balanced router's (``busiest``): its experts' share of the
    tokens over top_k · capacity factor / experts; 1 for a balanced op (and for a share left at 0)."""
    balanced = info.top_k * (info.capacity_factor or 1.0) / info.experts
    return info.tokens_fraction / balanced if info.tokens_fraction > 0 else 1.0


def folded_gemm(op: Op, tp: int, etp: int) -> tuple[float, float, float]:
    """A routed-expert GEMM (m, n, k) rewritten for expert tensor parallelism ``etp`` under the plan's
    split by ``tp`` (``shard_experts``): after the all-to-all and the gather over the expert-tensor group a
    device runs etp / tp of the replica's token-slots (m) on 1 / etp of the width (n for column-split, k for
    row-split ops)."""
    m, n, k = op.gemm  # type: ignore[misc]
    f = tp / etp
    if op.split is TensorSplit.row:
        return m / f, n, k * f
    return m / f, n * f, k


def routed_experts(ops: list[Op]) -> list[Op]:
    """The routed-expert ops of a layer: their weights are sharded over ep, their gradients reduced over the
    dp / ep replicas that hold the same experts (``plan.group_comm.expert_groups``)."""
    return [op for op in ops if op.moe is not None and op.moe.role is MoERole.expert]


def exchange(op: Op, backward: bool, tokens_scale: float, tp: int, elem_bytes: float) -> tuple[float, float]:
    """(before, after) all-to-all bytes per tensor rank around one op of a pass; ``tokens_scale`` is the
    pass's samples per device (the micro-batch). The backward runs the ops in reverse: the combine's
    gradient goes out before the op, the dispatch's after."""
    info = op.moe
    if info is None:
        return 0.0, 0.0
    per = info.tokens * tokens_scale * elem_bytes / tp
    dispatch, combine = info.dispatch_elems_per_token * per, info.combine_elems_per_token * per
    return (combine, dispatch) if backward else (dispatch, combine)


def all_to_all(hw: HardwareGraph, group: list[int], nbytes: float) -> Collective:
    """Every member sends nbytes / p to each other member at once: one phase, each member (p − 1)/p · nbytes,
    ``usage[link]`` = routes crossing the link / (p − 1) (a member's bytes split evenly over its routes), timed
    by the fabric's collective library where it names one (``exchange_latency``)."""
    p = len(group)
    if p <= 1 or nbytes <= 0:
        return Collective("exchange", "none", ())
    phase = _pairs_phase(hw, [group], (p - 1) / p * nbytes)
    nodes = _by_node(hw, group)
    g = min(len(m) for m in nodes)
    rounds = [(p - 1, group)] if len(nodes) == 1 else [(p - g, group), (g - 1, nodes[0])]
    timed = exchange_latency(hw, [(phase, group)], rounds)
    if timed is None:
        return Collective("exchange", "all-to-all", (phase,))
    (phase,), fraction = timed
    return Collective("exchange", "all-to-all", (phase,), fraction)


def exchange_latency(
    hw: HardwareGraph, parts: list[tuple[Phase, list[int]]], rounds: list[tuple[int, list[int]]]
) -> tuple[tuple[Phase, ...], float] | None:
    """An exchange's phases — each with the members whose fabric carries it — timed as NCCL runs an
    all-to-all, grouped ``ncclSend``/``ncclRecv`` to every peer (Megatron-Core's ``all_to_all``:
    ``torch.distributed.all_to_all_single``), by the fabrics' protocols (``collective_costs.protocol_choice``,
    NCCL's tuning model, which prices every other collective); None where a fabric names none (the phases
    keep their routes' latency).

    NCCL's p2p planner runs a member's exchange as p − 1 rounds, one peer each (send to rank + r, receive
    from rank − r), in one kernel launch, each round on channels of its own (``ncclP2pChannelBaseForRound``):
    the rounds' data moves at once, so a phase pays the protocol's fixed cost (once per exchange) and one
    step of its latency, its bytes at the protocol's payload fraction. Protocols: LL and Simple only
    (``P2P_PROTOCOLS``); the one that finishes first wins, as NCCL's LL threshold picks LL for small shares.
    What the rounds do not share is their issue — each peer's send and receive enqueued by the host and, to
    another node, posted by the proxy thread one after the other — charged per round at the fastest step
    NCCL's model knows on the round's fabric (LL's): ``rounds`` lists (rounds, members whose fabric reaches
    those peers), added to the first phase. On the dgx-h100 preset, 8 GPUs of one node at 128 B: LL,
    6.6 + 0.6 + 7 × 0.6 = 11.4 µs; 16 GPUs over two nodes: 6.6 + 2.7 + 8 × 2.7 + 7 × 0.6 = 35.1 µs."""
    choice = protocol_choice(hw, [(ph.usage, 1.0, members) for ph, members in parts], P2P_PROTOCOLS)
    if choice is None:
        return None
    picked, fraction = choice.pick([ph.usage for ph, _ in parts], [ph.bytes_per_member for ph, _ in parts])
    issue = sum(n * _fastest_step(hw, members) for n, members in rounds if n > 0)
    first = picked[0]
    return (Phase(first.usage, first.bytes_per_member, first.latency_s + issue), *picked[1:]), fraction


def _fastest_step(hw: HardwareGraph, members: list[int]) -> float:
    """The smallest per-step latency the protocols of the fabric joining ``members`` name (NCCL's LL)."""
    costs = costs_of(hw, members)
    return min((pr.step_s for pr in costs.protocols), default=0.0) if costs is not None else 0.0


def _by_node(hw: HardwareGraph, group: list[int]) -> list[list[int]]:
    """``group``'s members node by node (the device's parent component), in order of first appearance."""
    by_node: dict[str, list[int]] = {}
    for d in group:
        by_node.setdefault(hw.devices[d].node.rsplit("/", 1)[0], []).append(d)
    return list(by_node.values())


# per hardware graph (held weakly: a search's planner keeps its graphs for the whole search), per tuple of groups:
# the usage and latency of their pairwise exchange (``_pairs_phase``)
_PAIRS: WeakKeyDictionary = WeakKeyDictionary()


def _pairs_phase(hw: HardwareGraph, groups: list[list[int]], per_member: float) -> Phase:
    """One phase in which every member of each group (disjoint, all at once) sends ``per_member`` bytes split
    evenly over its routes to the group's other members: ``usage[link]`` = routes crossing it / (p − 1).
    The usage and latency depend on the groups alone: kept per hardware graph (``_PAIRS``), since a search
    prices the same groups' exchanges at many sizes and in many plans (p² routes each: 99 % of a DeepSeek-V3
    import's minutes on 1,024 devices)."""
    key = tuple(tuple(g) for g in groups)
    memo = _PAIRS.setdefault(hw, {})
    hit = memo.get(key)
    if hit is None:
        usage: Counter = Counter()
        latency = 0.0
        for group in groups:
            for a in group:
                for b in group:
                    if a != b:
                        route = hw.device_route(a, b)
                        usage.update({lk: 1.0 / (len(group) - 1) for lk in route})
                        latency = max(latency, route_latency(hw, route))
        hit = memo[key] = (dict(usage), latency)
    return Phase(dict(hit[0]), per_member, hit[1])


@dataclass(frozen=True, slots=True)
class Routing:
    """What a node-deduplicated exchange needs of the router (``MoESpec``): experts, top_k, node limit."""

    experts: int
    top_k: int
    max_nodes: int | None = None


def routing_for(project: Project) -> Routing | None:
    """The router of a project whose mapping exchanges tokens node by node (``Mapping.ep_dispatcher``
    'deepep'), else None (the flat all-to-all). A custom workload has no ``MoESpec``: flat."""
    moe = getattr(project.workload, "moe", None)
    if project.mapping.ep_dispatcher != "deepep" or moe is None:
        return None
    return Routing(moe.experts, moe.top_k, moe.max_nodes_per_token)


def distinct_nodes(r: Routing, nodes: int) -> float:
    """Expected nodes a token's top_k experts lie on, the experts spread evenly over ``nodes`` and chosen
    uniformly (a balanced router): nodes · (1 − P(no expert on a given node)), P = C(E − E/n, k) / C(E, k);
    at most the node limit (DeepSeek-V3's node-limited routing keeps each token within M nodes)."""
    if nodes <= 1:
        return 1.0
    per = r.experts / nodes
    miss = math.comb(r.experts - round(per), r.top_k) / math.comb(r.experts, r.top_k)
    expected = nodes * (1.0 - miss)
    return min(expected, float(r.max_nodes)) if r.max_nodes is not None else expected


def hierarchical_all_to_all(hw: HardwareGraph, group: list[int], nbytes: float, r: Routing) -> Collective:
    """DeepEP's node-deduplicated exchange (``Mapping.ep_dispatcher`` 'deepep'; DeepSeek-V3 report §3.2.2)
    of a member's ``nbytes`` (top_k copies of each token's vector, as ``all_to_all`` sends them). Two phases:

    - network: each token goes once to every other node holding one of its experts, to the GPU there with
      the sender's local index: ``distinct_nodes`` × (n − 1)/n of a token's vector instead of top_k ×
      (n − 1)/n of it, spread evenly over the n − 1 peers of the same local index;
    - node fabric: the arrivals (and the node's own tokens) forwarded to the GPUs of their experts within the
      node: every copy once, (g − 1)/g of them to another of the node's g members, an all-to-all per node.

    The phases run one after the other (DeepEP pipelines them in chunks: an upper bound on its time). A group
    within one node is the flat all-to-all; one member per node has no forwarding. The fixed part is NCCL's
    (``exchange_latency``: n − 1 network rounds, g − 1 NVLink ones): DeepEP's own kernels (NVSHMEM) are not
    NCCL, so that is an estimate of theirs, not a measured one."""
    nodes = _by_node(hw, group)
    n, g = len(nodes), min(len(m) for m in nodes)
    if n <= 1 or nbytes <= 0:
        return all_to_all(hw, group, nbytes)
    same_index = [[members[i] for members in nodes] for i in range(g)]
    phases = [_pairs_phase(hw, same_index, nbytes * distinct_nodes(r, n) / r.top_k * (n - 1) / n)]
    fabrics, rounds = [same_index[0]], [(n - 1, same_index[0])]
    if g > 1:
        phases.append(_pairs_phase(hw, nodes, (g - 1) / g * nbytes))
        fabrics.append(nodes[0])
        rounds.append((g - 1, nodes[0]))
    timed = exchange_latency(hw, list(zip(phases, fabrics, strict=True)), rounds)
    if timed is None:
        return Collective("exchange", "hierarchical all-to-all", tuple(phases))
    return Collective("exchange", "hierarchical all-to-all", timed[0], timed[1])


def is_ep(kind: str) -> bool:
    return kind.startswith(EP_PREFIX)


def is_etp(kind: str) -> bool:
    return kind.startswith(ETP_PREFIX)


def gathered_elems(op: Op, elems: float, ep: int) -> float:
    """Elements per sample of the tensor-parallel collective at a routed-expert op's input or output
    (``elems``, as the op counts them: token-slots · hidden, tokens · top_k times the capacity factor when
    capacity is padded). With expert parallelism (ep > 1, Megatron-Core's all-to-all dispatcher) the
    expert-tensor group gathers the token-slots the all-to-all brought and reduce-scatters them before the
    combine: ``elems``. Without it (the all-gather dispatcher) the layer's tokens are gathered before routing
    permutes them and reduced after the combine un-permutes them locally: tokens · hidden, the slots over
    top_k (× capacity factor). Any other op: ``elems``. The busiest rank of an imbalanced router gathers what
    it received: ``received_scale`` × the balanced slots (``busiest``)."""
    info = op.moe
    if info is None or info.role is not MoERole.expert:
        return elems
    if ep > 1:
        return elems * received_scale(info)
    return elems / (info.top_k * (info.capacity_factor or 1.0))


def expert_tp_comm(
    op: Op, kind: str, elems: float, tp: int, etp: int | None, ep: int = 1
) -> tuple[str, float] | None:
    """A tensor-parallel collective at an op's input or output ((kind, elements per sample), ``elems`` as
    the op counts them) under expert parallelism ``ep`` and expert tensor parallelism ``etp``: any op but a
    routed expert unchanged; a routed expert's sized by ``gathered_elems`` (token-slots with ep > 1, tokens
    without), over the tensor group at etp = tp (None), none at etp 1 (whole experts: the dispatcher gathers
    nothing), otherwise over the op's expert-tensor group (``ETP_PREFIX``, etp consecutive tensor ranks)
    carrying etp / tp of the elements — the same per-device share, gathered over etp ranks instead of tp."""
    if op.moe is None or op.moe.role is not MoERole.expert:
        return kind, elems
    elems = gathered_elems(op, elems, ep)
    if etp is None or etp == tp:
        return kind, elems
    if etp <= 1:
        return None
    return ETP_PREFIX + kind, elems * etp / tp


@dataclass(frozen=True, slots=True)
class DispatchWork:
    """The token dispatcher's device work beside one op's pass (module docstring): bytes its permutation
    kernel streams through device memory on the far side of the op's all-to-all (the dispatch side's
    ``permute``: before it in the forward, its inverse after it in the backward), bytes its sort kernel
    streams between the op and its all-to-all (``sort_chunks_by_idxs`` or its inverse), the device's idle time
    draining the host before any of it (dropless forward), the host seconds of Megatron-Core's code behind the
    op's pass (``moe_host.framework_host``), charged instead of ``launch.host_seconds`` (None: the generic
    charge stands), and the bytes of fp8's padding copy beside the sort (``fp8_padded``; 0 in bf16)."""

    permute_bytes: float = 0.0
    sort_bytes: float = 0.0
    sync_s: float = 0.0
    host_s: float | None = None
    pad_bytes: float = 0.0  # TEGroupedMLP's fp8 padding copy beside the op (``fp8_padded``), where the sort runs
    bias_kernels: tuple[float, ...] = ()  # bytes of each kernel of TEGroupedMLP's per-expert fc2 bias (beside the op)
    clamp_kernels: tuple[float, ...] = ()  # bytes of each eager kernel of a clamped GLU (``glu_clamp_kernels``)


NO_DISPATCH = DispatchWork()


def dispatch_work(
    op: Op, backward: bool, tokens_scale: float, tp: int, ep: int, elem_bytes: float, compute: Compute,
    fp8: Fp8 = False, framework: bool = True, etp: int | None = None, fused_router: bool = False,
) -> DispatchWork:
    """The dispatcher's work around a routed-expert op on a device a host framework drives kernel by kernel
    (``issues_kernels``; grids and wafers run their own dataflow): on the dispatch side (the op whose input
    the all-to-all brings) the permutation, the sort by local expert and, dropless forward, the host sync; on
    the combine side (the op whose output goes back) the sort back. Each pass reads and writes the side's
    token-slots once: the permutation the device's own (1/tp of the replica's), the sorts, with ep > 1, the
    ``etp`` expert-tensor ranks' gathered ones (None: tp; module docstring). ``tokens_scale``: samples per
    pass. With ``framework`` (Megatron-Core training) every MoE op also carries its host work and the dropless
    forward its host sync (``moe_host``;
    ``fp8``: its GroupedLinear quantizes per expert, by the recipe given; ``fused_router``: the routing op's
    counts are Transformer Engine's fused router's, ``mapping.moe_router_fusion``)."""
    info = op.moe
    if info is None or not issues_kernels(compute):
        return NO_DISPATCH
    host = framework_host(op, backward, ep, fp8, compute, fused_router) if framework else None
    dispatch, combine = exchange(op, False, tokens_scale, tp, elem_bytes)  # token-slot bytes each side
    if info.role is MoERole.expert and info.glu_clamp and framework:  # the activation's eager clamps (docstring)
        half = op.out_elems * tokens_scale / tp * (received_scale(info) if ep > 1 else 1.0)
        return DispatchWork(sync_s=0.0 if backward else drain_seconds(compute), host_s=host,
                            clamp_kernels=glu_clamp_kernels(half, elem_bytes, backward))
    if info.role is not MoERole.expert or (not dispatch and not combine):
        return NO_DISPATCH if host is None else DispatchWork(host_s=host)
    own = dispatch / received_scale(info)  # the permutation reorders the rank's own tokens: balanced
    sorts = 1 if info.experts / ep > 1 else 0  # sort_chunks_by_idxs only with several local experts
    if ep > 1:  # the all-to-all dispatcher sorts after the expert-tensor gather: etp ranks' slots
        sorts *= tp if etp is None else etp
    # Megatron-Core's dropless sync; a serving runtime (``framework`` False) keeps the counts on the device —
    # vLLM's fused MoE aligns the token-slots to its experts in a kernel (``moe_align_block_size``) — and
    # replays its decode steps as CUDA graphs, which cannot hold a host synchronisation
    sync = dispatch > 0 and not backward and info.capacity_factor is None and framework
    gathered = tp if etp is None else etp  # the GroupedLinear's rows: the expert-tensor group's slots
    pads = framework and fp8_padded(info, fp8, info.tokens * tokens_scale / tp, ep * gathered)
    bias = (expert_bias_kernels(combine * (gathered if ep > 1 else 1), max(1, info.experts // ep), backward)
            if framework and info.output_bias else ())
    return DispatchWork(2 * own, 2 * (dispatch + combine) * sorts, drain_seconds(compute) if sync else 0.0, host,
                        2 * (dispatch + combine) * gathered if pads else 0.0, bias)


def glu_clamp_kernels(half: float, elem_bytes: float, backward: bool) -> tuple[float, ...]:
    """Bytes each eager kernel of a clamped gated unit streams in one pass (module docstring), ``half``: the
    elements of one half of the device's fc1 output (token-slots × expert width). Forward: the gate's clamp,
    the linear half's clamp, their concatenation, the offset's host-to-device copy (no bytes: its floor);
    backward: the gate's comparison, zero and ``where``, the linear half's two comparisons, ``logical_and_``,
    zero and ``where`` (1-byte masks), and the concatenation of the halves' gradients."""
    h = half * elem_bytes
    if not backward:
        return 2 * h, 2 * h, 4 * h, 0.0
    compare, where = h + half, 2 * h + half
    return compare, 0.0, where, compare, compare, 3 * half, 0.0, where, 4 * h


def expert_bias_kernels(rows_bytes: float, local: int, backward: bool) -> tuple[float, ...]:
    """Bytes each kernel of ``TEGroupedMLP._apply_bias`` streams in one pass (module docstring), over
    ``rows_bytes`` (the combine side's token-slots × hidden at the activations' width) split evenly over
    ``local`` experts: forward ``b * p`` (one pass) and ``t + b·p`` (three) per expert, then the concatenation
    (two); backward per expert the bias's and the probabilities' product (two passes each) and reduction
    (one each), then the split's concatenation of the rows' gradients (two) and of the probabilities' (none
    counted)."""
    per = rows_bytes / local
    if backward:
        return (2 * per, per, 2 * per, per) * local + (2 * rows_bytes, 0.0)
    return (per, 3 * per) * local + (2 * rows_bytes,)


# Transformer Engine's row alignment of an fp8 grouped GEMM's splits (``Fp8Padding.align_size``,
# transformer_engine/pytorch/module/fp8_padding.py: 32 under MXFP8, 16 under the other recipes)
FP8_ALIGN = 16
MXFP8_ALIGN = 32


def fp8_padded(info: ExpertInfo, fp8: Fp8, rank_tokens: float, ranks: int) -> bool:
    """Whether ``TEGroupedMLP`` pads its token-slots for an fp8 grouped GEMM (module docstring): never in bf16
    (``fp8`` False); always dropless (the router's counts, unaligned but by chance); drop-and-pad only when a
    local expert's rows — ``ranks`` (ep · etp) capacities of ``get_capacity(rank_tokens · top_k, experts,
    capacity_factor)`` = ⌈rank_tokens · top_k / experts · capacity_factor⌉ — are not a multiple of the
    recipe's alignment (``FP8_ALIGN``, ``MXFP8_ALIGN``)."""
    if not fp8:
        return False
    if info.capacity_factor is None:
        return True
    align = MXFP8_ALIGN if fp8 == Fp8Scaling.mxfp8 else FP8_ALIGN
    capacity = math.ceil(rank_tokens * info.top_k / info.experts * info.capacity_factor)
    return (capacity * ranks) % align != 0
