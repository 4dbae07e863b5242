"""Megatron-LM's optional per-iteration logging and checking: the host and device work its flags add to a step.

Megatron-LM's training loop can do more than train. Each flag below adds work to every iteration that the
plan's passes and optimizer step (``plan.train_step``) do not contain; each is off unless the mapping asks for
it (Megatron's own defaults; ``mapping.log_params_norm``, ``log_num_zeros_in_grad``, ``timing_log_level``,
``check_for_nan_in_loss_and_grad``). Cited from NVIDIA/Megatron-LM (the stored versions; the CI commits of
``benchmarks/data/public_megatron_logs.csv`` run the same bodies):

- **--log-params-norm** (``training.py``: ``if args.log_params_norm: params_norm = calc_params_l2_norm(model)``,
  every iteration, after ``train_step``, whatever ``--log-interval`` says; ``megatron/utils.py`` @ 018d03b9):
  a Python loop over the model's parameter tensors (two checks each: not shared, not a tensor-parallel
  duplicate), under bf16 a ``param.data.float()`` cast kernel per tensor (2 B read, 4 B written); one apex
  ``multi_tensor_l2norm`` over them (reads every parameter: 2 B fp16, 4 B the bf16 casts or fp32), ``norm *
  norm``, an all-reduce over the model-parallel group (tensor × pipeline ranks) and ``norm_2.item()``.
- **--log-num-zeros-in-grad** (``megatron/optimizer/clip_grads.py`` ``count_zeros_fp32`` @ 03ba8eb1, called
  by the mixed-precision optimizer's ``step`` after the gradient clipping): per fp32 main gradient, its two
  checks, ``grad.detach()`` and ``grad.numel()`` (host calls), then ``grad.numel() - torch.count_nonzero(grad)``
  and ``num_zeros + total_num_zeros``: three Python-level ops (``host_dispatch_s`` each) launching four kernels
  (ATen's ``count_nonzero`` is ``ne`` then ``sum``: the second launch from C++, charged as a call), streaming
  the gradient once (4 B), the bool mask written and read (1 + 1 B); an all-reduce over the model-parallel
  group and ``.item()``. With the distributed optimizer (ZeRO ≥ 1) each rank counts its shard: its share of the
  tensors and parameters.
- **--timing-log-level** (``megatron/core/timers.py`` @ 00caa53a: ``Timers.__call__`` hands out a
  ``DummyTimer`` for a timer whose level exceeds the run's; ``Timer.start`` / ``stop`` call
  ``torch.cuda.synchronize()``, after ``torch.distributed.barrier`` with ``barrier=True``). Level 2 times every
  micro-batch (``forward-compute``, ``backward-compute``, ``batch-generator``, the pipeline's send and receive
  timers), level 1 the iteration's parts (``forward-backward`` and ``optimizer``, both started with
  ``barrier=args.barrier_with_L1_time``, default on; the optimizer's inner timers; the gradient reduction's),
  level 0 only the iteration (its ``interval-time`` timer is read at the log interval). The plan's default
  (None) is the Megatron-LM of its kernels (``plan.launch``, v2.x-v3.0), whose timers had no levels and all
  synchronised: level 2's drains without the two barriers. What a level removes (``plan.train_step``): below 2
  the forward's two timer drains (the legacy ``get_batch``'s key-size ``.cpu()`` stays), the backward's timer
  drain, the pipeline send's timer start before its call (the send's own ``synchronize`` stays, and a backward
  that receives its gradient still starts on a drained device) and the key-size broadcast's call on a drained
  device; below 1 the optimizer's copy-back timer's drain and the data-parallel reduction's timer drain. Levels
  1 and 2 add the two barriers: an all-reduce of one element over every rank each, its call's host time.
- **--check-for-nan-in-loss-and-grad** (Megatron-LM from late 2023, on by default there, ``--no-check-for-nan-in-
  loss-and-grad`` turns it off; off here, as the plan's Megatron-LM has none): the last pipeline stage's loss
  function asserts ``not loss.isnan()`` each micro-batch (``pretrain_gpt.loss_func``: a ``.item()``, one more
  drain of its forward pass), and the data-parallel wrapper's ``start_grad_sync`` takes each gradient bucket's
  ``grad_data.norm(p=2)`` and asserts it is not NaN (``megatron/core/distributed/param_and_grad_buffer.py``): per
  bucket a norm (the bucket's gradients read once, at the buffer's width) and a drain. Buckets: one per buffer
  without ``--overlap-grad-reduce``, else ``max(40,000,000, 1,000,000 × dp)`` parameters each
  (``distributed_data_parallel.py``). Charged in the step (with ``--overlap-grad-reduce`` the drains fall in the
  last backward instead; the device idles as long).

Each phase starts on a drained device (the optimizer's ``.item()`` or a timer just synchronised), so its host
issues every kernel with no lead: it lasts the longer of the host's calls and launches and the device's kernels
(their bytes at ``DeviceModel.stream_s``, ``Compute.fixed_op_s`` per kernel), then its collective's call
(``host_collective_s``) and time, then the ``.item()``'s drain (``launch.drain_seconds``). Left out: the
logging at ``--log-interval`` (``training_log``: the losses' ``.item()``, the timers' all-gather over every
rank; once per interval, a few drains), tensorboard writes, ``--deterministic-mode`` and ``NCCL_ALGO`` (no
cost the code states: the deterministic kernels' and the forced algorithm's speed are the libraries').
Only devices whose kernels a host framework issues (``issues_kernels``) pay any of it.

**torchtitan's loop** (``mapping.host_framework`` 'pytorch' / 'pytorch-compile', ``TORCH_LOOPS``): no Megatron
timers, no ``--timing-log-level`` levels, no barriers — none of the above drains (``pass_timers`` and
``step_timers`` are off, whatever ``timing_log_level`` says). What its ``train.py`` synchronises instead
(pytorch/torchtitan ``train.py`` @ 0011fb905e9561a51af0f265e35d989f7448b1d8, the A100 configuration's commit; the
December 2024 loop of the H100 rows has the same synchronising lines, over the ``dp_cp`` mesh), charged by
``torch_loop_seconds``:

- every step, ``input_ids = input_ids.cuda()`` (later ``.to(device_type)``) of the DataLoader's pageable CPU batch:
  a blocking host-to-device copy (``non_blocking`` False: ATen's copy synchronises the current stream after
  ``cudaMemcpyAsync``), which drains the previous step's queued optimizer work — one drain (``BATCH_DRAINS``; the
  labels' copy after it finds nothing queued). ``clip_grad_norm_(..., foreach=True)`` reads no value back (the
  clip coefficient stays a tensor), the optimizer reads no flag, the loop no loss scale: no other drain;
- at a log step (``train_state.step % metrics.log_freq == 0``): ``loss.item()`` over the losses since the last log
  (the first drains, the rest find nothing queued: ``LOG_ITEM_DRAINS``), then ``utils.dist_mean`` and
  ``utils.dist_max`` (``torch.tensor(x).cuda()``, a functional ``all_reduce`` over the data-parallel mesh and
  ``.item()``: ``LOG_REDUCTIONS`` each a collective call, a one-element all-reduce and a drain). Both fall inside
  the interval the logged tokens/s divides by (``time_delta`` is read after them, ``time_last_log`` reset after
  the logging): once per ``LOG_FREQ`` steps, charged as their share per step. ``LOG_FREQ``: torchtitan's
  ``--metrics.log_freq`` of the train configs the benchmarks ran (``train_configs/llama3_8b.toml``: 10; also the
  config manager's default). The reduction is timed over every rank (``world_reduce_s``): the dp(× cp) mesh is
  every rank of a 1-D FSDP job, an upper bound with tensor or pipeline ranks.

Left out: ``gpu_memory_monitor.get_peak_stats`` (``torch.cuda.memory_stats``: host bookkeeping, no device
synchronisation), the garbage collector every ``gc_freq`` steps (host only), the CP context's buffer sharding and
restore (``freqs_cis``), ``optimizers.zero_grad``'s Python loop on the drained device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilewright.engine.ir.mapping import HostFramework, Mapping
from tilewright.engine.perf.device import DeviceModel, issues_kernels
from tilewright.engine.plan.launch import collective_host_seconds, drain_seconds, host_time

PARAM_CHECKS = 2  # per tensor: param_is_not_shared, param_is_not_tensor_parallel_duplicate (host calls)
ZERO_CALLS = 4 + 1  # per main gradient: the two filters, .detach(), .numel(); count_nonzero's inner launch
ZERO_OPS = 3  # per main gradient, Python-level ops: count_nonzero, numel - count, the running sum
ZERO_KERNELS = 4  # their kernels: ne and sum (count_nonzero), the subtraction, the running sum
ZERO_BYTES = 4.0 + 1.0 + 1.0  # per element: the fp32 gradient read, the bool mask written, then read by sum
# apex's multi_tensor_apply (Megatron's ``multi_tensor_applier = MultiTensorApply(2048 * 32)``): a launch per
# 320 blocks of 65,536 elements or per 110 tensors, whichever fills first; l2norm's cleanup kernel, then norm * norm
MT_CHUNK = 2048 * 32
MT_BLOCKS = 320
MT_TENSORS = 110
NORM_TAIL_KERNELS = 2
BUCKET_MIN = 40_000_000  # Megatron DDP's bucket_size: max(40M, 1M × dp) parameters with --overlap-grad-reduce
BUCKET_PER_DP = 1_000_000
BARRIERS = 2  # level ≥ 1: forward-backward's and optimizer's start(barrier=True)
# torchtitan's training loop (module docstring): the frameworks that run it, its per-step batch copy's drain, and
# per log step the losses' .item() drain and the two one-element reductions (dist_mean, dist_max), every LOG_FREQ
TORCH_LOOPS: frozenset[HostFramework] = frozenset({"pytorch", "pytorch-compile"})
BATCH_DRAINS = 1
LOG_ITEM_DRAINS = 1
LOG_REDUCTIONS = 2
LOG_FREQ = 10


@dataclass(frozen=True)
class TrainLogging:
    """A training run's logging and checking flags (module docstring); the default adds nothing."""

    params_norm: bool = False
    num_zeros: bool = False
    timing_level: int | None = None  # None: the plan's Megatron-LM, every timer synchronising (level 2's drains)
    nan_check: bool = False
    torch_loop: bool = False  # torchtitan's loop (``TORCH_LOOPS``): no Megatron timers, its own synchronisations

    @classmethod
    def of(cls, m: Mapping) -> TrainLogging:
        """The mapping's flags, and whose training loop runs (``mapping.host_framework``)."""
        return cls(m.log_params_norm, m.log_num_zeros_in_grad, m.timing_log_level, m.check_for_nan_in_loss_and_grad,
                   m.host_framework in TORCH_LOOPS)

    @property
    def pass_timers(self) -> bool:
        """Whether the schedule's per-micro-batch timers synchronise (level 2, or the plan's default; never in
        torchtitan's loop)."""
        return not self.torch_loop and (self.timing_level is None or self.timing_level >= 2)

    @property
    def step_timers(self) -> bool:
        """Whether the optimizer's and the gradient reduction's timers synchronise (level ≥ 1, or the default;
        never in torchtitan's loop)."""
        return not self.torch_loop and (self.timing_level is None or self.timing_level >= 1)

    @property
    def barriers(self) -> int:
        """World barriers per iteration: the level-1 timers' (none at level 0, in the plan's default or in
        torchtitan's loop)."""
        if self.torch_loop:
            return 0
        return BARRIERS if self.timing_level is not None and self.timing_level >= 1 else 0

    @property
    def world_reductions(self) -> bool:
        """Whether ``step_seconds`` needs a one-element all-reduce over every rank timed (the level-1 barriers,
        torchtitan's log-step reductions)."""
        return self.barriers > 0 or self.torch_loop

    @property
    def adds_step_work(self) -> bool:
        """Whether ``step_seconds`` can be non-zero (any flag beyond the timers' drains, or torchtitan's loop)."""
        return self.params_norm or self.num_zeros or self.nan_check or self.barriers > 0 or self.torch_loop


