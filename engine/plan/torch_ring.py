"""PyTorch's experimental context parallelism (``torch.distributed.tensor.experimental.context_parallel``), as
torchtitan runs it: the ring of the plain-PyTorch frameworks ('pytorch', 'pytorch-compile'), which is not
Transformer Engine's (``plan.context``, the Megatron frameworks' ring).

Read from ``torch/distributed/tensor/experimental/_attention.py`` (pytorch/pytorch; the version stored here is a
2025 one, whose ``_templated_ring_attention`` / ``_templated_ring_attention_backward`` bodies are the ones the
December 2024 torch of ``benchmarks/calibrate_fsdp.py``'s H100 rows runs) and torchtitan's Llama (``repeat_kv``
before ``F.scaled_dot_product_attention``; ``--experimental.context_parallel_rotate_method`` default 'allgather').
Per attention op, on each of the cp ranks (each holds chunks r and 2cp − 1 − r of the sequence:
``enable_load_balance``, round-robin):

- **K and V as SDPA sees them.** torchtitan repeats K and V to every query head (``repeat_kv``) before SDPA, so the
  ring moves blocks n_heads / n_kv_heads times the GQA size: each of K and V as large as the queries
  (``expanded_block_bytes``: 2 × the op's output elements).
- **Forward** (``_templated_ring_attention``): cp SDPA calls, one per step. Step 0 a causal kernel over the local
  chunks; each later step an unmasked kernel (``_is_causal_behavior``: ``NOT_IS_CAUSAL`` under load balancing) over
  all the queries and the first key chunk (steps ≤ rank) or the second query chunk and all the keys: every step
  1 / cp of the rank's s² / (2cp) pairs, the later ones at FlashAttention-2's unmasked rate
  (``unmasked_ratio``). The exchange: ``_AllGatherRotater`` gathers every rank's K/V block in one all-gather
  (``ft_c.all_gather_tensor``) issued at step 0 and waited for at step 1: it hides behind step 0's kernel alone.
- **Backward** (``_templated_ring_attention_backward``): K/V gathered again the same way (``kv_rotater``), and the
  gradients dK/dV passed round the ring after every step (``dkv_rotater``: ``_RotateMethod.ALL_TO_ALL``,
  ``ft_c.permute_tensor`` to the next rank), accumulated in fp32 (``convert_to_f32``): cp sends of 2 × the block
  at 4 B per element. The send after step i is waited for after step i + 1's kernel, which hides it; the last
  (after step cp − 1) is waited for after the loop, with nothing beside it.
- **Merging** (``_SDPAMerger``, fp32): the running output cast to fp32 at step 0, each later step's block output
  folded in (``out - sigmoid(block_lse - lse) * (out - block_out)``: the running fp32 output and the block's bf16
  output read, the fp32 output written: ``MERGE_STEP_BYTES`` per query element) and cast back at the end; the
  local K and V concatenated for the gather (``torch.cat``: read and written once). The backward zero-fills fp32
  accumulators for dQ, dK, dV, adds each step's bf16 gradients into them (read 4 + 2, written 4, each), copies
  dK/dV into one fp32 send buffer per step (``torch.cat``) and casts the three back to bf16 at the end. Counted
  as one pass per tensor operation with the casts fused into the arithmetic that reads them (what inductor makes
  of it under ``torch.compile``, and the fewest passes the code allows: eager PyTorch runs more), for the busiest
  rank (the last, whose every later step merges all its queries: the ring meets at every layer's gather).

The merges and accumulators are memory-bound kernels on the compute stream beside the attention; the
exchanges run on NCCL's stream with its SMs (``perf.comm_sm``). Left out: the all-gathered buffer's memory
(cp blocks per layer, transient: smaller than the loss's fp32 logits, the largest transient the memory model
holds, at the rows checked), the per-step SDPA and merge launches on the host (the rows this checks are far from
host-bound, and torchtitan compiles each block whole, ``fullgraph=True``), the partial updates' extra
``torch.cat`` of the accumulators (``_partial_update``: a copy of the untouched fp32 halves each step, ~0.2 s of
the 256k cp8 row's 60 s), the ``.contiguous()`` copies of the repeated K/V at the ring's entry, and the rotater's
per-step K/V ``torch.cat`` after step 0's all-gather (unused: dead code in the compiled block).
"""

from __future__ import annotations

