"""Host (CPU) work of Megatron-Core's overlapped expert-parallel schedule, beside what ``plan.moe_host`` and
``plan.launch`` charge an MoE layer's ops.

Under ``--overlap-moe-expert-parallel-comm`` (``mapping.overlap_ep_comm``, the "combined 1F1B") Megatron-Core does
not run a layer through ``TransformerLayer.forward`` and one ``backward()`` per model chunk: it splits each MoE
layer into four schedule nodes — attention (with the pre-MLP norm, the router and the dispatcher's preprocess),
the dispatch all-to-all, the MLP (the experts), the combine all-to-all — and runs each node's forward and each
node's backward as a call of its own, a forward node of one micro-batch beside a backward node of another
(``PassComms._a2a`` gives the pairing). Counted from NVIDIA/Megatron-LM
``megatron/core/pipeline_parallel/utils.py`` (``ScheduleNode``, ``stream_acquire_context``, read at
01415c4d79d4 and 8333bd5bb6de), ``megatron/core/models/gpt/fine_grained_callables.py`` (``TransformerLayerNode``,
``build_transformer_layer_callables``, ``should_free_input``, at 00c58ba02c54) and
``megatron/core/models/common/model_chunk_schedule_plan.py`` (``TransformerLayerSchedulePlan.run``, at
01cf4fb552b3), with the all-to-all dispatcher. Each call below is charged at ``host_call_s`` (a framework call
that launches nothing: stream and event calls, an ATen op that only makes a view or frees, as ``plan.moe_host``
counts them), each node backward's autograd call at ``host_backward_s``:

- every node, forward and backward (``ScheduleNode._forward``/``_backward``): ``stream_acquire_context``'s
  ``event.wait(stream)`` and ``event.record(stream)`` (2), the NVTX range's push and pop (2), and
  ``torch.cuda.stream(node.stream)``'s ``current_stream`` and ``set_stream`` on entry and ``set_stream`` on exit
  (3) — 7 calls (``NODE_CALLS``);
- forward: each input tensor ``make_viewless(e).detach()`` (1 call, ``detach``: attention 1 input, dispatch 2 —
  tokens and probabilities —, MLP 1, combine 1); ``TransformerLayerNode.detach`` of the residual in the attention
  node and of the dispatched probabilities in the dispatch node (1 each); ``free_input`` of the dispatch, MLP and
  combine nodes (the all-to-all dispatcher's: its inputs are dead after the forward): per input
  ``record_stream``, ``untyped_storage()`` and ``resize_(0)`` (3, four inputs); the combine node's
  ``residual.record_stream(torch.cuda.current_stream())`` (2); less ``MoELayer``'s own module call, which the
  nodes bypass by calling its methods (``plan.moe_host`` counts it with the combine): attention 1 + 1 + 7 = 9,
  dispatch 7 + 2 + 1 + 6 = 16, MLP 7 + 1 + 3 = 11, combine 7 + 1 + 3 + 2 − 1 = 12 — 48 calls per MoE layer;
- backward: each node runs its own ``Variable._execution_engine.run_backward`` (``default_backward_func`` over the
  node's outputs and its detached tensors) — four autograd calls per layer where the ordinary 1F1B makes one per
  model chunk — and ``record_stream`` on each gradient it hands on (combine 1, MLP 1, dispatch 2: the tokens' and
  the detached probabilities', attention 3: its two outputs' and the residual's): 7 + 7 + 4 × 7 = 35 calls.

**The autograd calls.** ``run_backward`` is the call Megatron's ordinary schedule makes once per micro-batch and
chunk (``custom_backward``): its graph task, the dependency count over the node's graph and the hand-off to the
device's autograd thread and back (torch/csrc/autograd/engine.cpp ``Engine::execute``: the calling thread pushes
the root and waits for the graph task's future). It is synchronous for the host — the Python thread resumes only
once every autograd node of the graph task has run, i.e. issued its kernels — but not for the device: the graph
task's end syncs the leaf streams with the caller's current stream by an event the stream waits on
(``exec_post_processing``), nothing the host waits for. Each therefore costs the host its start-up,
``Compute.host_backward_s`` (``launch.backward_startup_seconds``; measured through the Python
``torch.autograd.backward``, whose argument handling ``run_backward`` skips: leaning high by that much), and
leaves the device's queue alone: charged as host time of the node's segment, which binds only where the device
runs out of queued work. The first autograd call of a backward pass is ``plan.train_step``'s drained start-up
already; the per-node calls are charged here on top (one call per backward pass counted twice: a lean high of
``host_backward_s`` per pass).

**Run-ahead.** A node boundary waits on an event the previous node recorded on its stream: a device-side wait
(``cudaStreamWaitEvent``), the host runs on. The dispatcher's host synchronisation stays where it was: its
token counts come to the host at ``before_ep_alltoall`` (``MoEAlltoAllTokenDispatcher``; only CUDA graphs of
``moe_preprocess`` move the copy there too), now inside the dispatch node. In the steady state the schedule issues
that node after the paired backward's MLP node, whose kernels are still queued when the host waits, so the wait
need not drain the device; the plan keeps ``experts.dispatch_work``'s drain (``launch.drain_seconds``, once per MoE
layer forward) as it is — a small lean high here.

Charged with the op that opens each node in its pass (``node_calls``): forward, the attention node with the routing
op, the dispatch and MLP nodes with the first expert op (``experts_up``, where the dispatch all-to-all falls), the
combine node with the combine op; backward, the combine node with the combine op, the MLP node with the last
expert op (``experts_down``), the dispatch node with ``experts_up``, the attention node with the routing op. Not
charged: Transformer Engine's fp8 context entered per node instead of per layer (non-delayed recipes,
``get_fp8_context``), the delayed weight gradients' ``backward_dw`` calls (``plan.wgrad_delay``), a shared
expert's extra detach without ``moe_shared_expert_overlap``, the flex dispatcher's kept dispatch inputs (6 calls
fewer), attribute reads and writes (``requires_grad``, ``.grad``: O(1 µs) each, TransformerEngine pull request
#1191), the pre- and post-process nodes of a chunk's first and last stage, a dense layer's two nodes in a model
whose other layers are MoE (DeepSeek-V3's first three), and the recompute passes (a selective recompute re-runs
modules inside a node's backward: no nodes of its own).
"""

