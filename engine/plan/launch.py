"""Host-side kernel dispatch and the materialised scores of unfused attention: what small GPU jobs pay.

**Dispatch.** A framework in eager mode (PyTorch, Megatron-LM) issues every kernel from the host: Python,
the autograd and ATen dispatchers, the library's algorithm lookup and ``cudaLaunchKernel`` cost a few
µs each (``Compute.host_dispatch_s``, per kernel). Launches are asynchronous, so the host runs ahead of
the device while kernels are long; when they are short the device waits for the host. A segment (the
work between two tensor-parallel collectives, where ranks meet anyway) therefore lasts
``max(device time, kernels × host_dispatch_s)``.

Our operator graph has one op where Megatron-LM launches one or more kernels. ``KERNELS`` counts them
per op kind (forward, backward), from Megatron-LM's GPT layer with its fused kernels (apex fused
LayerNorm, fused scale-mask-softmax, jit-fused bias-GeLU and bias-dropout-add, unfused core attention):

- forward, per layer: LayerNorm 1; QKV GEMM + bias add 2 (``ColumnParallelLinear`` adds its bias after
  the matmul); ``baddbmm`` QKᵀ, ``bmm`` PV and the context ``permute().contiguous()`` copy 3; softmax 1;
  attention dropout 1; dense GEMM 1; bias-dropout-add 1; LayerNorm 1; h→4h GEMM 1; bias-GeLU 1; 4h→h
  GEMM 1; bias-dropout-add 1 — 16 kernels, which our 14 ops reproduce (the separate dropout and
  residual ops count 1 each where Megatron fuses them into one kernel, and the QKV bias add is not an
  op of ours);
- backward: every GEMM a data-gradient and a weight-gradient GEMM plus the bias-gradient reduction (3);
  attention 4 batched GEMMs and the copy's inverse (5); LayerNorm's input-gradient and two-pass
  γ/β-gradient kernels (3); one kernel for the backward of softmax, dropout and each elementwise op
  (the residual's is the gradient accumulation of its two branches) — 30 per GPT layer;
- embedding: vocab-parallel lookup masks the out-of-range ids, gathers and zeroes (5 kernels), its
  backward scatters (5); the vocab-parallel cross-entropy: max, its all-reduce, shift, exp, sum, its
  all-reduce, log and the target gather (10 forward, 5 backward).

Collectives launch their own NCCL kernel, whose host cost is part of the collective's latency. The host
synchronisations of the training loop (timers, ``.item()``, pipeline sends), which throw the host's lead
away, are ``plan.train_step``'s.

**Captured graphs.** Serving runtimes replay a captured CUDA graph for a decode step (vLLM captures the
"uniform decode" batches, prefill and mixed batches run eager; ``Compute.runtime_graphs``): the replay
launches every kernel of the pass from the device, so the host's per-kernel dispatch is not paid — the
segment lasts its device time. The per-kernel device gap (``fixed_op_s``) stays. Training is eager.

**Per-kernel floor.** Even when the host is far ahead, a kernel costs the device a fixed time whatever its
size — the grid's launch, the tiny kernel itself, the gap to the next one: ``Compute.fixed_op_s``, per
kernel (``op_cost`` charges it once per op, the rest of an op's kernels are charged here), in eager streams
and in captured graphs alike (a graph removes the host's dispatch, not this). A kernel that streams bytes
pays the floor plus its streaming time; a tiny elementwise kernel pays the floor alone.

**GEMM kernels.** Each GEMM kernel also pays its own launch and fill (the efficiency curve's fixed part) and
its own tile and wave quantization at its own output shape (``op_cost.gemm_kernels``): a weighted op's
backward is the data-gradient (M×K) and the weight-gradient (K×N) GEMM of ``KERNELS``' three, unfused
attention two batched GEMMs forward and four backward. The third, the bias gradient, streams the whole output
gradient once more (``op_cost``), serial with the GEMMs.

**Why the host rarely binds.** A segment lasts ``max(device, kernels × host_dispatch_s)``: with 8 µs per
kernel the host issues a Megatron GPT layer's forward in 128 µs, which the device only undercuts when a
layer's work is a few µs per kernel (tp 8 of a 350M model comes close, its unfused attention's score
traffic keeps the device busier). The host's lead is not carried across a collective (it could be: launches
are asynchronous), which makes the bound slightly pessimistic, never optimistic.

**Attention scores.** Without a fused (flash) kernel, attention's two batched matmuls go through device
memory: QKᵀ writes the a·s² scores and PV reads the dropped-out probabilities (forward); the backward
reads the probabilities for ∂V, writes ∂P and reads ∂S twice (for ∂Q and ∂K). The softmax and dropout
ops already move their own a·s² tensors; these are the attention op's. Fusing ``attention`` with
``softmax`` (``mapping.fusion``) keeps them on chip, as FlashAttention does.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from tilewright.engine.ir.hardware import Compute, RuntimeGraphs
from tilewright.engine.ir.ops import Op, OpKind
from tilewright.engine.perf.device import DeviceModel, issues_kernels

InferencePass = Literal["prefill", "decode"]

# (forward, backward) kernel launches per op of each kind (module docstring).
KERNELS: dict[OpKind, tuple[int, int]] = {
    OpKind.matmul: (1, 3),
    OpKind.fc: (1, 3),
    OpKind.conv: (1, 3),
    OpKind.attention: (3, 5),
    OpKind.softmax: (1, 1),
    OpKind.norm: (1, 3),
    OpKind.elementwise: (1, 1),
    OpKind.dropout: (1, 1),
    OpKind.embedding: (5, 5),
    OpKind.pool: (1, 1),
    OpKind.loss: (10, 5),
}

SCORE_PASSES_FORWARD = 2  # QKᵀ writes S, PV reads P
SCORE_PASSES_BACKWARD = 2 * SCORE_PASSES_FORWARD  # reads P (∂V), writes ∂P, reads ∂S for ∂Q and ∂K


def kernels(op: Op, backward: bool) -> int:
    """Kernel launches of one op's forward or backward pass."""
    fwd, bwd = KERNELS.get(op.kind, (1, 1))
    return bwd if backward else fwd


