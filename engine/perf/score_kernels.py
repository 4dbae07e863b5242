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
  bytes below the streaming rate of an elementwise kernel (``Compute.attention_bmm_efficiency``, measured). The
  share holds whatever the head's width: a wider head adds FLOPs per score byte (2·d per score QKᵀ writes), yet
  xformers' A100 runs of the plain PyTorch attention move their bytes at one rate from d = 16 to 128, so the FLOPs
  stay under the max and the width enters only through the Q, K, V and output bytes
  (benchmarks/calibrate_attention_a100.py, "Head width").
"""

from __future__ import annotations

from tilewright.engine.ir.hardware import Compute

# Share of a causal score tensor the fused causal softmax reads per read pass (the lower triangle with its
# diagonal, s(s + 1)/2 of s² elements, ≈ 1/2 at the sequence lengths where the scores matter).
TRIANGLE = 0.5


# Megatron's fused causal softmax runs on fp16/bf16 scores of at most this many keys, else the framework falls back
# to PyTorch's softmax over whole rows: ``FusedScaleMaskSoftmax.is_kernel_available`` checks ``16 < sk <= 2048`` in
# Megatron-LM v2.x's megatron/model/fused_softmax.py (2021, forked by Megatron-DeepSpeed) and ``16 < sk <= 4096``
# in Megatron-Core's megatron/core/fusions/fused_softmax.py. PyTorch frameworks never run it.
CAUSAL_KERNEL_KEYS = {"megatron-lm": 2048, "megatron-deepspeed": 2048, "mcore": 4096, "mcore-te": 4096}


def runs_causal_kernel(framework: str, keys: int, elem_bytes: float) -> bool:
    """Whether ``framework`` (resolved ``host_framework``) runs Megatron's fused causal softmax on a causal score
    tensor of ``keys`` keys per row in ``elem_bytes``-byte activations (``CAUSAL_KERNEL_KEYS``)."""
    limit = CAUSAL_KERNEL_KEYS.get(framework, 0)
    return 16 < keys <= limit and elem_bytes == 2


def triangular_softmax_traffic(
    in_elems: float, out_elems: float, backward: bool, fused: tuple[bool, bool] = (False, False)
) -> float:
    """Elements one pass of the fused causal softmax moves over ``in_elems`` scores (``out_elems`` probabilities)
    to and from memory: forward reads the lower triangle of the scores and writes every probability; backward
    reads the lower triangle of the output gradient and of the saved probabilities and writes every input
    gradient. ``fused`` (input, output on chip): the side a fused neighbour keeps on chip moves nothing — the
    share this pass counted of it, not the whole tensor."""
    fused_in, fused_out = fused
    if backward:  # the output gradient arrives on chip (fused_out); the input gradient stays there (fused_in)
        return TRIANGLE * in_elems + (0.0 if fused_out else TRIANGLE * out_elems) + (0.0 if fused_in else in_elems)
    return (0.0 if fused_in else TRIANGLE * in_elems) + (0.0 if fused_out else out_elems)


def score_bmm_rate(compute: Compute) -> float:
    """Share of the memory's achievable bandwidth an unfused attention's batched GEMMs move their bytes at
    (``Compute.attention_bmm_efficiency``); 1 when not given."""
    eff = compute.attention_bmm_efficiency
    return 1.0 if eff is None else eff
