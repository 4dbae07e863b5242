"""Bytes a device holds: model state per parameter, stored activations per micro-batch, workspace.

Model state under mixed precision with Adam (Rajbhandari et al., ZeRO, SC'20 §3; Megatron-LM keeps fp32
main gradients): weights 2 B, gradients 4 B, optimizer 12 B (fp32 master copy, momentum, variance) per
parameter; fp32 training: 4 + 4 + 8. ZeRO stage 1 shards the optimizer state over data-parallel ranks,
stage 2 also the gradients, stage 3 also the weights. Activations are what each op saves for its
backward pass (``Op.saved_elems``): all of them without recomputation, all but what the recomputed
modules drop with selective recomputation (``perf.recompute``; by default the ``selective`` attention
core), and only each layer's input with full recomputation (Korthikanti et al., MLSys 2023). A fused
attention kernel (``mapping.fusion`` attention → softmax: FlashAttention, cuDNN fused attention) stores
none of its s² tensors whatever the recomputation: its backward recomputes them on chip from Q, K, V
(stored by qkv), its output (stored by out_proj) and the per-row log-sum-exp (a·s fp32 values, under
0.1 % of a block's activations at any head size: not counted). Under fp8 the weighted GEMMs' saved inputs
are their fp8 copies (``fp8_saved``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from tilewright.engine.ir.common import dtype_bytes
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.ops import Op, OpKind, TensorSplit
from tilewright.engine.ir.project import DType, Optimizer
from tilewright.engine.perf.formats import OpFormats, gemm_dtype
from tilewright.engine.perf.op_cost import TP_SPLITS, flash_ops, shard
from tilewright.engine.perf.recompute import OpRecompute, consumers, fused_norm, selection


@dataclass(frozen=True)
class StateBytes:
    weights: float
    gradients: float
    optimizer: float


BF16_GRAD_BYTES = 2.0  # a bf16 gradient buffer (``bytes_per_param``'s ``fp32_grads`` False)

# Bytes of one Adam moment held by ``mapping.optimizer_moments``. Megatron-Core's precision-aware optimizer
# (``--use-precision-aware-optimizer``, ``--exp-avg-dtype`` / ``--exp-avg-sq-dtype`` fp32, fp16, bf16 or fp8) hands
# Transformer Engine's FusedAdam its moments in that dtype (``exp_avg_dtype``, ``exp_avg_sq_dtype``; fp8 is TE's
# ``torch.uint8``, a ``Float8Tensor``): they are stored so, 2 B or 1 B each instead of 4 (a per-tensor fp32 scale
# beside fp16 and fp8 ones: not counted). How the step streams them: ``plan.residency.adam_split``.
MOMENT_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
# Bytes per parameter of the master copy by ``mapping.optimizer_master``. 'fp32': Megatron's fp32 main parameters.
# 'remainders': TE FusedAdam's ``store_param_remainders`` (Megatron-Core's default under the precision-aware
# optimizer, TE ≥ 2.1): of each fp32 master value only the 16 low bits are kept, as int16, the high 16 being the
# bf16 parameter itself, so the master costs 2 B and the bf16 parameter the weights already count
# (``fused_adam.py``: "Whole FP32 master can be reconstructed from BF16 params plus the trailing remainder bits").
# 'fp16': ``--main-params-dtype fp16``, TE's fp16 master with a per-tensor fp32 scale (not counted).
MASTER_BYTES = {"fp32": 4.0, "remainders": 2.0, "fp16": 2.0}


def bytes_per_param(
    elem_bytes: float, master_fp32: bool, optimizer: Optimizer, dtype: DType | None = None, param_copy: float = 0.0,
    moments: str = "fp32", fp32_grads: bool = True, master: str = "fp32",
) -> StateBytes:
    """Weights, gradients and optimizer state per parameter. Mixed precision keeps fp32 master weights in
    the optimizer state; its gradient buffer — what the backward accumulates into and the data-parallel
    reduction moves — is fp32, except for fp16 (``dtype``), where Megatron-LM keeps it in fp16 (its
    ``--accumulate-allreduce-grads-in-fp32`` is off by default and forced on only for bf16:
    ``megatron/model/distributed.py`` ``_get_buffer_type``, ``megatron/arguments.py``) and DeepSpeed's fp16
    optimizer reduces fp16 gradients (``communication_data_type`` defaults to the model's). The optimizer
    step's fp32 copy of them is transient (``plan.train_step``). ``param_copy``: bytes per parameter held
    beside the weights' own format (``fp8_param_copy``: the bf16 parameters of an fp8 run). ``moments``:
    the width of Adam's two moments (``MOMENT_BYTES``; ``plan.checks`` allows 'bf16' only for mixed-precision
    Adam); SGD's momentum is fp32. ``fp32_grads`` False (``mapping.grad_reduce_in_fp32``): a bf16 or fp8 run's
    buffer in the parameters' dtype, bf16 (Megatron-Core's ``DistributedDataParallel`` allocates it as
    ``torch.float if grad_reduce_in_fp32 else param.dtype``; an fp8 parameter, TE's ``Float8Tensor``, reports its
    nominal bf16 dtype): 2 B per parameter, and the reduction moves those. ``master``: how mixed precision holds its
    master copy (``MASTER_BYTES``, ``mapping.optimizer_master``); the optimizer state holds it, so ZeRO shards it
    with the moments over the distributed optimizer's data-parallel group."""
    mixed = master_fp32 and elem_bytes < 4
    width = MOMENT_BYTES[moments] if optimizer is Optimizer.adam else MOMENT_BYTES["fp32"]
    moments_b = (2 if optimizer is Optimizer.adam else 1) * width
    low = mixed and dtype is DType.fp16
    return StateBytes(
        weights=float(elem_bytes) + param_copy,
        gradients=float(elem_bytes) if low or not mixed else 4.0 if fp32_grads else BF16_GRAD_BYTES,
        optimizer=moments_b + (MASTER_BYTES[master] if mixed else 0.0),
    )


