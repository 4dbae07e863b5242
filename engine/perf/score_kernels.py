"""The unfused attention's kernels over the b·a·s² score tensor on a GPU that runs them one by one: what the
causal softmax reads, and the rate the batched GEMMs move their bytes at.

Megatron-LM's unfused core attention (``baddbmm`` QKᵀ, ``FusedScaleMaskSoftmax``, dropout, ``bmm`` PV) passes over
the score tensor kernel by kernel; the generic memory-bound op (``op_cost``) charges each kernel its bytes at the
memory's achievable bandwidth. Two of these kernels differ, from their code and from measurements:

- The causal softmax (``scaled_upper_triang_masked_softmax``, megatron/fused_kernels/scaled_upper_triang_masked_
  softmax.h, the kernel Megatron runs for a decoder's ``AttnMaskType.causal`` in fp16/bf16): row i is one warp's, and
  the warp loads only the row's first i + 1 elements (``element_index < local_seq``, the masked ones set to -inf
  in registers) and writes the whole row (zeros past the diagonal, ``copy_zero_vector``). Its backward loads the
  output gradient and the saved probabilities of the same first i + 1 elements and writes the whole input-gradient
  row. Over the s × s scores: half a read and a write forward (1.5 passes, not 2); half of each of two reads and a
  write backward (2 passes, not 3). Kernels that read the whole row (the padding-mask kernel, PyTorch's softmax)
  keep the generic count.
- The batched GEMMs (QKᵀ writes S, PV reads P; backward: dV reads P, dP is written, dQ and dK read dS) reduce over a
  head's width (64-128), so each kernel is memory-bound on its s × s operand or output: its output tiles take one
  or two main-loop steps, so load, math and store barely overlap within a thread block and the kernel moves its
  bytes below the streaming rate of an elementwise kernel (``Compute.attention_bmm_efficiency``, measured).
"""

from __future__ import annotations

from tilewright.engine.ir.hardware import Compute

# Share of a causal score tensor the fused causal softmax reads per read pass (the lower triangle with its
# diagonal, s(s + 1)/2 of s² elements, ≈ 1/2 at the sequence lengths where the scores matter).
TRIANGLE = 0.5


def triangular_softmax_traffic(in_elems: float, out_elems: float, backward: bool) -> float:
    """Elements one pass of the fused causal softmax moves over ``in_elems`` scores (``out_elems`` probabilities):
    forward reads the lower triangle of the scores and writes every probability; backward reads the lower
    triangle of the output gradient and of the saved probabilities and writes every input gradient."""
    if backward:
        return TRIANGLE * (out_elems + in_elems) + in_elems
    return TRIANGLE * in_elems + out_elems


def score_bmm_rate(compute: Compute) -> float:
    """Share of the memory's achievable bandwidth an unfused attention's batched GEMMs move their bytes at
    (``Compute.attention_bmm_efficiency``); 1 when not given."""
    eff = compute.attention_bmm_efficiency
    return 1.0 if eff is None else eff