DEFAULT = TrainLogging()


def multi_tensor_launches(tensors: float, params: float) -> int:
    """Kernel launches of one apex multi-tensor pass over ``tensors`` tensors of ``params`` elements in all."""
    if tensors <= 0:
        return 0
    chunks = params / MT_CHUNK + tensors  # each tensor's last chunk is partial
    return max(math.ceil(tensors / MT_TENSORS), math.ceil(chunks / MT_BLOCKS))


def _phase(dev: DeviceModel, launches: float, calls: float, kernels: float, nbytes: float) -> float:
    """A phase on a drained device: the longer of the host's ``launches`` (``host_dispatch_s``) and ``calls``
    (``host_call_s``) and the device's ``kernels`` streaming ``nbytes``."""
    c = dev.compute
    device = dev.stream_s(nbytes) + kernels * c.fixed_op_s if nbytes > 0 or kernels > 0 else 0.0
    return max(host_time(launches, calls, c), device)


def params_norm_seconds(dev: DeviceModel, tensors: float, params: float, weight_bytes: float, bf16: bool,
                        reduce_s: float) -> float:
    """``calc_params_l2_norm`` of a device holding ``params`` parameters in ``tensors`` tensors at
    ``weight_bytes`` each (module docstring); ``reduce_s``: one 4-byte all-reduce over the model-parallel group."""
    casts = tensors if bf16 else 0.0
    kernels = casts + multi_tensor_launches(tensors, params) + NORM_TAIL_KERNELS
    nbytes = params * ((weight_bytes + 4.0 + 4.0) if bf16 else weight_bytes)  # bf16: cast read + write, then read
    return (_phase(dev, kernels, tensors * PARAM_CHECKS, kernels, nbytes) + collective_host_seconds(dev.compute)
            + reduce_s + drain_seconds(dev.compute))