# Megatron-Core under fp8 (Transformer Engine) keeps the model's parameters in bf16 (``params_dtype``): the
# distributed optimizer writes its updated fp32 master shard into them and all-gathers them in bf16, and each
# fp8 GEMM quantizes its weight into an fp8 copy that TE caches over the micro-batches (``is_first_microbatch``).
# With ``--fp8-param-gather`` the parameters themselves are TE fp8 tensors (built under ``fp8_model_init``:
# ``Float8Tensor`` for delayed and current scaling, ``Float8BlockwiseQTensor`` for blockwise): no bf16 copy,
# the optimizer casts its fp32 master shard straight into the fp8 parameter buffer (``fp8_utils.
# quantize_param_shard``, TE's ``cast_master_weights_to_fp8``) and the post-step all-gather moves those fp8
# bytes (``distributed_data_parallel._allocate_buffers_for_parameters``: a ``Float8Tensor`` parameter's buffer
# is its uint8 storage). The fp32 master copy stays in the optimizer's state either way. MXFP8 parameters are
# not gathered in fp8 (``reuse_grad_buf_for_mxfp8_param_ag`` stages bf16 parameters in the gradient buffer and
# quantizes after the gather): ``plan.checks`` refuses that recipe with the flag.
BF16_PARAM_BYTES = dtype_bytes(DType.bf16)


def keeps_bf16_params(weights: DType, train: bool, fp8_param_gather: bool, zero: int) -> bool:
    """Whether a run holds bf16 parameters beside its fp8 weights: fp8 training without ``fp8_param_gather``
    — which acts only through the distributed optimizer (ZeRO ≥ 1; ``plan.checks`` refuses it without, and a
    search candidate without ZeRO keeps the bf16 parameters Megatron would)."""
    return train and weights is DType.fp8 and not (fp8_param_gather and zero >= 1)


def fp8_param_copy(weights: DType, train: bool, fp8_param_gather: bool, zero: int) -> float:
    """Bytes per parameter of that bf16 copy (``bytes_per_param``'s ``param_copy``); 0 when there is none."""
    return BF16_PARAM_BYTES if keeps_bf16_params(weights, train, fp8_param_gather, zero) else 0.0


def param_gather_bytes(weight_bytes: float, weights: DType, train: bool, fp8_param_gather: bool, zero: int) -> float:
    """Bytes per parameter the distributed optimizer's post-step all-gather moves: the model parameters'
    dtype — bf16 under fp8 training without ``fp8_param_gather``, else the weights' own format."""
    return BF16_PARAM_BYTES if keeps_bf16_params(weights, train, fp8_param_gather, zero) else weight_bytes


