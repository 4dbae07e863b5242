"""Sharded data parallelism inside the passes: ZeRO stages 2 and 3 and FSDP (Rajbhandari et al., SC'20).

What each stage communicates over the data-parallel group (each tensor-parallel rank with its peers in the
other replicas), per training iteration of ``m`` micro-batches. With context parallelism (``mapping.cp``,
``plan.context``) that group is the dp · cp replicas: the context ranks hold the same weights, and
Megatron-Core shards its distributed optimizer and its gradient and parameter buffers over the
data-parallel group *with* context parallelism (``DistributedDataParallel`` allocates the dense buffers on
``intra_dp_cp_group``; ``get_megatron_optimizer`` builds the ``DistributedOptimizer`` on the same group), so
every shard below is 1 / (dp · cp) and every gather and reduce-scatter runs over dp · cp ranks:

- stage 1 (and Megatron's distributed optimizer): a reduce-scatter of the gradients after the last
  backward and an all-gather of the updated weights after the optimizer step (``Plan.dp_collective``,
  ``Plan.zero_gather``; with ``overlap_param_gather`` it hides behind the next forward but for its first
  bucket, ``plan.param_gather``) — gradients accumulate unsharded over the micro-batches;
- stage 2: gradients are sharded too, so each micro-batch's backward reduce-scatters every layer's
  gradients as soon as they are complete (m reduce-scatters instead of one), then the all-gather of the
  updated weights after the step;
- stage 3 / FSDP (FULL_SHARD): weights are sharded as well: every layer's weights are all-gathered
  before its forward and again before its backward, and its gradients reduce-scattered after its backward;
  the updated shards need no gather after the step. A layer full recomputation re-runs is gathered twice
  too, not three times: its recomputed forward runs just before its backward, inside the gather made for
  that backward, so the recompute pass (R) gathers nothing and the backward's gather keeps the backward's
  prefetch and cover (the layer after it, in backward order: what FSDP's backward prefetch hides it behind,
  where the R pass, built as one pass of the re-run layers, would leave its first gather with no cover).
  PyTorch FSDP2's ``_pre_forward`` returns at once in ``TrainingState.PRE_BACKWARD`` ("the pre-backward
  hook is responsible for the unshard", pytorch/pytorch ``torch/distributed/_composable/fsdp/_fsdp_state.py``
  @ 005da465), and torchtitan wraps each block in ``checkpoint_wrapper`` before ``fully_shard``, so the
  recompute runs inside the backward's unshard (pytorch/torchtitan ``parallelisms/parallelize_llama.py`` @
  004b3148); FSDP1 the same. Megatron-FSDP's ``_root_pre_backward`` marks every FSDP unit PRE_BACKWARD "to
  skip resharding and unsharding operations when performing activation recomputation" (NVIDIA/Megatron-LM
  ``megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py`` @ 367f664e). DeepSpeed ZeRO-3 re-gathers
  for the recompute but keeps the parameters for the backward that follows at once
  (``stage3_max_reuse_distance``, 1e9 elements by default: a parameter used again within that distance is not
  released, ``__params_to_release`` in ``deepspeed/runtime/zero/partitioned_param_coordinator.py`` @ 00a31c99):
  two gathers as well.

Overlap (``mapping.overlap_param_gather``, FSDP's prefetch): the all-gather of the next layer runs while the
current layer computes, and a layer's reduce-scatter while the layer before it runs its backward; only
what the layer's compute cannot hide is exposed. (``overlap_grad_reduce`` hides the stage-2 and stage-3
reduce-scatters the same way; under ``mapping.fsdp`` they always hide so: PyTorch FSDP reduce-scatters on a
stream of its own with no serial mode — FSDP2's ``foreach_reduce`` runs under ``reduce_scatter_stream`` and its
``post_backward`` waits only for the previous layer's reduce-scatter event (pytorch/pytorch
``torch/distributed/_composable/fsdp/_fsdp_collectives.py``, ``_fsdp_param_group.py``), FSDP1's
``_post_backward_hook`` under ``state._post_backward_stream`` (``torch/distributed/fsdp/_runtime_utils.py``) — so
the plan reads "fsdp or overlap_grad_reduce", ``group_comm.shard_comm``, and a saved project's flags mean what
they always did.) The exposed part is charged as the same collective carrying the exposed fraction of its
bytes, so both engines time it like any collective; the hidden bytes still cross the links but are not
drawn as link traffic.

Mixture-of-experts models (``mapping.ep``, ``plan.experts``): a layer's routed-expert weights are held by
the dp / ep replicas with the same expert rank only (Megatron-Core's expert-data-parallel group, DeepSpeed-MoE's
expert data parallelism), so their gathers and reduce-scatters run over that group — kind prefixed ``edp:`` —
and the layer's other weights' over all dp replicas; with dp = ep every replica holds its own experts and
they need none. With expert tensor parallelism below tp that group is tp · dp / (ep · expert_tp) ranks, at
ep 1 too (``experts.experts_apart``). The tied word embedding's copy on the last pipeline stage (``plan.tied``)
is gathered and reduced with the head layer that uses it (``ShardComm.extra_params``).

PyTorch FSDP2's copies (``mapping.fsdp_copies``). FSDP2 gathers a layer's shards into one flat buffer and then
copies each parameter out of it; before a reduce-scatter it copies the layer's gradients into one flat buffer in
the reduce dtype (pytorch/pytorch ``torch/distributed/_composable/fsdp/_fsdp_collectives.py`` @
01d66d21f38a04729a87a5840f405ca1b7acf856): ``foreach_all_gather_copy_out`` makes the *current* (compute) stream
wait for the all-gather and runs ``torch.split_with_sizes_copy`` of the whole gathered buffer there — the layer's
weights read and written once, ``2 · weight_bytes`` per parameter, before the layer can run;
``foreach_reduce_scatter`` runs ``foreach_reduce_scatter_copy_in`` (``torch.cat`` of the gradient views into the
``reduce_dtype`` buffer: the gradients read in the weights' format, written in the reduced one) on the
reduce-scatter stream, but then ``current_stream.wait_event(copy_in_event)``: the compute stream waits for it
too. Both are memory-bound kernels on the compute stream's path, per layer and per gather (forward and
backward, ``reshard_after_forward``; a recomputed layer's backward one before its recompute), charged as such
(``ShardComm.copy_bytes``); the
all-gather's copy-in (``torch._foreach_copy_`` of the rank's shard, 1 / dp of the layer) runs on a stream of its
own ahead of the gather and is not counted. Megatron-Core's FSDP (and ZeRO over flat buffers) gathers into
buffers the parameters are views of: no copies (the default).

Offloaded shards (``mapping.memory_levels`` naming a host memory for the weights or the gradients,
``offloaded_shards``). PyTorch FSDP2's CPU offload keeps each rank's shard on the host: ``FSDPParam.all_gather_inputs``
copies ``_sharded_param_data.to(self.device, non_blocking=True)`` — the shard, 1 / dp of the layer — inside the
all-gather's copy-in (on the all-gather copy-in stream, ahead of the gather; pytorch/pytorch
``torch/distributed/_composable/fsdp/_fsdp_param.py`` @ 007472c8), the layer computes on the gathered weights in
device memory, and ``foreach_reduce`` sends the reduce-scattered gradient shard back with
``new_sharded_grad.to(torch.device("cpu"), non_blocking=True)`` on the reduce-scatter stream
(``_fsdp_collectives.py``). DeepSpeed ZeRO-3's ``offload_param`` likewise copies each partition
``p.ds_tensor.to(get_accelerator().current_device_name())`` into the flat all-gather buffer
(``_all_gather_dtype`` in ``deepspeed/runtime/zero/partition_parameters.py``, deepspeedai/DeepSpeed @ 0031ae39).
So the host link carries one shard per gather and per reduce-scatter (``ShardComm.host_seconds``), charged with
its collective: the copy-in runs before the gather on the gather's side stream, so with prefetch it takes the
cover first and the gather what is left, the exposed rest stalls the compute stream; the gradient copy follows
its reduce-scatter in the cover left to it. Stage 2 gathers no weights: host-held weights still stream whole to
every op (``perf.residency``), as without sharding.

The collectives ride on ``Segment.comm`` with the kind prefixed ``dp:`` (or ``edp:``); ``Plan.tp_collective``
resolves them on the data-parallel (expert-data-parallel) groups of the stage, all tensor ranks at once, as
``Plan.dp_collective`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from tilewright.engine.ir.ops import Op
from tilewright.engine.perf.memory import params_on_device
from tilewright.engine.perf.residency import Level, Residency
from tilewright.engine.plan.experts import EP_PREFIX, routed_experts

DP_PREFIX = "dp:"
EDP_PREFIX = "edp:"  # over the expert-data-parallel groups: the replicas holding the same experts
CP_PREFIX = "cp:"  # context parallelism's ring exchange (``plan.context``)


def dp_kind(kind: str) -> str:
    """The collective kind of a ``dp:``-, ``edp:``-, ``cp:``- or ``ep:``-prefixed segment collective."""
    for prefix in REPLICA_CATEGORIES:
        if kind.startswith(prefix):
            return kind.removeprefix(prefix)
    return kind


def is_dp(kind: str) -> bool:
    return kind.startswith(DP_PREFIX)


def is_edp(kind: str) -> bool:
    return kind.startswith(EDP_PREFIX)


REPLICA_CATEGORIES = {DP_PREFIX: "dp_comm", EDP_PREFIX: "dp_comm", CP_PREFIX: "cp_comm", EP_PREFIX: "ep_comm"}


def comm_category(kind: str) -> str:
    """The time category a segment collective is reported under: sharded data parallelism's gathers and
    reductions ``dp_comm`` (the experts' over their expert-data-parallel groups too), the context-parallel
    ring ``cp_comm``, the experts' all-to-all ``ep_comm``, and a tensor group's collectives ``tp_comm``."""
    for prefix, category in REPLICA_CATEGORIES.items():
        if kind.startswith(prefix):
            return category
    return "tp_comm"


def spans_replicas(kind: str) -> bool:
    """A segment collective over several replicas of the stage (data- or context-parallel), not within
    one tensor group: every unit of the stage reaches it."""
    return kind.startswith(tuple(REPLICA_CATEGORIES))


@dataclass(frozen=True)
class ShardComm:
    """What a stage's passes communicate for sharded data parallelism (module docstring)."""

    gather_weights: bool  # stage 3 / FSDP: all-gather each layer's weights before its forward and backward
    reduce_grads: bool  # stage ≥ 2: reduce-scatter each layer's gradients after its backward
    overlap_gather: bool  # prefetch: a layer's gather hides behind the previous layer's compute
    overlap_reduce: bool  # a layer's reduce-scatter hides behind the next backward layer's compute
    weight_bytes: float  # per parameter, as stored for compute (the weights' format)
    grad_bytes: float  # per parameter, as reduced (the gradients' format)
    seconds: Callable[[str, float], float]  # uncontended time of a ``dp:``/``edp:`` collective of that many bytes
    # replicas holding the same experts (the expert-data-parallel group: tp·cp·dp / (ep · expert_tp)); 0: the experts
    # have no layout of their own (ep 1 and expert_tp = tp, ``plan.experts.experts_apart``), one dp group for all
    expert_dp: int = 0
    extra_params: Mapping[int, float] = field(default_factory=dict)  # per layer index, beyond its ops' (per device)
    # per layer index, its weights' bytes per parameter where they differ from ``weight_bytes`` (a bf16 edge layer
    # of an fp8 run: 2 B, ``perf.formats``)
    layer_weight_bytes: Mapping[int, float] = field(default_factory=dict)
    copies: bool = False  # PyTorch FSDP2's copy-out after a gather and copy-in before a reduce (module docstring)
    replicas: int = 1  # the replicas the dense weights are sharded over (dp · cp)
    # offloaded shards (``offloaded_shards``): the host link's bytes/s per device, and whether the weights' shards
    # (stage 3) and the gradients' (stage ≥ 2) live in host memory
    host_bandwidth: float = 0.0
    host_weights: bool = False
    host_grads: bool = False

    def _layer_params(self, kind: str, ops: list[Op], tp: int) -> tuple[float, float, float]:
        """(bytes per parameter, dense parameters, routed-expert parameters held apart) of one layer's ``kind``."""
        per = self.layer_weight_bytes.get(ops[0].layer, self.weight_bytes) if kind == "all-gather" else self.grad_bytes
        experts = params_on_device(routed_experts(ops), tp) if self.expert_dp else 0.0
        dense = params_on_device(ops, tp) - experts + self.extra_params.get(ops[0].layer, 0.0)
        return per, dense, experts

    def layer_items(self, kind: str, ops: list[Op], tp: int) -> list[tuple[str, float]]:
        """One layer's all-gather of its weights or reduce-scatter of its gradients (``kind``), per tensor rank:
        (``dp:`` kind, the layer's bytes) over all replicas, or with expert parallelism the routed experts'
        bytes apart, over their expert-data-parallel group (``edp:``; none when that group is one replica)."""
        if not ops:
            return []
        per, dense, experts = self._layer_params(kind, ops, tp)
        items = [(DP_PREFIX + kind, dense * per)]
        if experts > 0 and self.expert_dp > 1:
            items.append((EDP_PREFIX + kind, experts * per))
        return items

    def host_seconds(self, kind: str, ops: list[Op], tp: int) -> float:
        """Seconds of the host-link copy of this rank's shard around one layer's ``kind`` collective when that
        state is offloaded (``offloaded_shards``): before an all-gather its weight shard host → device, after a
        reduce-scatter its gradient shard device → host — 1 / replicas of the layer's dense bytes and 1 /
        expert_dp of its routed experts' (all of them where one replica holds its experts whole). 0 otherwise."""
        on_host = self.host_weights if kind == "all-gather" else self.host_grads
        if not ops or not on_host or self.host_bandwidth <= 0:
            return 0.0
        per, dense, experts = self._layer_params(kind, ops, tp)
        return (dense / max(self.replicas, 1) + experts / max(self.expert_dp, 1)) * per / self.host_bandwidth

    def copy_bytes(self, kind: str, items: list[tuple[str, float]]) -> float:
        """Device-memory bytes of FSDP2's copy around one layer's ``kind`` collective carrying ``items`` (the whole
        layer's, not their exposed parts; module docstring): after an all-gather the gathered weights read and
        written (2 × their bytes), before a reduce-scatter the gradients read in the weights' format and written
        in the reduced one. 0 without ``copies``."""
        if not self.copies:
            return 0.0
        nbytes = sum(b for _, b in items if b > 0)
        if kind == "all-gather":
            return 2.0 * nbytes
        return nbytes * (1.0 + self.weight_bytes / self.grad_bytes) if self.grad_bytes > 0 else 0.0

    def exposed(self, items: list[tuple[str, float]], hide_s: float, overlap: bool) -> list[tuple[str, float]]:
        """The collectives ``items`` ((dp: kind, bytes)) running behind ``hide_s`` seconds of compute: each
        scaled to the fraction of the total not hidden (all of it without ``overlap``)."""
        items = [(k, b) for k, b in items if b > 0]
        if not overlap or not items:
            return items
        total = sum(self.seconds(k, b) for k, b in items)
        if total <= hide_s or total <= 0:
            return []
        frac = (total - hide_s) / total
        return [(k, b * frac) for k, b in items]


def stage_shard_comm(
    zero: int,
    dp: int,
    overlap_gather: bool,
    overlap_reduce: bool,
    weight_bytes: float,
    grad_bytes: float,
    seconds: Callable[[str, float], float],
    ep: int = 1,
    extra_params: Mapping[int, float] | None = None,
    edp: int | None = None,
    layer_weight_bytes: Mapping[int, float] | None = None,
    copies: bool = False,
) -> ShardComm | None:
    """The sharding collectives a stage's passes carry, or None (stage < 2, or no data parallelism). ``dp``:
    the replicas the weights are sharded over (dp · cp with context parallelism, module docstring); ``ep``:
    the expert-parallel degree (its routed experts are sharded over dp / ep replicas); ``extra_params``:
    per layer index, parameters it holds beyond its ops' (``ShardComm.extra_params``); ``edp``: the routed
    experts' expert-data-parallel group (``experts.expert_dp``; None: dp / ep with expert parallelism, else no
    group of their own). At ep 1 an ``edp`` is given when expert tensor parallelism below tp folds the experts
    over tp / expert_tp × dp ranks (``experts.experts_apart``). ``copies``: PyTorch FSDP2's copy kernels
    (``mapping.fsdp_copies``)."""
    expert_dp = (edp if edp is not None else max(dp // ep, 1)) if ep > 1 or edp is not None else 0
    if max(dp, expert_dp) <= 1 or zero < 2:
        return None
    return ShardComm(
        zero >= 3, True, overlap_gather, overlap_reduce, weight_bytes, grad_bytes, seconds,
        expert_dp=expert_dp, extra_params=dict(extra_params or {}), layer_weight_bytes=dict(layer_weight_bytes or {}),
        copies=copies and zero >= 3, replicas=dp,
    )


def offloaded_shards(shard: ShardComm, res: Residency, home: Level) -> tuple[ShardComm, Residency]:
    """Sharded state in host memory (``mapping.memory_levels``; module docstring, offload): the shard, not the
    layer, crosses the host link. Stage-3 weights there are copied host → device as the rank's shard before each
    all-gather, and every op then reads the gathered layer from the device's own memory (``home``); gradients
    there (stage ≥ 2) are written to device memory by the ops and go device → host as the reduce-scattered
    shard. Returns the shard comm that charges those copies (``host_seconds``) and the residency the ops see;
    unchanged when neither applies (stage 2's whole weights still stream to every op, ``perf.residency``)."""
    weights = shard.gather_weights and res.at("weights") == "host"
    grads = shard.reduce_grads and res.at("gradients") == "host"
    if not (weights or grads):
        return shard, res
    levels = dict(res.levels) | ({"weights": home} if weights else {}) | ({"gradients": home} if grads else {})
    return (replace(shard, host_bandwidth=res.host_bandwidth, host_weights=weights, host_grads=grads),
            Residency(levels, res.host_bandwidth))