def num_zeros_seconds(dev: DeviceModel, tensors: float, params: float, reduce_s: float) -> float:
    """``count_zeros_fp32`` over ``tensors`` main gradients of ``params`` elements in all (module docstring)."""
    phase = _phase(dev, tensors * ZERO_OPS, tensors * ZERO_CALLS, tensors * ZERO_KERNELS, params * ZERO_BYTES)
    return phase + collective_host_seconds(dev.compute) + reduce_s + drain_seconds(dev.compute)


def nan_buckets(params: float, dp: int, overlap_grad_reduce: bool) -> int:
    """Gradient buckets of Megatron's data-parallel wrapper over ``params`` parameters (module docstring)."""
    if params <= 0:
        return 0
    if not overlap_grad_reduce:
        return 1
    return math.ceil(params / max(BUCKET_MIN, BUCKET_PER_DP * dp))


def nan_grad_seconds(dev: DeviceModel, params: float, grad_bytes: float, buckets: int) -> float:
    """``start_grad_sync``'s NaN check: per bucket a norm and an ``isnan`` kernel, then a drain; the norms read
    the ``params`` gradients once at ``grad_bytes`` each (module docstring)."""
    if buckets <= 0:
        return 0.0
    return _phase(dev, 2 * buckets, 0.0, 2 * buckets, params * grad_bytes) + buckets * drain_seconds(dev.compute)