from tilewright.engine.ir.hardware import Compute
from tilewright.engine.ir.ops import Op
from tilewright.engine.plan.sharding import CP_PREFIX

GATHER = CP_PREFIX + "all-gather"  # the K/V all-gather over the context-parallel group (``_AllGatherRotater``)
RING = CP_PREFIX + "ring"  # the dK/dV permute to the next rank (``_AllToAllRotater``: ``permute_tensor``)
GRAD_BYTES = 4.0  # convert_to_f32: dK/dV accumulated and sent in fp32
# Bytes per query element (each of K and V, expanded, has as many) of the ring's tensor operations (module
# docstring). Forward: the step-0 cast to fp32 (2 + 4) and the final cast back (4 + 2), the K/V concatenation for
# the gather (2 + 2, twice); per later step one merge (4 + 2 read, 4 written).
MERGE_FIXED_BYTES = (2 + 4) + (4 + 2) + 2 * (2 + 2)
MERGE_STEP_BYTES = 4 + 2 + 4
# Backward: the fp32 zero-fills of dQ, dK, dV (4 each), the K/V concatenation for the gather (2 + 2, twice), the
# final casts of dQ, dK, dV (4 + 2 each); per step the three accumulations (4 + 2 + 4 each) and the dK/dV send
# buffer (4 + 4, twice).
GRAD_FIXED_BYTES = 3 * 4 + 2 * (2 + 2) + 3 * (4 + 2)
GRAD_STEP_BYTES = 3 * (4 + 2 + 4) + 2 * (4 + 4)


def expanded_block_bytes(op: Op, micro_batch: float, tp: int, elem_bytes: float) -> float:
    """Bytes of one rank's K and V after ``repeat_kv``, per tensor rank: each as large as the queries (the
    attention op's output, ``out_elems`` per sample), ``micro_batch`` samples' worth of the rank's tokens."""
    return 2.0 * op.out_elems * micro_batch * elem_bytes / tp


def query_elems(op: Op, micro_batch: float, tp: int) -> float:
    """Query (and output) elements of the attention op on one rank, per tensor rank."""
    return op.out_elems * micro_batch / tp


def step_kernels(attention_s: float, cp: int, ratio: float) -> list[float]:
    """Each of the cp steps' kernel seconds: 1 / cp of the op's causal kernel time ``attention_s`` for step 0,
    that share times ``ratio`` (``unmasked_ratio``) for each unmasked later step."""
    share = attention_s / cp
    return [share] + [share * ratio] * (cp - 1)


def unmasked_ratio(compute: Compute, backward: bool, sdpa: bool) -> float:
    """An unmasked kernel's seconds over a causal one's for the same pairs: the causal rate over the unmasked rate
    of the fused attention the device runs (``Compute.flash_efficiency``); 1 when either is not given."""
    causal = compute.flash_efficiency(backward, True, sdpa)
    full = compute.flash_efficiency(backward, False, sdpa)
    if not causal or not full:
        return 1.0
    return causal / full


def transfers(cp: int, block: float, elem_bytes: float, backward: bool, kernels: list[float]) -> list[
        tuple[str, float, float]]:
    """The op's exchanges as (kind, bytes of the collective, the kernel seconds beside it): the K/V all-gather
    (its full output, cp blocks) beside step 0's kernel; in the backward also the cp dK/dV sends, the one after
    step i beside step i + 1's kernel, the last beside nothing (module docstring)."""
    if cp <= 1 or block <= 0:
        return []
    out = [(GATHER, cp * block, kernels[0])]
    if backward:
        grad = block * GRAD_BYTES / elem_bytes
        out += [(RING, grad, kernels[i + 1] if i + 1 < cp else 0.0) for i in range(cp)]
    return out


def stream_bytes(op: Op, micro_batch: float, tp: int, cp: int, backward: bool) -> float:
    """Bytes the ring's merges (forward) or gradient accumulators (backward) move through device memory on the
    busiest rank (module docstring)."""
    if cp <= 1:
        return 0.0
    per = (GRAD_FIXED_BYTES + GRAD_STEP_BYTES * cp) if backward else (MERGE_FIXED_BYTES + MERGE_STEP_BYTES * (cp - 1))
    return per * query_elems(op, micro_batch, tp)


def calls(cp: int, backward: bool) -> int:
    """Collective calls of one op's ring on each rank: the all-gather, and in the backward the cp dK/dV sends."""
    if cp <= 1:
        return 0
    return 1 + (cp if backward else 0)
