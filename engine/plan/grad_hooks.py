"""Megatron-LM's per-parameter gradient hooks: what each micro-batch's backward pays for every parameter tensor.

Megatron-LM's local data-parallel wrapper keeps the gradients in one contiguous buffer and points each
parameter's ``main_grad`` into it; it registers a Python hook on every parameter's ``AccumulateGrad`` node
(``param.expand_as(param).grad_fn.next_functions[0][0].register_hook``), which the autograd engine calls each
time a micro-batch's backward has produced that parameter's gradient:

- Megatron-LM v2.x (2021, ``megatron/model/distributed.py`` ``_make_param_hook``; the same body in forks of
  that era): ``if param.grad.data is not None: param.main_grad.add_(param.grad.data); param.grad = None``;
- after gradient-accumulation fusion came in (``megatron/model/distributed.py`` @ 01d65bde, 2023:
  ``if param.grad is not None:`` with the comment "The gradient function of linear layers is fused with
  GEMMs"), the fused weights reach the hook with no gradient and skip the add;
- Megatron-Core (``megatron/core/distributed/distributed_data_parallel.py`` ``_make_backward_post_hook`` @
  293e1041): ``if param.grad is not None and (not param.grad_added_to_main_grad or zero_out_wgrad):
  param.main_grad.add_(param.grad.data)``, then ``param.grad = None`` and, with ``--overlap-grad-reduce``, the
  bucket's ``register_grad_ready``. Its fused linear layers return a dummy weight gradient so that the hook
  runs on the main backward thread (``core/tensor_parallel/layers.py``, "prevent backward hooks from being run
  in a background thread").

**Gradient-accumulation fusion** (``LinearWithGradAccumulationAndAsyncCommunication`` in ``megatron/mpu/layers.py``,
later ``megatron/core/tensor_parallel/layers.py``): the weight-gradient GEMM accumulates straight into
``weight.main_grad`` (apex's ``fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_fp32`` for an fp32 buffer,
``wgrad_gemm_accum_fp16`` for an fp16 one — bf16 too in Megatron-Core) and returns no weight gradient.
It covers the weights of the tensor-parallel linear layers (QKV, dense, h→4h, 4h→h, and the untied output
layer: ``parallel_lm_logits`` / ``output_layer`` go through the same function); Transformer Engine's linears do
the same (``fuse_wgrad_accumulation``). Not covered: the linear layers' biases (``grad_output.sum(0)``), the
LayerNorms' γ and β, the embeddings (a tied word embedding's lookup gradient reaches the same hook), an MoE
router's weight (a plain parameter under ``F.linear``; Megatron-LM PR #6943, open, would fuse it). Megatron-LM
v2.x has no fusion (``megatron/mpu/layers.py`` @ 02bb1f5c: ``grad_weight = grad_output.t().matmul(input)``);
from its introduction (``--no-gradient-accumulation-fusion``, ``action='store_false'``, added in
``_add_training_args`` beside ``--sequence-parallel``: Megatron-LM v3.0, 2022) and in Megatron-Core it is on by
default, and needs apex's extension. ``mapping.gradient_accumulation_fusion`` (default on, as Megatron's) turns
it off.

**What the model charges**, per parameter tensor and micro-batch, in the backward segment of the op that owns
the parameter (its gradient's hook fires when its ``AccumulateGrad`` runs, right after the op's backward):

- every tensor: the autograd engine's call into the Python hook and the hook's gradient check
  (``HOOK_CALLS`` at ``Compute.host_call_s``);
- a tensor fusion does not cover: the ``add_`` kernel (``host_dispatch_s``, its Python and launch included),
  the ``.data`` alias and ``param.grad = None`` (which frees the gradient: ``ADD_CALLS`` at ``host_call_s``); on
  the device the ``add_`` streams the gradient once and ``main_grad`` twice (read and written): 2 + 2 + 2 = 6 B
  per parameter with fp16's fp16 buffer, 2 + 4 + 4 = 10 B with an fp32 one (bf16's, or
  ``--accumulate-allreduce-grads-in-fp32``; ``perf.memory.bytes_per_param``), at ``DeviceModel.stream_s`` plus
  the per-kernel floor ``Compute.fixed_op_s``.

Per GPT layer (two LayerNorms' γ and β, four linear layers' weight and bias: 12 tensors) that is 12 hook calls
and 8 ``add_`` kernels with fusion, 12 of each without. Counted from the op graph (``param_tensors``): a linear
layer (``OpKind.matmul`` with a GEMM) a weight and, when its parameters exceed the weight's, a bias; a norm one
tensor per row-width of parameters (LayerNorm's γ and β: 2, RMSNorm's γ: 1); an embedding, or any other op with
parameters, one. Left out: the per-expert weights of Transformer Engine's grouped GEMMs (counted as one tensor
per op: leans low for MoE), the last pipeline stage's copy of a tied word embedding (its hook's call; its
gradient is the head GEMM's, fused) and PyTorch DDP's C++ reducer (not Megatron's local DDP). **CUDA graphs**
(``plan.cuda_graphs``): a graphed layer's replay returns its parameters' gradients (dummies where fusion added
them) to autograd, whose ``AccumulateGrad`` nodes, and so the hooks, still run eagerly after it: charged as
eager. Inside a full-iteration graph the hook returns at once while capturing (``is_graph_capturing()``) and
the replay runs no Python: no host time there; the adds' device time is kept (leans high).
Only devices whose kernels a host framework issues one by one (``issues_kernels``) with their own DRAM run them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tilewright.engine.ir.common import DType
from tilewright.engine.ir.ops import MoERole, Op, OpKind
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.perf.device import issues_kernels
from tilewright.engine.perf.memory import bytes_per_param
from tilewright.engine.perf.op_cost import TP_SPLITS

if TYPE_CHECKING:
    from tilewright.engine.plan.passes import PassContext, Segment

HOOK_CALLS = 2  # per parameter tensor: the engine's call into the Python hook, its ``param.grad`` check
ADD_CALLS = 2  # per tensor it adds: ``param.grad.data`` and ``param.grad = None`` (the add_ is a kernel)
GEMM_KINDS = (OpKind.matmul,)  # ops whose weight a fused weight-gradient GEMM accumulates (Megatron's linears)


@dataclass(frozen=True)
class GradHooks:
    """The hooks of one training run (module docstring)."""

    fusion: bool  # gradient-accumulation fusion: the linear layers' weights skip the add
    grad_bytes: float  # bytes per element of ``param.grad`` (the parameters' dtype)
    main_bytes: float  # bytes per element of ``main_grad`` (the gradient buffer)

    @property
    def add_bytes(self) -> float:
        """Bytes one ``main_grad.add_(grad)`` streams per parameter: the gradient read, the buffer read and written."""
        return self.grad_bytes + 2.0 * self.main_bytes

    def charge(self, seg: Segment, op: Op, ctx: PassContext, replayed: bool = False) -> float:
        """Add the hooks of ``op``'s parameters to its backward segment ``seg`` (host time unless ``replayed`` by a
        CUDA graph; the adds' device time and bytes); returns the device seconds added."""
        dev, tp = ctx.dev, ctx.tp
        if op.params <= 0 or dev.local_dram is None or not issues_kernels(dev.compute):
            return 0.0
        tensors, added = param_tensors(op, ctx.rows_per_sample, self.fusion)
        if not tensors:
            return 0.0
        c = dev.compute
        if not replayed:
            seg.host_s += (tensors * HOOK_CALLS + len(added) * ADD_CALLS) * c.host_call_s \
                + len(added) * c.host_dispatch_s
        seconds = 0.0
        for elems in added:
            nbytes = elems / (tp if op.split in TP_SPLITS else 1) * self.add_bytes  # as perf.memory shards them
            seconds += dev.stream_s(nbytes) + c.fixed_op_s
            seg.local_bytes += nbytes
        seg.busy_s += seconds
        return seconds


