"""Dropout's own traffic and rate on a device that runs it kernel by kernel (a GPU): its mask and its random numbers.

The generic memory-bound op (``op_cost``) reads its input and writes its output forward, and reads its saved input
and the output gradient and writes the input gradient backward. Dropout differs on both sides (PyTorch's CUDA
dropout, aten/src/ATen/native/cuda/Dropout.cu): the forward also writes the keep mask it draws, one byte per element,
and the backward reads that mask instead of the input; and the forward draws a Philox random number per element as
it streams, which holds it below the rate of a plain elementwise kernel (``Compute.dropout_forward_efficiency``).

Checked against the FlashAttention paper's standard-attention runtimes on A100 (``benchmarks/calibrate_attention_
a100.py``): the dropout's share there (runs with dropout less runs without, Dao et al. 2022, arXiv 2205.14135,
Appendix E.6, Tables 15-16 against 18-19) moves 5 bytes per score element each way — 1.21 TB/s forward, 1.38 TB/s
backward on an A100-40GB at 2,048-4,096 tokens, the backward at the plain streaming rate.
"""

from __future__ import annotations

from tilewright.engine.ir.hardware import Compute
from tilewright.engine.ir.ops import Op


def dropout_traffic(op: Op, in_elems: float, out_elems: float, samples: float) -> tuple[float, float]:
    """(elements in the activations' format, mask bytes) one dropout pass moves, forward or backward (the same),
    for ``samples`` samples of the op per device. PyTorch's CUDA dropout (``native_dropout``; ``_fused_dropout``
    before 1.12) draws the keep mask with Philox in the forward kernel and writes it beside the output, one byte
    per element (a bool or uint8 tensor, ``Op.saved_bytes_fixed``): read x, write y and the mask. Its backward
    (``native_dropout_backward`` / ``masked_scale``) multiplies the output gradient by the saved mask and the scale:
    read dy and the mask, write dx — the op's input is not read again, unlike the generic backward (saved input,
    output gradient, input gradient). Megatron's fused bias-dropout-add (TorchScript) keeps the same mask for its
    backward."""
    mask = op.saved_bytes_fixed * samples
    return in_elems + out_elems, mask


def dropout_rate(compute: Compute) -> float:
    """Share of the memory's achievable bandwidth a dropout forward streams at (``Compute.dropout_forward_efficiency``):
    its kernel draws a Philox random number per element (curand Philox4x32-10 in PyTorch's ``fused_dropout_kernel``:
    ten rounds of 32-bit multiplies per four elements) as it streams, and stays below the rate of a plain
    elementwise kernel. Its backward only multiplies by the saved mask: the plain rate. 1 when not given."""
    eff = compute.dropout_forward_efficiency
    return 1.0 if eff is None else eff
