"""The optimizer step of a GPU whose optimizer state sits in host memory, as the offloading frameworks run it:
on the host's CPUs, with only gradients going down and updated parameters coming up over the host link.

Neither framework that offloads the optimizer streams the state to the GPU and back each step (what a device
with the state in a slower memory of its own does, ``residency.optimizer_seconds``):

- **DeepSpeed ZeRO-Offload** (Ren et al., "ZeRO-Offload: Democratizing Billion-Scale Model Training", USENIX
  ATC '21; ``deepspeed/ops/adam/cpu_adam.py``, ``csrc/adam/cpu_adam_impl.cpp``): the fp32 master weights and
  both moments live in host memory and ``DeepSpeedCPUAdam`` updates them there (AVX, OpenMP over the cores);
  the gradients are copied down, the updated low-precision weights copied up tile by tile while the next tile
  is updated.
- **Megatron-Core** ``--optimizer-cpu-offload`` (``megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py``,
  ``HybridDeviceOptimizer``; ``CPUAdam`` is ``torch.optim.AdamW`` with ``fused=True``): ``_set_sub_optimizer_grads``
  copies each parameter's fp32 main gradient into a pinned host buffer on a side stream (one event per
  parameter's CPU optimizer), each CPU optimizer steps as soon as its gradient's event has fired, and a
  post-step hook copies that parameter's fp32 main value back on another side stream
  (``--overlap-cpu-optimizer-d2h-h2d``: one CPU optimizer per parameter tensor so that the three overlap).

So the step is three streams pipelined parameter tensor by parameter tensor, the slowest of them bounding it
(the first tensor's copy down and the last one's copy up, one tensor each, are left out):

- the gradients down the host link, ``GRAD_DOWN_BYTES`` per parameter (Megatron's fp32 main gradient), none
  when ``memory_levels`` already keeps the gradients in host memory;
- the CPUs' Adam over the parameters: the host's measured CPU-Adam rate (``Memory.host_adam_params_per_s``,
  shared by the devices under the memory), and never faster than the host memory allows: the fused kernel
  reads the fp32 master, gradient and both moments and writes the master and moments back
  (``CPU_ADAM_BYTES``), and the copies land in and leave from the same memory;
- the updated parameters up the link, ``PARAM_UP_BYTES`` (Megatron's fp32 main parameter), none when the
  weights live in host memory.

Left out: Megatron keeps a GPU-side fp32 main copy beside its host one (counted here as DeepSpeed does: the
master in host memory only), DeepSpeed moves 2-byte gradients and weights (here Megatron's 4), and Megatron's
default without ``--overlap-cpu-optimizer-d2h-h2d`` runs the three one after the other.
"""

from __future__ import annotations

GRAD_DOWN_BYTES = 4.0  # the fp32 main gradient HybridDeviceOptimizer copies to its pinned host buffer
PARAM_UP_BYTES = 4.0  # the fp32 main parameter its post-step hook copies back
# torch's fused CPU AdamW (and DeepSpeed's Step_AVX) in one pass: fp32 master, gradient, exp_avg and exp_avg_sq
# read (16 B), master and both moments written (12 B)
CPU_ADAM_BYTES = 4.0 * 4 + 4.0 * 3


def host_step_seconds(
    params: float, link_bandwidth: float, memory_bandwidth: float, adam_rate: float, grads_on_host: bool,
    weights_on_host: bool,
) -> float:
    """Seconds of the host-CPU optimizer step over ``params`` parameters (module docstring) for one device:
    ``link_bandwidth``, its host link per direction (bytes/s); ``memory_bandwidth``, its share of the host
    memory's; ``adam_rate``, its share of the CPUs' Adam rate (params/s; inf: unmeasured, the memory bounds
    it). ``grads_on_host`` / ``weights_on_host``: ``memory_levels`` keeps them in host memory already, so
    nothing crosses the link for them."""
    if params <= 0:
        return 0.0
    down = 0.0 if grads_on_host else GRAD_DOWN_BYTES
    up = 0.0 if weights_on_host else PARAM_UP_BYTES
    cpu = params * max(1.0 / adam_rate, (CPU_ADAM_BYTES + down + up) / memory_bandwidth)
    return max(params * down / link_bandwidth, cpu, params * up / link_bandwidth)