def step_seconds(dev: DeviceModel, log: TrainLogging, *, tensors: float, params: float, weight_bytes: float,
                 bf16: bool, model_reduce_s: float, world_reduce_s: float, zero_shard: int = 1,
                 grad_bytes: float = 4.0, dp: int = 1, overlap_grad_reduce: bool = False) -> float:
    """Seconds the flags ``log`` add to a stage's iteration tail beyond the optimizer step (module docstring):
    the parameters' norm, the gradients' zero count (over ``zero_shard``'s share of main gradients), the
    gradient buckets' NaN check and the level-1 timers' barriers. ``tensors`` and ``params``: the stage's per
    device; ``model_reduce_s`` / ``world_reduce_s``: a 4-byte all-reduce over the model-parallel group / every
    rank. 0 on a device no host framework drives."""
    if not issues_kernels(dev.compute) or not log.adds_step_work or params <= 0:
        return 0.0
    total = 0.0
    if log.params_norm:
        total += params_norm_seconds(dev, tensors, params, weight_bytes, bf16, model_reduce_s)
    if log.num_zeros:
        shard = max(zero_shard, 1)
        total += num_zeros_seconds(dev, max(1.0, tensors / shard), params / shard, model_reduce_s)
    if log.nan_check:
        total += nan_grad_seconds(dev, params, grad_bytes, nan_buckets(params, dp, overlap_grad_reduce))
    total += log.barriers * (collective_host_seconds(dev.compute) + world_reduce_s)
    if log.torch_loop:
        total += torch_loop_seconds(dev, world_reduce_s)
    return total


def torch_loop_seconds(dev: DeviceModel, world_reduce_s: float, log_freq: int = LOG_FREQ) -> float:
    """What torchtitan's loop synchronises per step on a device its host drives (module docstring): the batch
    copy's drain, and a log step's losses ``.item()`` and its two reductions (each a collective call, a one-element
    all-reduce of ``world_reduce_s`` and a ``.item()``) as their share of the ``log_freq`` steps between logs."""
    if not issues_kernels(dev.compute):
        return 0.0
    drain = drain_seconds(dev.compute)
    reduction = collective_host_seconds(dev.compute) + world_reduce_s + drain
    log_step = LOG_ITEM_DRAINS * drain + LOG_REDUCTIONS * reduction
    return BATCH_DRAINS * drain + log_step / max(log_freq, 1)
