"""Host-side kernel dispatch and the materialised scores of unfused attention: what small GPU jobs pay.

**Dispatch.** A framework in eager mode (PyTorch, Megatron-LM) issues every kernel from the host: Python,
the autograd and ATen dispatchers, the library's algorithm lookup and ``cudaLaunchKernel`` cost a few
µs each (``Compute.host_dispatch_s``, per kernel). Launches are asynchronous, so the host runs ahead of
the device while kernels are long; when they are short the device waits for the host. A segment (the
work between two tensor-parallel collectives, where ranks meet anyway) therefore lasts
``max(device time, host time)``, the host's time being its kernel launches and its other calls (below).

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

**Framework calls that launch nothing.** Megatron-LM's Python makes many more calls than it launches
kernels, and each costs the host time even when it issues none: views, transposes, ``size()`` reads and
splits, every ``nn.Module`` call, the CUDA RNG tracker's fork around attention dropout, and its autograd
``Function``s (the tensor-parallel regions, the fused LayerNorm, softmax and bias-GeLU, the linear layers'
own matmul Function), whose Python ``apply`` costs about three plain calls. ``HOST_CALLS`` counts them per
op kind (forward, backward), from Megatron-LM's GPT layer (``megatron/model/transformer.py`` and
``megatron/mpu``/``core/tensor_parallel``, unfused attention, tensor parallel, fp16, fused kernels), each
paid at ``Compute.host_call_s``; the kernel-issuing calls are ``KERNELS`` at ``host_dispatch_s``:

- forward, per layer (100): each LayerNorm a module call, its Function and the contiguous/save calls (8,
  the first also the layer's and its checkpoint's module calls); each linear layer a module call, the
  copy-to / reduce-from region Function, the matmul Function and its saves (8); core attention the head
  views, the three transposes, the buffer fetch, the result and context views, the permute and the RNG
  tracker's fork (get the CUDA RNG state, set it twice: 25 with the QKV split); the fused softmax's module
  call, kernel check, views and Function (9); each dropout its module call and ``F.dropout``'s Python (3);
  the residual adds and bias-GeLU the TorchScript call, its grad-mode context and the bias expand (3);
- backward, per layer (68): the Python ``backward`` of every Function above (3 each) and the autograd
  nodes of the views and transposes;
- embedding: the vocab-parallel mask, clone and region Function (6 forward, 3 backward); the vocab-parallel
  cross-entropy's Function, views and index arithmetic (11, 6).

Full recomputation wraps each layer in Megatron-LM's ``CheckpointFunction`` (``megatron/mpu/random.py``),
whose Python saves the CPU, CUDA and RNG-tracker states in the forward (its Function, three state reads, the
no-grad context and the save: 9 calls) and in the backward reads the current states, restores the forward's,
detaches the inputs, re-runs the layer under ``enable_grad``, restores the states again and calls
``torch.autograd.backward`` on the layer from inside its own backward (22 calls besides that one):
``CHECKPOINT_CALLS`` per re-run layer, charged with its re-run. That nested ``torch.autograd.backward`` is a
whole backward call (its Python argument checks and ``_make_grads``, a new graph task, the dependency count
over the layer's graph), which the autograd engine runs re-entrantly on the device thread that is already
running the outer backward (``Engine::execute`` from a worker thread, torch/csrc/autograd/engine.cpp): it costs
a top-level call's start-up (``Compute.host_backward_s``) less the two thread hand-offs, a few µs, which are
not separated: charged at ``host_backward_s`` (``checkpoint_host_seconds``), leaning high by those µs.

A kernel-issuing call costs ``host_dispatch_s`` in all (its Python, the autograd node, the dispatcher, the
allocation and the launch: measured eager ops cost 9-11 µs each on A100 and H100 hosts, the dgx presets'
comment); so a layer's forward costs its host ``16 × host_dispatch_s + 100 × host_call_s`` (460 µs on a DGX
A100's host) and its backward ``30 × host_dispatch_s + 68 × host_call_s`` (504 µs), which small layers (tp 8,
micro-batch 1) cannot hide. A backward kernel is issued by an autograd node in C++, without the forward's
Python: charging it the same ``host_dispatch_s`` leans high. The top-level ``backward()`` call's own start-up
(its graph task, the hand-off to the device's engine thread and back: ``Compute.host_backward_s``, once per
backward pass) runs on a drained device (the schedule's timer syncs just before it) and is ``plan.train_step``'s.
Beyond the ops' own counts, every parameter tensor's gradient hook of Megatron's data-parallel wrapper runs in
the backward (its Python, and a ``main_grad.add_`` kernel where gradient-accumulation fusion does not cover the
parameter: 12 hooks and 8 adds per GPT layer with it): ``plan.grad_hooks``.

**Other frameworks.** The counts above are Megatron-LM v2.x's. Megatron-Core's local tensor-parallel linears and
Transformer Engine's modules run more Python per linear layer (and TE's fuse the LayerNorm into the linear that
follows it): ``FRAMEWORK_HOST`` replaces the counts of those op kinds per framework (``mapping.host_framework``,
resolved and sourced in ``plan.framework_host``); the device's kernels (``KERNELS``, ``extra_launches``) stay.

**Collective calls.** A collective's device time (NCCL's latency and bandwidth, ``perf.collectives``) starts
when its kernel is launched; before that the host makes the call: Megatron-LM issues each tensor-parallel
reduction from Python (``_reduce`` → ``torch.distributed.all_reduce(..., group=...)``), whose wrapper checks its
arguments, looks up the communicator, records an event on the compute stream for the NCCL stream to wait on,
creates the work object, records the tensors' streams and enqueues the NCCL kernel: ``Compute.host_collective_s``,
the call's host time up to its launch. Where the host binds, the device waits that long before the collective
starts: ``collective_host_seconds`` is added to the host time of the segment the collective closes (every
collective the passes issue: tensor, expert, context and sharded data parallelism). The rest of the call (the
end event, ``work.wait()``'s stream join) runs on the host while the collective runs on the device and is not
charged. A collective a CUDA graph replays (``plan.cuda_graphs``) costs no host time; an inference pass's
collectives are the serving runtime's own (custom all-reduce, pynccl), not ``torch.distributed``'s: ``pass_device``
drops the cost there. The host synchronisations of the training loop (timers, ``.item()``, pipeline sends),
which throw the host's lead away, are ``plan.train_step``'s, with the collective calls made right after them
(the pipeline sends, ``get_batch``'s broadcasts) wholly exposed. An overlapped expert all-to-all that the paired
node hides whole closes no segment: its call goes to the open one (``PassComms._hidden_call``).

**Captured graphs.** Serving runtimes replay a captured CUDA graph for a decode step (vLLM captures the
"uniform decode" batches, prefill and mixed batches run eager; ``Compute.runtime_graphs``): the replay
launches every kernel of the pass from the device, so the host's per-kernel dispatch is not paid — the
segment lasts its device time. The per-kernel device gap (``fixed_op_s``) stays. Training is eager unless
``mapping.cuda_graph_scope`` names Megatron-Core's graphed parts of each layer (``plan.cuda_graphs``).

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

**When the host binds.** A segment lasts ``max(device, kernels × host_dispatch_s + calls ×
host_call_s)``: with 10 µs per kernel and 3 µs per other call the host issues a Megatron GPT layer's forward
in about 460 µs, which the device undercuts when a layer's work is small (a hidden size of 1-2 k at
micro-batch 1, or tp 4-8). The host's lead is not carried across a collective (it could be: launches are
asynchronous), which makes the bound slightly pessimistic, never optimistic: in a host-bound stretch the host
issues the next segment while the device runs the collective, so a collective costs the device its call's
pre-launch host time and then its own device time, as charged.

**Cross-entropy.** Megatron-LM's vocab-parallel cross-entropy runs as eager kernels, each streaming the
rank's fp32 logit shard (``megatron/mpu/cross_entropy.py``, ``_VocabParallelCrossEntropy``): forward, the
max (read 4 B per logit), subtracting it in place (read and write, 8), exp in place (8), the sum (4) and
dividing by it in place (8), keeping the softmax for the backward; backward, scaling it in place (8) after a
small scatter at the targets. GPT's ``post_language_model_processing`` first casts the logits to fp32
(``.float()`` unless --fp16-lm-cross-entropy): read at the activation width and written at 4 B, the gradient
cast back. ``op_cost`` charges any loss one read of the logits forward and two backward, what a fused kernel
(Megatron-Core's --cross-entropy-loss-fusion, ``mapping.fused_cross_entropy``) moves; the eager kernels' bytes
beyond that are ``eager_cross_entropy_bytes``. For a small GPT (hidden 1024, vocabulary 51,200) the logits
outweigh a layer's activations fifty-fold.

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
from tilewright.engine.ir.mapping import HostFramework
from tilewright.engine.ir.ops import Op, OpKind, TensorSplit
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

# (forward, backward) framework calls per op of each kind that issue no kernel (module docstring); kinds
# Megatron-LM does not have pay a module call and its functional's Python.
HOST_CALLS: dict[OpKind, tuple[int, int]] = {
    OpKind.matmul: (8, 8),
    OpKind.fc: (2, 1),
    OpKind.conv: (2, 1),
    OpKind.attention: (25, 12),
    OpKind.softmax: (9, 5),
    OpKind.norm: (8, 5),
    OpKind.elementwise: (3, 2),
    OpKind.dropout: (3, 1),
    OpKind.embedding: (6, 3),
    OpKind.pool: (2, 1),
    OpKind.loss: (11, 6),
}

# Per framework other than Megatron-LM v2.x: op kind → ((forward launches, calls), (backward launches, calls)) the
# host makes for it, replacing KERNELS/HOST_CALLS on the host's side (plan.framework_host gives the sources).
FRAMEWORK_HOST: dict[HostFramework, dict[OpKind, tuple[tuple[int, int], tuple[int, int]]]] = {
    "megatron-lm": {},
    "pytorch": {},  # v2.x's counts; the eager pointwise chains' launches: plan.framework_host.eager_pointwise
    "pytorch-compile": {},
    "megatron-deepspeed": {},  # v2.x's mpu layers; its per-layer blocking copies: plan.deepspeed_host
    "mcore": {
        OpKind.matmul: ((1, 21), (3, 8)),  # forward measured (74 us); backward as v2.x's
        OpKind.attention: ((3, 25 + 7), (5, 12 + 3)),  # v2.x's and the layer's make_viewless_tensor
    },
    "mcore-te": {
        OpKind.matmul: ((1, 43), (2, 22)),  # forward measured (140 us); backward counted
        OpKind.norm: ((1, 7), (1, 2)),  # the LayerNorm part of LayerNormLinear and its IdentityOp, counted
        OpKind.attention: ((3, 25 + 7), (5, 12 + 3)),  # v2.x's and the layer's make_viewless_tensor
    },
}

CHECKPOINT_CALLS = 9 + 22  # CheckpointFunction's forward and backward per re-run layer, its nested backward() apart

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


TRAINING_HOST = ("host_collective_s", "host_backward_s")  # a training framework's, not a serving runtime's


def serving_device(dev: DeviceModel) -> DeviceModel:
    """The device as a serving runtime drives it: without the training framework's collective calls and
    backward start-up (``TRAINING_HOST``; module docstring), else ``dev`` itself."""
    return _without(dev, TRAINING_HOST)


def pass_device(dev: DeviceModel, kind: InferencePass) -> DeviceModel:
    """The device as an inference pass of ``kind`` sees it (``serving_device``), also without host dispatch
    when the runtime replays the pass as a graph (its kernels and their device gaps unchanged)."""
    names = TRAINING_HOST + (("host_dispatch_s", "host_call_s") if graphed(dev.compute, kind) else ())
    return _without(dev, names)


def _without(dev: DeviceModel, names: tuple[str, ...]) -> DeviceModel:
    """``dev`` with the named host costs zeroed; ``dev`` itself when none is set."""
    c = dev.compute
    if not any(getattr(c, name) for name in names):
        return dev
    return dataclasses.replace(dev, compute=c.model_copy(update=dict.fromkeys(names, 0.0)))


def collective_host_seconds(compute: Compute) -> float:
    """Host time of one eager collective call up to its kernel's launch (``Compute.host_collective_s``) on a
    device whose kernels a host framework issues one by one (``issues_kernels``); 0 elsewhere."""
    if not compute.host_collective_s or not issues_kernels(compute):
        return 0.0
    return compute.host_collective_s


def backward_startup_seconds(compute: Compute) -> float:
    """Host start-up of one top-level ``backward()`` call (``Compute.host_backward_s``) on a device whose
    kernels a host framework issues; 0 elsewhere."""
    if not compute.host_backward_s or not issues_kernels(compute):
        return 0.0
    return compute.host_backward_s


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


def host_calls(op: Op, backward: bool, framework: HostFramework = "megatron-lm") -> int:
    """Framework calls of one op's forward or backward pass that issue no kernel."""
    if (counts := FRAMEWORK_HOST[framework].get(op.kind)) is not None:
        return counts[backward][1]
    fwd, bwd = HOST_CALLS.get(op.kind, (1, 1))
    return bwd if backward else fwd