from __future__ import annotations

from tilewright.engine.ir.hardware import Compute
from tilewright.engine.ir.ops import MoERole, Op
from tilewright.engine.perf.device import issues_kernels
from tilewright.engine.plan.launch import backward_startup_seconds

NODE_CALLS = 2 + 2 + 3  # stream_acquire_context's event wait and record, NVTX push and pop, the stream context

# node → (forward calls, backward calls) beyond NODE_CALLS (module docstring)
NODES: dict[str, tuple[int, int]] = {
    "attn": (1 + 1, 3),  # its input's detach, the residual's detach; backward record_stream of 3 gradients
    "dispatch": (2 + 1 + 2 * 3, 2),  # 2 inputs' detach, the probabilities' detach, 2 inputs freed
    "mlp": (1 + 3, 1),  # its input's detach and freeing
    "combine": (1 + 3 + 2 - 1, 1),  # detach, freeing, the residual's record_stream, less MoELayer's module call
}


def nodes(op: Op, backward: bool) -> tuple[str, ...]:
    """The schedule nodes whose host work an MoE op's pass carries (module docstring); () for any other op."""
    info = op.moe
    if info is None:
        return ()
    if info.role is MoERole.routing:
        return ("attn",)
    if info.role is MoERole.combine:
        return ("combine",)
    if info.role is not MoERole.expert:
        return ()
    if info.dispatch_elems_per_token > 0:
        return ("dispatch",) if backward else ("dispatch", "mlp")
    if info.combine_elems_per_token > 0 and backward:
        return ("mlp",)
    return ()


def node_calls(op: Op, backward: bool) -> tuple[int, int]:
    """(calls, autograd calls) of the schedule nodes ``op``'s pass carries: ``NODE_CALLS`` and each node's own
    calls, one ``run_backward`` per node in the backward."""
    names = nodes(op, backward)
    return (sum(NODE_CALLS + NODES[n][backward] for n in names), len(names) if backward else 0)


def schedule_host_seconds(op: Op, backward: bool, compute: Compute) -> float:
    """Host seconds the overlapped schedule's nodes add to ``op``'s pass on a device a host framework drives
    kernel by kernel (``issues_kernels``); 0 elsewhere."""
    if not issues_kernels(compute):
        return 0.0
    calls, starts = node_calls(op, backward)
    return calls * compute.host_call_s + starts * backward_startup_seconds(compute)