def held_weight_bytes(train: bool, fp8_param_gather: bool, zero: int) -> Callable[[OpFormats], float]:
    """Bytes per parameter a device holds of an op's weights, given its resolved formats: the weights' format
    plus the bf16 parameters beside fp8 ones (``fp8_param_copy``). Per op, so a layer run outside fp8
    (``formats.bf16_layers``: plain bf16 parameters, no fp8 copy) counts 2 B where its fp8 neighbours count
    1 + 2 B (or 1 B with ``fp8_param_gather``); for ``formats.mean_weight_bytes``."""
    return lambda f: f.weight_bytes + fp8_param_copy(f.weights, train, fp8_param_gather, zero)


def gathered_weight_bytes(train: bool, fp8_param_gather: bool, zero: int) -> Callable[[OpFormats], float]:
    """Bytes per parameter of an op the post-step all-gather moves (``param_gather_bytes`` of its own formats):
    a bf16 edge layer's parameters at 2 B even with ``fp8_param_gather``."""
    return lambda f: param_gather_bytes(f.weight_bytes, f.weights, train, fp8_param_gather, zero)


def params_on_device(ops: Iterable[Op], tp: int) -> float:
    return sum(op.params / (tp if op.split in TP_SPLITS else 1) for op in ops)


def model_state(params: float, per_param: StateBytes, zero: int, dp: int) -> StateBytes:
    return StateBytes(
        weights=params * per_param.weights / (dp if zero >= 3 else 1),
        gradients=params * per_param.gradients / (dp if zero >= 2 else 1),
        optimizer=params * per_param.optimizer / (dp if zero >= 1 else 1),
    )