def param_tensors(op: Op, tokens: int, fusion: bool) -> tuple[int, list[float]]:
    """(parameter tensors of ``op``, the elements of each one whose gradient the hook adds: all but the GEMM
    weights when ``fusion``), from the op graph (module docstring); ``tokens``: token rows per sample, a norm's
    row width being its input per token."""
    if op.params <= 0:
        return 0, []
    if op.moe is not None and op.moe.role is MoERole.router:  # a plain parameter under F.linear: never fused
        return 1, [op.params]
    if op.kind in GEMM_KINDS and op.gemm is not None:
        _, n, k = op.gemm
        # a routed expert op holds every expert's weights: one grouped weight; a tied head only its bias
        weight = op.params if op.moe is not None else float(n * k) if op.params >= n * k else 0.0
        bias = op.params - weight
        tensors = [x for x in (weight, bias) if x > 0]
        return len(tensors), ([bias] if bias > 0 else []) if fusion else tensors
    if op.kind is OpKind.norm and op.in_elems > 0:
        width = op.in_elems / max(tokens, 1)
        n = min(2, max(1, round(op.params / width)))
        return n, [op.params / n] * n
    return 1, [op.params]


def grad_hooks(project: Project, weight_bytes: float) -> GradHooks | None:
    """The hooks a training run's backward pays (None in inference): ``main_grad`` at the gradient buffer's width
    (``perf.memory.bytes_per_param``), ``param.grad`` at the parameters' (bf16 under fp8: Transformer Engine keeps
    bf16 parameters), fusion as ``mapping.gradient_accumulation_fusion``."""
    run, m = project.run, project.mapping
    if run.mode is not Mode.train:
        return None
    grads = bytes_per_param(weight_bytes, run.master_weights_fp32, run.optimizer, run.dtype,
                            fp32_grads=m.grad_reduce_in_fp32).gradients
    param = 4.0 if run.dtype is DType.fp32 else 2.0
    return GradHooks(m.gradient_accumulation_fusion, param, grads)
