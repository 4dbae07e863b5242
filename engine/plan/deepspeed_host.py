"""What Microsoft's Megatron-DeepSpeed adds to each transformer layer's forward on the host (``mapping.host_framework``
'megatron-deepspeed'): two blocking host-to-device copies, each a synchronisation that drains the device.

Megatron-DeepSpeed forked Megatron-LM v2.x's ``mpu`` layers (the kernels and framework calls ``plan.launch`` counts,
``get_batch`` and the schedule's timers ``plan.train_step`` counts, the same ``CheckpointFunction``:
``megatron/mpu/random.py`` @ 2004311ecde50c5fa39437c0f9ad3cfea83fd75d) and added DeepSpeed's mixture of experts to
the layer. For that, ``ParallelTransformerLayer.forward`` creates two scalars on the device before its MLP, whatever
the layer (dense layers overwrite ``mlp_bias`` with the MLP's own bias and return the zero ``moe_loss``)::

    moe_loss = torch.tensor(0.0, device=layernorm_output.device, dtype=layernorm_output.dtype)
    mlp_bias = torch.tensor(0.0, device=layernorm_output.device, dtype=layernorm_output.dtype)

(microsoft/Megatron-DeepSpeed ``megatron/model/transformer.py`` @ 066632b27c8648e41271f1c5488fb2e413c1e44f, the
``mpu`` era before the July 2023 merge of Megatron-Core, and unchanged @ 1e3fc81d5f08cebdaf600372416b9e60fedff011
after it). Unconditional: no flag turns them off, and the DeepSpeed pipeline's ``ParallelTransformerLayerPipe``
calls the same ``forward``, so every layer forward of every such run makes them, with or without ``--deepspeed``.

``torch.tensor`` of a Python scalar builds the tensor in pageable host memory and copies it to the device with a
blocking copy: ``memcpy_and_sync`` (``cudaMemcpyAsync``, then ``cudaStreamSynchronize`` of the current stream),
which drains everything queued before it. pytorch/pytorch issue #120996 (PyTorch 2.1): ``torch.tensor(3.14,
device=dev)`` raises the sync-debug warning "called a synchronizing CUDA operation" where ``torch.full((), 3.14,
device=dev)`` does not; issue #190217 (2026, still open): the same call "should avoid h2d sync", a blocking sync
today. vTrain's image runs PyTorch 2.0.1 (VIA-Research/vTrain ``docker/Dockerfile`` @ f8dda84).

Charged per copy (``BLOCKING_COPIES`` per layer forward, before the MLP's first op): the call's host time as one
kernel-issuing call (``host_dispatch_s``: the Python, the allocation, the copy's enqueue) and its copy's device
floor (``fixed_op_s``) in the open segment, then a drain (``launch.drain_seconds``) as a segment of its own, as
the MoE dispatcher's dropless sync is charged (``plan.experts``). The second copy follows the first's drain: its
call runs on an idle device. A fully recomputed layer re-runs this ``forward`` inside its checkpoint's backward:
the recompute pays them again; a selective recompute re-runs the attention core only: not. Not inside a
full-iteration CUDA graph (a capture cannot hold a synchronisation; Megatron-DeepSpeed has no such graphs).

Left out: ``pretrain_gpt.forward_step``'s ``sum(moe_losses) * args.moe_loss_coeff`` (@
0782d753dd093cb5cee5c5a902c63c4ba75ea70d: one scalar add per layer and a multiply, per micro-batch), which runs
under Megatron's schedule only, not under DeepSpeed's pipeline engine, whose layers drop the ``moe_loss``
(``ParallelTransformerLayerPipe``): which one ran is a launch flag (``--deepspeed``, ``--no-pipeline-parallel``)
that vTrain's public files do not give. Likewise left out with the flags: DeepSpeed's engine, pipeline engine,
loss scaler and activation checkpointing.
"""

from __future__ import annotations

from collections.abc import Sequence

from tilewright.engine.ir.mapping import HostFramework
from tilewright.engine.ir.ops import Op, OpKind

FRAMEWORK: HostFramework = "megatron-deepspeed"
BLOCKING_COPIES = 2  # moe_loss and mlp_bias: torch.tensor(0.0, device=...) per layer forward


def blocking_copies(framework: HostFramework, ops: Sequence[Op], index: int) -> int:
    """Blocking host-to-device copies the framework makes right before ``ops[index]`` in a forward of the layer
    ``ops`` (module docstring): Megatron-DeepSpeed's two before the MLP's first op, i.e. the first op after a norm
    past the layer's attention (``post_attention_layernorm``; a sandwich norm's post-attention norm comes first, a
    QK norm before the attention is not it), once per layer; none for other frameworks, other ops, and layers
    without attention (the embedding, the head)."""
    if framework != FRAMEWORK or index < 1 or index >= len(ops) or ops[index - 1].kind is not OpKind.norm:
        return 0
    attention = next((i for i, op in enumerate(ops) if op.kind is OpKind.attention), None)
    if attention is None:
        return 0
    first = next((i for i in range(attention + 2, len(ops)) if ops[i - 1].kind is OpKind.norm), None)
    return BLOCKING_COPIES if index == first else 0