def expert_model_state(
    params: float, expert_params: float, per_param: StateBytes, zero: int, dp: int, ep: int, edp: int | None = None
) -> StateBytes:
    """``model_state`` of a device holding ``expert_params`` of routed-expert parameters among its ``params``:
    ZeRO shards the experts' state over the dp / ep replicas that hold the same experts (Megatron-Core's
    expert-data-parallel group; ``edp``: its size when expert tensor parallelism folds it over tensor ranks
    too, ``plan.experts.expert_dp``), every other parameter's over all dp replicas."""
    dense = model_state(params - expert_params, per_param, zero, dp)
    experts = model_state(expert_params, per_param, zero, edp if edp is not None else max(dp // max(ep, 1), 1))
    return StateBytes(
        dense.weights + experts.weights, dense.gradients + experts.gradients, dense.optimizer + experts.optimizer
    )


# The cross-entropy's logits in fp32 (``workloads.transformer``: the loss's ``saved_bytes_fixed`` is the fp32
# softmax, 4 B per logit). A fused loss kernel (``mapping.fused_cross_entropy``) keeps them at the activations'
# width instead: Transformer Engine's ``parallel_cross_entropy`` (``transformer_engine/pytorch/cross_entropy.py``,
# which Megatron-Core's ``cross_entropy_fusion_impl='te'`` calls) takes the bf16 logits, computes in fp32
# inside the kernel, saves the bf16 input and a few values per row for its backward, and writes the gradient
# in the input's dtype.
LOSS_FP32_BYTES = 4


def loss_width(elem_bytes: float, fused_loss: bool) -> float:
    """Bytes per logit the loss holds: fp32 unless a fused kernel keeps the activations' width."""
    return elem_bytes if fused_loss else LOSS_FP32_BYTES


# Transformer Engine under fp8 (``transformer_engine/pytorch/module/linear.py``, ``layernorm_linear.py``,
# ``grouped_linear.py``): a weighted GEMM quantizes its input and saves that fp8 tensor for the backward
# (``saved_inputmat = inputmat``, its row-wise data dropped and only the column-wise copy the weight gradient
# reads kept: 1 B per element), never the bf16 original; ``LayerNormLinear`` has the norm kernel write its
# output already quantized and saves that fp8 ``ln_out`` (the norm's bf16 input stays, for the norm's
# backward). TE does not look whether the bf16 tensor is kept elsewhere: out_proj saves its fp8 copy of the
# attention output even though a fused attention kernel (``FusedAttnFunc``) keeps that output in bf16.
FP8_BYTES = dtype_bytes(DType.fp8)
# GEMMs of ``workloads.transformer_block`` whose ``saved_elems`` is their own input (the others save their
# output, as qkv, or nothing: their input is the saved output of the norm before them).
INPUT_SAVING_GEMMS = frozenset({"out_proj", "mlp_down", "shared_down", "experts_up", "experts_down"})
SHARED_FC1 = "shared_up"  # the shared experts' fused up/gate GEMM: its input is the pre-MLP norm's bf16 output


@dataclass(frozen=True)
class Fp8Saved:
    """Of one op's saved elements, ``narrow`` are stored as fp8 copies instead of at the activations' width;
    ``extra`` fp8 elements are stored on top (a GEMM input also kept in bf16 by another op), ``input_copy``
    fp8 elements of its replicated input on top, sharded as that input (by tp with sequence parallelism
    only, not as the op's own tensor-split outputs)."""

    narrow: float = 0.0
    extra: float = 0.0
    input_copy: float = 0.0


def _fp8_gemm(op: Op, formats: OpFormats) -> bool:
    """A weighted GEMM on the fp8 units (``formats.gemm_dtype``, as ``op_cost`` charges it)."""
    return op.kind is OpKind.matmul and op.params > 0 and gemm_dtype(formats.for_op(op.name), True) is DType.fp8


def fp8_saved(op: Op, ops: list[Op], formats: OpFormats | None, flash: frozenset[str]) -> Fp8Saved:
    """Which of ``op``'s saved elements Transformer Engine keeps in fp8 (``FP8_BYTES``): a fp8 GEMM's saved
    input, and a norm's output when the norm is fused into the fp8 GEMMs reading it (``recompute.fused_norm``,
    ``LayerNormLinear``). Out_proj's input under a fused attention kernel (``flash``: ``op_cost.flash_ops``)
    stays bf16 for the kernel and gets TE's fp8 copy on top. Norms with other readers (an MoE layer's pre-MLP
    norm, read by the router; MLA's input norm, read by two separate down projections that each save an fp8
    copy, 2 × 1 B) keep their bf16 count. The shared experts' first GEMM (Megatron-Core's ``SharedExpertMLP``
    ``linear_fc1``, a plain TE ``Linear`` holding up and gate in one GEMM: one copy for ``shared_up`` and
    ``shared_gate``) saves its own fp8 copy of that pre-MLP norm's output beside the router's bf16 one: +1 B
    per element of its input (``input_copy``; gone with the op when its module is recomputed). None without
    fp8 GEMMs."""
    if formats is None:
        return Fp8Saved()
    name = op.name.split(".", 1)[-1]
    if name in INPUT_SAVING_GEMMS and _fp8_gemm(op, formats):
        if name == "out_proj" and flash:
            return Fp8Saved(extra=op.saved_elems)
        return Fp8Saved(narrow=op.saved_elems)
    if name == SHARED_FC1 and _fp8_gemm(op, formats):
        return Fp8Saved(input_copy=op.in_elems)
    if op.kind is OpKind.norm and fused_norm(op, ops):
        if all(_fp8_gemm(r, formats) for r in consumers(op, ops)):
            return Fp8Saved(narrow=min(op.out_elems, op.saved_elems))
    return Fp8Saved()


def _saved(
    op: Op, micro_batch: int, tp: int, sp: bool, elem_bytes: int, dropped: OpRecompute | None = None,
    fused_loss: bool = False, fp8: Fp8Saved = Fp8Saved(),
) -> float:
    """``dropped``: what selective recomputation no longer stores of it (``perf.recompute``); ``fused_loss``: a
    fused cross-entropy kernel stores the logits at the activations' width (``loss_width``); ``fp8``: its
    elements saved as fp8 copies (``fp8_saved``) — what recomputation drops of a GEMM's input or a norm's
    output is that fp8 tensor."""
    k = shard(op, tp, sp)
    fixed = op.saved_bytes_fixed
    if op.kind is OpKind.loss and fused_loss:
        fixed *= loss_width(elem_bytes, True) / LOSS_FP32_BYTES
    drop = 0.0
    if dropped is not None:
        fixed = 0.0 if dropped.drop_fixed else fixed
        drop = dropped.drop_elems
    narrow = max(fp8.narrow - drop, 0.0)
    extra = max(fp8.extra - drop, 0.0)
    wide = op.saved_elems - drop - narrow
    copy = fp8.input_copy * FP8_BYTES * micro_batch / (tp if sp else 1)
    return (wide * elem_bytes + (narrow + extra) * FP8_BYTES + fixed) * micro_batch / k + copy


BLOCK_SPLITS = frozenset({TensorSplit.column, TensorSplit.row, TensorSplit.heads})


def recomputed_layers(
    layers: Iterable[list[Op]], recompute: Recompute, count: int | None = None
) -> list[list[Op]]:
    """The layers of a model chunk that full recomputation re-runs: every layer with tensor-parallel weights
    (a transformer block: Megatron checkpoints its transformer layers; the embedding and the head, whose
    only split is the vocabulary, stay outside), or only the first ``count`` of them
    (``mapping.recompute_layers``, Megatron's block method)."""
    if recompute is not Recompute.full:
        return []
    out = [ops for ops in layers if any(o.split in BLOCK_SPLITS for o in ops)]
    return out if count is None else out[:count]


def activation_bytes(
    layers: Iterable[list[Op]], micro_batch: int, tp: int, sp: bool, recompute: Recompute, elem_bytes: int,
    fused: frozenset[tuple[str, str]] = frozenset(), recompute_layers: int | None = None,
    recompute_modules: Sequence[str] | None = None, fused_loss: bool = False, formats: OpFormats | None = None,
) -> float:
    """Stored activations of one micro-batch over the given layers (each a list of its ops); ``fused``: the
    ``mapping.fusion`` edges (``plan.passes.fused_edges``), whose fused attention kernels store no scores;
    ``recompute_layers``: full recomputation of only the first N transformer layers (``recomputed_layers``);
    ``recompute_modules``: what selective recomputation drops (``perf.recompute``; None: the attention core);
    ``fused_loss``: ``mapping.fused_cross_entropy`` (``loss_width``); ``formats``: the run's formats, whose fp8
    GEMMs save their inputs in fp8 (``fp8_saved``; None: every tensor at ``elem_bytes``)."""
    layers = list(layers)
    rerun = {id(ops) for ops in recomputed_layers(layers, recompute, recompute_layers)}
    total = 0.0
    for ops in layers:
        if not ops:
            continue
        if id(ops) in rerun:
            first = ops[0]
            total += first.in_elems * micro_batch * elem_bytes / (tp if sp else 1)
            continue
        flash = flash_ops(ops, fused) if fused else frozenset()
        drops = selection(ops, recompute_modules) if recompute is Recompute.selective else {}
        for op in ops:
            dropped = drops.get(op.name)
            if op.name in flash or (dropped is not None and dropped.drop_elems >= op.saved_elems
                                    and (dropped.drop_fixed or not op.saved_bytes_fixed)):
                continue
            partial = dropped is not None and (dropped.drop_elems > 0 or dropped.drop_fixed)
            total += _saved(op, micro_batch, tp, sp, elem_bytes, dropped if partial else None, fused_loss,
                            fp8_saved(op, ops, formats, flash))
    return total


def workspace_bytes(
    ops: Iterable[Op], micro_batch: int, tp: int, sp: bool, elem_bytes: int, fused_loss: bool = False,
    fused: frozenset[tuple[str, str]] = frozenset(),
) -> float:
    """The largest transient buffer: an op's input plus output, the loss's logits in fp32 unless a fused
    kernel keeps them at the activations' width (``loss_width``). Ops inside a fused attention kernel
    (``fused``: the ``mapping.fusion`` edges, ``op_cost.flash_ops``) have none: their s² scores stay on chip,
    and the kernel's Q, K, V and output are the neighbouring projections' tensors."""
    ops = list(ops)
    inside = flash_ops(ops, fused) if fused else frozenset()
    best = 0.0
    for op in ops:
        if op.name in inside:
            continue
        k = shard(op, tp, sp)
        width = loss_width(elem_bytes, fused_loss) if op.kind is OpKind.loss else elem_bytes
        best = max(best, (op.in_elems + op.out_elems) * micro_batch * width / k)
    return best