def host_launches(op: Op, backward: bool, framework: HostFramework = "megatron-lm") -> int:
    """Kernel-issuing calls the host makes for one op's forward or backward pass in ``framework``: ``KERNELS``
    unless the framework issues the op's work differently (``FRAMEWORK_HOST``)."""
    if (counts := FRAMEWORK_HOST[framework].get(op.kind)) is not None:
        return counts[backward][0]
    return kernels(op, backward)


def checkpoint_host_seconds(compute: Compute) -> float:
    """Host time of the activation checkpoint around one fully recomputed layer: its framework calls
    (``CHECKPOINT_CALLS``) and the re-entrant ``backward()`` it calls from inside the outer backward
    (``backward_startup_seconds``; module docstring)."""
    return CHECKPOINT_CALLS * compute.host_call_s + backward_startup_seconds(compute)


def host_time(launches: float, calls: float, compute: Compute) -> float:
    """Host time of framework work: kernel launches at ``host_dispatch_s``, other calls at ``host_call_s``."""
    return launches * compute.host_dispatch_s + calls * compute.host_call_s


def host_seconds(op: Op, backward: bool, compute: Compute, framework: HostFramework = "megatron-lm") -> float:
    """Host time to run one op's pass in the framework: its kernel launches and its other calls."""
    return host_time(host_launches(op, backward, framework), host_calls(op, backward, framework), compute)


CROSS_ENTROPY_BYTES = (32.0, 8.0)  # (forward, backward) bytes per fp32 logit of the eager kernels (docstring)


def eager_cross_entropy_bytes(op: Op, backward: bool, elem_bytes: float) -> float:
    """Bytes per logit element of a rank's shard that the eager vocab-parallel cross-entropy streams beyond
    what ``op_cost`` charges a loss (one read of the logits forward, two backward); 0 for any other op."""
    if op.kind is not OpKind.loss or op.split is not TensorSplit.vocab:
        return 0.0
    cast = elem_bytes + 4.0 if elem_bytes < 4 else 0.0  # the .float() and, backward, the gradient cast back
    charged = (2.0 if backward else 1.0) * elem_bytes
    return max(0.0, CROSS_ENTROPY_BYTES[backward] + cast - charged)


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