def graphed(compute: Compute, kind: InferencePass) -> bool:
    """Whether the device's runtime replays this kind of inference pass as a captured graph."""
    g = compute.runtime_graphs
    return g is RuntimeGraphs.all or (g is RuntimeGraphs.decode and kind == "decode")


def pass_device(dev: DeviceModel, kind: InferencePass) -> DeviceModel:
    """The device as an inference pass of ``kind`` sees it: without host dispatch when the runtime replays
    the pass as a graph (its kernels and their device gaps unchanged), else ``dev`` itself."""
    if not dev.compute.host_dispatch_s or not graphed(dev.compute, kind):
        return dev
    return dataclasses.replace(dev, compute=dev.compute.model_copy(update={"host_dispatch_s": 0.0}))


def extra_launches(op: Op, backward: bool, compute: Compute) -> float:
    """Device time of an op's kernels beyond its first: ``op_cost`` charges ``fixed_op_s`` once per op, a
    GPU pays it per kernel (the gap between back-to-back kernels of a stream). Only devices whose kernels a
    host framework issues one by one (``issues_kernels``) have the kernels ``KERNELS`` counts; other
    devices run an op as one program (grids, wafers): nothing more."""
    if not compute.fixed_op_s or not issues_kernels(compute):
        return 0.0
    return (kernels(op, backward) - 1) * compute.fixed_op_s


def drain_seconds(compute: Compute) -> float:
    """Device idle per host synchronisation that drains queued work (``plan.train_step``): the host's
    wake-up and relaunch, then the next kernel's dispatch (the host has no lead left to hide it)."""
    if not compute.host_sync_s or not issues_kernels(compute):
        return 0.0
    return compute.host_sync_s + compute.host_dispatch_s


def host_seconds(op: Op, backward: bool, host_dispatch_s: float) -> float:
    """Host time to issue one op's kernels."""
    return kernels(op, backward) * host_dispatch_s


def attention_scores(ops: list[Op]) -> dict[str, float]:
    """Score-matrix elements per sample (all heads) of each attention op of a layer, by op name: the
    softmax op that follows it holds them (its ``in_elems``). Attention over a KV cache (inference) gives
    nothing: its passes are costed by ``workloads.transformer_inference``."""
    out: dict[str, float] = {}
    for i, op in enumerate(ops):
        if op.kind is not OpKind.attention or op.cache_elems:
            continue
        soft = next((o for o in ops[i + 1 :] if o.kind is OpKind.softmax), None)
        if soft is not None and soft.in_elems > 0:
            out[op.name] = soft.in_elems
    return out
