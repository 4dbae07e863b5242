"""What Megatron-LM's training step pays outside the layers' kernels: host synchronisations and the
mixed-precision optimizer's own passes. Small jobs feel these; large ones do not.

The plan's kernels are Megatron-LM's of the ``--checkpoint-activations`` era (v2.x–v3.0, 2021–22:
``plan.launch``), the version of Megatron's SC'21 measurements and the era of the flags vTrain's
single-node runs give. That version's training loop stops the host's run-ahead many times an iteration
(newer Megatron-Core creates only the timers its ``--timing-log-level`` asks for):

- **Timers.** Every ``Timers`` start and stop calls ``torch.cuda.synchronize()`` (``megatron/global_vars.py``
  ``_Timer``), and the schedule times every micro-batch: ``forward-compute`` and ``backward-compute`` around
  each forward and backward step, ``batch-generator`` around ``get_batch`` (``pretrain_gpt.forward_step``);
- **Batch broadcast.** ``get_batch`` (every stage, every micro-batch; other frameworks: "get_batch by framework"
  below) broadcasts the batch over the tensor
  group with ``tensor_parallel.broadcast_data``: first the key sizes, which come back to the host with
  ``.cpu()``, then the flattened int64 tokens — two small broadcasts, charged as tensor-parallel
  communication at the head of each forward;
- **Pipeline sends.** ``p2p_communication._communicate`` waits on its ``batch_isend_irecv`` requests and then
  calls ``torch.cuda.synchronize()`` ("to protect against race condition");
- **Optimizer.** ``Float16OptimizerWithFloat16Params.step`` reads the found-inf flag of the loss scaler with
  ``.item()`` (fp16 only: bf16 has no scaler) and the gradient norm with ``.item()`` (``clip_grad_norm_fp32``),
  and times its copy-back (``optimizer-copy-main-to-model-params``); ``backward-params-all-reduce`` times
  the data-parallel reduction.

A synchronisation costs the device only when it drains queued work: the device then idles until the host
has woken and issued the next kernel (``Compute.host_sync_s`` plus that kernel's ``host_dispatch_s``: the
host has no lead to hide it). Back-to-back syncs with nothing queued between (a timer's stop and the next
timer's start) cost nothing more. Counted per pass (``DRAINS``): a forward drains three times (the sizes'
``.cpu()``, ``batch-generator`` stop, ``forward-compute`` stop), a backward once (``backward-compute``
stop), each pipeline send once (its ``synchronize``, which also waits for the transfer, already timed as
``pp_comm``). The drain is put first in the pass and reported as ``host_wait``.

**Host work on a drained device.** What the host does between a drain and its next launch the device waits
for whole: each pipeline send's collective call (``send_forward`` / ``send_backward`` start their timer, which
synchronises, then call ``batch_isend_irecv``: ``Compute.host_collective_s`` up to its launch, ``plan.launch``),
``get_batch``'s two broadcasts (the first after the ``batch-generator`` timer's start, the second after the
sizes' ``.cpu()``: each call's ``host_collective_s``, on the broadcast's own segment) and the backward pass's
``torch.autograd.backward`` call, made right after the ``backward-compute`` timer's start (its start-up,
``Compute.host_backward_s``; the recomputing layers' checkpoints, their nested ``backward()`` calls included,
are ``launch.checkpoint_host_seconds``). They lead their pass as host waits beside the drains. So does the rest
of ``get_batch`` (``GET_BATCH_*``, every forward, at every timer level: after the key sizes' ``.cpu()`` the device
holds nothing but the broadcasts and these tiny kernels, so it waits for the host throughout), read off
``pretrain_gpt.get_batch`` (the legacy GPT's, the same body from v2.x's ``mpu.broadcast_data`` to 2023's
``tensor_parallel.broadcast_data``) and ``megatron/utils.py`` ``get_ltor_masks_and_position_ids`` with the
defaults (no position or attention-mask reset, no EOD loss mask): ``broadcast_data``'s ``narrow`` and ``view``
of its one key (2 calls), ``tokens_ = data_b['text'].long()`` (a no-op call on int64), ``labels =
tokens_[:, 1:].contiguous()`` and ``tokens = tokens_[:, :-1].contiguous()`` (2 slicing calls, 2 copy launches);
then ``data.size()`` (1), ``torch.tril(torch.ones((1, s, s)))`` (2 launches) and its ``.view`` (1), the loss
mask's ``torch.ones(data.size())`` (1 launch, 1 call), ``torch.arange`` (1 launch),
``.unsqueeze(0).expand_as(data)`` (2) and ``attention_mask < 0.5`` (1 launch): 7 launches, 10 calls. Left out:
the warm-up's and cool-down's separate receives (1F1B's steady state receives in the send's call), the optimizer
step's flag all-reduces and the data-parallel reduction's call (two or three calls an iteration, issued behind
the step's own kernels), ``next(data_iterator)`` on the tensor group's first rank (the DataLoader's Python and
its worker queue: no count the code states) and the last stage's loss tail per micro-batch (``loss_func``'s
masked mean, ``average_losses_across_data_parallel_group``'s ``clone``, ``cat``, all-reduce and division, the
schedule's ``loss / num_microbatches``: about 8 launches and a collective call, no host synchronisation — the
``forward-compute`` timer's stop drains them — issued while the device may still run the pass: not a drained
device's wait, and the plan's passes hold no host time beyond their ops').

**get_batch by framework** (``get_batch_work``, ``mapping.host_framework`` as ``plan.framework_host`` resolves it).
The counts above are Megatron-LM's ``get_batch`` ('megatron-lm', v2.x; 'mcore', whose legacy models of 2023 keep
the same ``pretrain_gpt.get_batch`` body with ``tensor_parallel.broadcast_data``; 'megatron-deepspeed', whose
``pretrain_gpt.get_batch`` is v2.x's, microsoft/Megatron-DeepSpeed @ 0782d753dd093cb5cee5c5a902c63c4ba75ea70d). The
others:

- **'mcore-te'** (Megatron-Core's GPT, NeMo's recipes, 2024+): ``pretrain_gpt.get_batch`` returns at once unless
  the (virtual) stage is the first or the last (NVIDIA/Megatron-LM ``pretrain_gpt.py`` @
  000ab9d6719e22605b0619b8fcca713b1ce4e969: ``if not is_first_or_last_pipeline_stage(vp_stage): return None, ...``,
  the virtual stage's position), then
  calls ``get_batch_on_this_tp_rank`` (``megatron/training/utils.py`` @ 00caa53af30912914981c86f39db123961678bbd):
  the tensor group's source rank copies the DataLoader's pinned batch with ``.cuda(non_blocking=True)`` (tokens,
  labels, loss mask, position ids: ``MCORE_GET_BATCH_LAUNCHES``) and broadcasts the stage's tensors — all four
  with one stage, tokens and position ids on the first, labels and loss mask on the last
  (``MCORE_BROADCAST_BYTES``); the other ranks allocate them with ``torch.empty`` of the shapes ``args`` gives
  (micro-batch × sequence): no key sizes, no ``.cpu()``, no drain. The masks and position ids come from the
  dataset (``GPTDataset``): no mask kernels. Its host work and calls follow the ``batch-generator`` timer's
  synchronisation (level 2) only: without it they hide behind the queued work. Middle stages: nothing but the
  timer pair around the ``None`` return. Not charged: the attention mask's broadcast (micro-batch × s × s bytes)
  when ``--create-attention-mask-in-dataloader`` is left on and the dataset makes it; the 2025 body's
  ``_broadcast_cu_seqlens`` (two more broadcasts and, on the other ranks, an ``.item()``: a drain) for packed
  sequences; ``get_batch_on_this_cp_rank`` (a no-op at context parallelism 1).
- **'pytorch', 'pytorch-compile'** (torchtitan, ``train.py`` @ 0011fb905e9561a51af0f265e35d989f7448b1d8, the
  commit of ``calibrate_fsdp``'s A100 configuration): ``input_ids = input_ids.cuda(); labels = labels.cuda()``
  once per step (one micro-batch per step; a pipeline schedule splits it inside ``pp_schedule.step``): two
  host-to-device copies and, from pageable memory, one wait for the stream — a drain once per step, charged
  with the rest of torchtitan's loop (``train_logging.torch_loop_seconds``), not per forward. Every rank loads
  its own batch: no broadcast.

**The mixed-precision optimizer's passes.** ``ADAM_BYTES_*`` (``plan.plan``) streams one fused Adam step
(fp32 gradient, master weights and moments read, the three written, the low-precision copy written).
Megatron's step makes more passes (``megatron/optimizer/optimizer.py``, local DDP with its contiguous
gradient buffer, ``megatron/model/distributed.py``; the buffer is fp32 only with
``--accumulate-allreduce-grads-in-fp32``, which bf16 forces and fp16 leaves off): ``zero_grad_buffer`` writes
the buffer (fp16: 2 B per parameter, bf16: 4); fp16 copies it into fp32 main gradients
(``main_grad.float()``: 2 B read, 4 written; a no-op on bf16's fp32 buffer) and unscales them
(``_amp_foreach_non_finite_check_and_unscale_``: 8 B); ``clip_grad_norm_fp32`` reads them once more
(``multi_tensor_l2norm``, 4 B); apex's ``FusedAdam`` writes the fp32 master weights and
``_copy_main_params_to_model_params`` reads them back to write the low-precision copy
(``multi_tensor_scale``: 4 B more than a fused step). fp16: 24 B per parameter beyond the fused step, bf16: 12.
Megatron-Core's precision-aware optimizer (``mapping.optimizer_moments`` / ``optimizer_master`` other than fp32)
hands Transformer Engine's FusedAdam the master copy when the run is not fp8, or fp8 with delayed scaling, or its
master is fp16 (``OptimizerConfig.use_precision_aware_optimizer_no_fp8_or_ds_fp8``); FusedAdam then writes the
low-precision weights inside its kernel and ``DistributedOptimizer._copy_main_params_to_model_params`` returns
at once ("main params are held by self.optimizer. It will also do the work of copying data from main params to
model params"): the master's read-back (4 B) is not streamed (``te_holds_master``). The casts of its non-fp32
states are the fused step's (``residency.adam_split``).
The found-inf flag (fp16) and the norm are each all-reduced over the model-parallel group (every tensor and
pipeline rank of a replica) before their ``.item()``. Not charged: the clipping's scale pass (it runs only
when the norm exceeds the threshold), the multi-tensor kernels' launches (a few per pass: apex's
``multi_tensor_apply`` takes up to 110, 64 or 36 tensors per launch for one, two or four lists,
``csrc/multi_tensor_apply.cuh`` ``depth_to_max_tensors``), ``zero_grad``'s ``param.grad = None`` (pure
Python). fp16's data-parallel reduction moves that fp16 buffer (2 B per parameter: ``perf.memory.bytes_per_param``).

**The optimizer's Python per parameter tensor** (``TENSOR_CALLS``, ``loop_seconds``). Each phase of the step
builds its tensor lists in Python before it launches anything, after a drain (the data-parallel reduction's
timer, the found-inf or norm ``.item()``, a step timer): the device idles through those loops. Counted per
parameter tensor the step holds (its shard with the distributed optimizer) from ``MixedPrecisionOptimizer.step``
and ``Float16OptimizerWithFloat16Params`` (``megatron/optimizer/optimizer.py``
@ d657a3ef5cedf68aad17c4b76d847902978b42cd),
``clip_grad_norm_fp32`` (``megatron/optimizer/clip_grads.py``: the 2022 body @ 03ba8eb1 has the ``.detach()``,
the v2.x and Megatron-Core bodies also ``assert param.grad.type() == 'torch.cuda.FloatTensor'``) and apex's
``FusedAdam.step`` (``apex/optimizers/fused_adam.py`` @ 004da4edfc08853393bfc8ef3e2436f652176f13), each call that
makes a tensor object or crosses into C++ at ``host_call_s`` (attribute reads, ``hasattr``, ``append`` and
``= None`` are not counted):

- ``_copy_model_grads_to_main_grads``: ``main_param.grad = model_param.main_grad.float()`` — the ``.grad``
  setter (1 call) and ``.float()``: under fp16 a cast kernel per tensor (the fp16 buffer to fp32, a launch at
  ``host_dispatch_s``), under bf16 a call that returns the fp32 buffer itself (1 call);
- ``_collect_main_grad_data_for_unscaling`` (fp16, a loss scaler): ``main_param.grad.data`` (1);
- ``get_main_grads_for_grad_norm``: ``param_is_not_shared`` and ``param_is_not_tensor_parallel_duplicate`` (2, as
  ``plan.train_logging`` counts them); ``clip_grad_norm_fp32``: ``param.grad.detach()`` and ``.type()`` (2);
- ``FusedAdam.step``: ``p.grad.data.is_sparse``, then ``g_32.append(p.grad.data)`` and ``p_32.append(p.data)``
  (3 ``.data``);
- ``_copy_main_params_to_model_params``: ``model_param.data`` and ``main_param.data`` (2); then fp16's one
  ``multi_tensor_scale``, but bf16 has no ``_dummy_overflow_buf`` (``if bf16: self._dummy_overflow_buf = None``)
  and ``_multi_tensor_copy_this_to_that`` falls back to ``that_.copy_(this_)`` per tensor: a launch per tensor.
  When Transformer Engine's FusedAdam holds the master (``te_holds_master``) the copy-back returns at once: its
  two calls and bf16's launches go.

fp16: 11 calls and one launch per tensor, bf16: 11 and one. The per-tensor kernels (the cast, the copy) stream
``TENSOR_LAUNCH_BYTES`` per parameter, charged in the extra passes above: the host's launches add only what they
outlast those kernels (``max(0, launches × host_dispatch_s − their device time)``, each kernel at its floor
``fixed_op_s`` and its stream). Below timing level 1 the loops before the step's first ``.item()`` may hide
behind a data-parallel reduction still running: charged whole (leaning high by at most those loops).

**The training loop's loss-scale read.** Every iteration ``train()`` calls ``optimizer.get_loss_scale().item()``
after ``train_step`` (``megatron/training.py`` @ 003ad9f544a85ef408119c8c387e02af0b23554f; the same line in
the v2.x loop, which still passed ``lr_scheduler``, and in Megatron-Core's ``training.py``, bf16 reading its
``_scale_one`` tensor): a ``.item()`` on every rank. With the copy-back timer synchronising it finds nothing
queued (back-to-back: no cost); below timing level 1 it drains the copy-back and Adam the timer no longer
drains: the step's second drain stays at every level (``STEP_DRAINS``).

**Full-iteration CUDA graphs** (``mapping.cuda_graph_scope`` ``full_iteration``, ``plan.cuda_graphs``;
Megatron-Core ``--cuda-graph-impl local``). ``training.py`` wraps ``forward_backward_func`` in
``FullCudaGraphWrapper`` (``megatron/core/full_cuda_graph.py``), which captures it once and then replays
it; nothing the host waits on can sit inside a capture (a ``synchronize`` or ``.item()`` there fails it).
What stays and what goes, from where each sync runs:

- gone: every per-pass drain (the schedule's timers, ``get_batch``'s key-size ``.cpu()``, the pipeline
  sends' ``synchronize``) — they run inside ``forward_backward_func``; the key-size broadcast goes with its
  ``.cpu()`` (Megatron-Core's ``get_batch_on_this_tp_rank`` broadcasts fixed-shape tensors), the token
  broadcast stays, an NCCL collective the graph replays. The wrapper's ``data_read`` copies every
  micro-batch into static buffers before the replay on a side stream the compute stream waits on: no host
  sync (not charged: a host-to-device copy of a few KiB per micro-batch);
- gone: the data-parallel reduction's drain (``DP_DRAINS``): Megatron-Core reduces the gradients in
  ``finalize_model_grads``, which the schedule calls at the end of ``forward_backward_func``, inside the
  graph (``arguments.py`` also demands ``--no-check-for-nan-in-loss-and-grad``, whose check would sync there);
- kept: the optimizer step (``STEP_DRAINS``, ``SCALER_DRAINS``, the flag all-reduces, the extra passes):
  ``optimizer.step()`` runs after the wrapper returns, eagerly; its gradient-norm ``.item()`` drains the
  replayed graph as it drains the eager iteration.

The graph's one replay per iteration costs one launch's host time, left out as ``plan.cuda_graphs`` does.

**Timer levels and optional logging** (``plan.train_logging``): the counts above are the default, every timer
synchronising; ``mapping.timing_log_level`` below 2 drops the per-micro-batch timers' drains and the exposed
calls they caused, below 1 the step's timer drains (``TrainLogging``); ``--check-for-nan-in-loss-and-grad`` adds
a drain to the last stage's forwards. The logging flags' own step work is ``train_logging.step_seconds``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.common import DType
from tilewright.engine.ir.hardware import Compute
from tilewright.engine.ir.mapping import Fp8Scaling, HostFramework
from tilewright.engine.perf.collectives import collective
from tilewright.engine.perf.device import DeviceModel, issues_kernels
from tilewright.engine.plan.launch import backward_startup_seconds, collective_host_seconds, drain_seconds, host_time
from tilewright.engine.plan.passes import ChunkPass, Segment
from tilewright.engine.plan.residency import StageResidency, home_level, optimizer_seconds
from tilewright.engine.plan.train_logging import DEFAULT, TrainLogging

# Drains of queued device work per pass (module docstring): the schedule's timers' (``batch-generator`` and
# ``forward-compute`` stops, ``backward-compute`` stop), which Megatron's --timing-log-level below 2 does not
# create (``plan.train_logging``), and, a forward under Megatron-LM's get_batch, the key sizes' ``.cpu()``
# (``GET_BATCH_DRAINS``, by framework: ``get_batch_work``); per pipeline send
TIMER_DRAINS = {"F": 2, "B": 1}
GET_BATCH_DRAINS = 1
DRAINS = {"F": TIMER_DRAINS["F"] + GET_BATCH_DRAINS, "B": TIMER_DRAINS["B"]}  # Megatron-LM's get_batch, all timers
SEND_DRAINS = 1
NAN_LOSS_DRAINS = 1  # --check-for-nan-in-loss-and-grad: the last stage's loss .isnan() per forward
# Per optimizer step: the gradient norm's .item() and, after the copy-back, its timer's stop or (below timing
# level 1) the training loop's loss-scale .item(); the found-inf .item() with a loss scaler (fp16), the
# data-parallel reduction's timer stop with replicas.
STEP_DRAINS = 2
SCALER_DRAINS = 1
DP_DRAINS = 1

# Bytes per parameter Megatron's mixed-precision optimizer streams beyond one fused Adam step, by the
# category of state they touch (``residency.ADAM_SPLIT_MIXED``; module docstring): fp16 zeroes its fp16
# gradient buffer (2), copies it into fp32 main gradients (2 + 4), unscales them (4 + 4) and reads them for
# the norm (4); bf16 zeroes its fp32 buffer (4) and reads it for the norm (4); both read the master
# weights back for the low-precision copy (4).
FP16_EXTRA_SPLIT = {"gradients": 2 + (2 + 4) + (4 + 4) + 4, "optimizer": 4}
BF16_EXTRA_SPLIT = {"gradients": 4 + 4, "optimizer": 4}
# The optimizer's Python per parameter tensor (module docstring): framework calls, of them the copy-back's two
# .data, and one kernel launched per tensor (fp16: the main gradient's cast; bf16: the copy-back's copy_), whose
# pass streams 2 B read + 4 written (the cast) or 4 read + 2 written (the copy) per parameter
# norm filters, .detach() and .type(), the .grad setter, fp16's .grad.data or bf16's .float(), Adam's, the copy-back's
TENSOR_CALLS = 2 + 2 + 1 + 1 + 3 + 2
COPY_BACK_CALLS = 2
TENSOR_LAUNCH_BYTES = 2.0 + 4.0
STATE = ("weights", "gradients", "optimizer")  # what the step streams: off the device, another runtime's step
FLAG_BYTES = 4  # the found-inf flag and the squared norm: one fp32 each
# broadcast_data's key sizes: max_dim (8) int64 per key, GPT's one key ('text'); the batch itself is
# micro-batch × (sequence + 1) int64 tokens (the labels are the tokens shifted by one)
SIZES_BYTES = 8 * 8
TOKEN_BYTES = 8
# the rest of get_batch, every forward (module docstring): launches (the labels' and tokens' .contiguous(); the
# masks' ones, tril, ones, arange, < 0.5) and calls (narrow and view, .long(), two slices, two size(), view,
# unsqueeze, expand_as)
GET_BATCH_LAUNCHES = 2 + 5
GET_BATCH_CALLS = 2 + 1 + 2 + 5
# Megatron-Core's get_batch (framework 'mcore-te', module docstring): the tensor group's source rank copies the
# DataLoader's pinned batch to the device (``.cuda(non_blocking=True)``: tokens, labels, loss mask, position ids;
# no attention mask with ``--no-create-attention-mask-in-dataloader``), then broadcasts the stage's tensors, each
# micro-batch × sequence elements of these bytes (int64 tokens, labels and positions, fp32 loss mask)
MCORE_GET_BATCH_LAUNCHES = 4
MCORE_BROADCAST_BYTES = {"tokens": 8, "labels": 8, "loss_mask": 4, "position_ids": 8}
MCORE_FIRST_STAGE = ("tokens", "position_ids")
MCORE_LAST_STAGE = ("labels", "loss_mask")
MEGATRON_GET_BATCH: frozenset[HostFramework] = frozenset({"megatron-lm", "mcore", "megatron-deepspeed"})


@dataclass(frozen=True)
class GetBatchWork:
    """One forward's ``get_batch`` on a virtual stage (``get_batch_work``): its drains, its host work on a drained
    device (``launches``, ``calls``; ``after_timer``: exposed only behind the ``batch-generator`` timer's
    synchronisation, having no drain of its own), its broadcasts over the tensor group as (label, bytes per token of
    the rows ``rows`` names: ``"fixed"`` one, ``"shifted"`` micro-batch × (sequence + 1), ``"sequence"`` micro-batch ×
    sequence)."""

    drains: int = 0
    launches: int = 0
    calls: int = 0
    after_timer: bool = False
    sends: tuple[tuple[str, float, str], ...] = ()


def get_batch_work(framework: HostFramework, virtual_stage: int, virtual_stages: int) -> GetBatchWork:
    """What ``framework``'s ``get_batch`` does per forward on ``virtual_stage`` (module docstring, "get_batch by
    framework"): Megatron-LM's (v2.x, and 2023's legacy models: 'megatron-lm', 'mcore') on every stage; Megatron-Core's
    ('mcore-te') nothing on middle stages and, on the first and last, fixed-shape broadcasts after the source rank's
    copies, no drain, no mask kernels; torchtitan's ('pytorch', 'pytorch-compile') nothing charged."""
    if framework in MEGATRON_GET_BATCH:
        return GetBatchWork(GET_BATCH_DRAINS, GET_BATCH_LAUNCHES, GET_BATCH_CALLS, False,
                            (("batch sizes broadcast", float(SIZES_BYTES), "fixed"),
                             ("batch broadcast", float(TOKEN_BYTES), "shifted")))
    if framework != "mcore-te":
        return GetBatchWork()
    first, last = virtual_stage == 0, virtual_stage == virtual_stages - 1
    if not (first or last):
        return GetBatchWork()
    names = [*(MCORE_FIRST_STAGE if first else ()), *(MCORE_LAST_STAGE if last else ())]
    if first and last:  # a single stage broadcasts all four, in get_batch_on_this_tp_rank's order
        names = ["tokens", "labels", "loss_mask", "position_ids"]
    return GetBatchWork(0, MCORE_GET_BATCH_LAUNCHES, 0, True,
                        tuple((f"batch broadcast ({n})", float(MCORE_BROADCAST_BYTES[n]), "sequence") for n in names))


def pass_sends(kind: str, virtual_stage: int, virtual_stages: int) -> int:
    """Pipeline sends of one forward ("F") or backward ("B") pass of a virtual stage: a forward sends on
    unless its stage is the last, a backward back unless it is the first."""
    if kind == "F" and virtual_stage < virtual_stages - 1:
        return 1
    if kind == "B" and virtual_stage > 0:
        return 1
    return 0


def pass_drains(kind: str, virtual_stage: int, virtual_stages: int, log: TrainLogging = DEFAULT,
                framework: HostFramework = "megatron-lm") -> int:
    """Drains of one forward ("F") or backward ("B") pass of a virtual stage (a recompute pass runs inside
    the backward's timer: none of its own); ``log``: the run's timer level and NaN check (``plan.train_logging``);
    ``framework``: whose ``get_batch`` a forward runs (``get_batch_work``)."""
    own = TIMER_DRAINS.get(kind, 0) if log.pass_timers else 0
    if kind == "F":
        own += get_batch_work(framework, virtual_stage, virtual_stages).drains
    if log.nan_check and kind == "F" and virtual_stage == virtual_stages - 1:
        own += NAN_LOSS_DRAINS
    return own + SEND_DRAINS * pass_sends(kind, virtual_stage, virtual_stages)


def exposed_host_seconds(compute: Compute, kind: str, virtual_stage: int, virtual_stages: int,
                         log: TrainLogging = DEFAULT, framework: HostFramework = "megatron-lm") -> float:
    """Host work of a pass on a drained device beside its drains (module docstring): each pipeline send's
    collective call, a forward's ``get_batch`` beyond its broadcasts (``get_batch_work``: Megatron-LM's after its own
    ``.cpu()``, at every timer level; Megatron-Core's only behind the ``batch-generator`` timer) and, a backward, its
    ``backward()`` start-up. Without the per-micro-batch timers (``log.pass_timers``) a send's call follows no
    synchronisation and hides behind the queued pass, and a backward starts on a drained device only after receiving
    its gradient (the receive's ``synchronize``: every virtual stage but the last)."""
    calls = pass_sends(kind, virtual_stage, virtual_stages) * collective_host_seconds(compute)
    sends = calls if log.pass_timers else 0.0
    drained = log.pass_timers or virtual_stage < virtual_stages - 1
    batch = 0.0
    if kind == "F" and issues_kernels(compute):
        work = get_batch_work(framework, virtual_stage, virtual_stages)
        if log.pass_timers or not work.after_timer:
            batch = host_time(work.launches, work.calls, compute)
    return sends + batch + (backward_startup_seconds(compute) if kind == "B" and drained else 0.0)


def add_drains(
    passes: dict[tuple[int, str], ChunkPass], pp: int, rank: int, compute: Compute, tp: int, micro_batch: int,
    sequence: int, log: TrainLogging = DEFAULT, framework: HostFramework = "megatron-lm",
) -> None:
    """Lead each training pass of a stage (``passes`` by (chunk, kind)) with the device's idle time for the
    framework's synchronisations, reported as host wait; a forward also with ``get_batch``'s broadcasts over the
    tensor group (``broadcasts``: Megatron-LM's key sizes and flattened batch of ``micro_batch`` samples of
    ``sequence`` tokens, Megatron-Core's fixed-shape tensors), reported as tensor-parallel communication, each
    call's host time before it when it follows a drain (``broadcast_calls``). A pass inside a full-iteration CUDA
    graph (``ChunkPass.captured``) has no drain, no host work and only the batch's broadcasts (module docstring).
    ``log``: the run's timer level and NaN check (``plan.train_logging``); ``framework``: the resolved
    ``mapping.host_framework`` (``plan.framework_host``), whose ``get_batch`` runs (``get_batch_work``)."""
    if not issues_kernels(compute) or not passes:
        return
    each = drain_seconds(compute)
    call = collective_host_seconds(compute)
    virtual_stages = pp * (1 + max(c for c, _ in passes))
    for (chunk, kind), ps in passes.items():
        if not ps.segments:
            continue
        layer = ps.segments[0].layer
        vs = chunk * pp + rank
        seconds = 0.0 if ps.captured else pass_drains(kind, vs, virtual_stages, log, framework) * each
        host = 0.0 if ps.captured else exposed_host_seconds(compute, kind, vs, virtual_stages, log, framework)
        lead = []
        if seconds > 0:
            lead.append(Segment.host_wait("host synchronisation", layer, seconds))
        if host > 0:
            lead.append(Segment.host_wait("host calls on a drained device", layer, host))
        if kind == "F" and tp > 1:
            sent = broadcasts(micro_batch, sequence, ps.captured, framework, vs, virtual_stages)
            exposed = broadcast_calls(ps.captured, log, framework, vs, virtual_stages)
            for i, (label, nbytes) in enumerate(sent):
                seg = Segment.host_wait(label, layer, call if i >= len(sent) - exposed else 0.0)
                seg.comm = ("broadcast", nbytes)
                lead.append(seg)
        ps.segments[:0] = lead


def broadcasts(micro_batch: int, sequence: int, captured: bool = False, framework: HostFramework = "megatron-lm",
               virtual_stage: int = 0, virtual_stages: int = 1) -> list[tuple[str, float]]:
    """``get_batch``'s broadcasts over the tensor group on ``virtual_stage``, (label, bytes), for ``micro_batch``
    samples of ``sequence`` tokens (``get_batch_work``): Megatron-LM's key sizes and batch (the batch alone inside
    a full-iteration graph: module docstring), Megatron-Core's stage tensors, none for torchtitan."""
    rows = {"fixed": 1.0, "shifted": float(micro_batch * (sequence + 1)), "sequence": float(micro_batch * sequence)}
    sends = get_batch_work(framework, virtual_stage, virtual_stages).sends
    return [(label, per * rows[kind]) for label, per, kind in sends if not (captured and kind == "fixed")]


def broadcast_calls(captured: bool, log: TrainLogging = DEFAULT, framework: HostFramework = "megatron-lm",
                    virtual_stage: int = 0, virtual_stages: int = 1) -> int:
    """How many of ``get_batch``'s broadcast calls (the last ones) run on a drained device: with the
    ``batch-generator`` timer all of them; without it, Megatron-LM's batch broadcast only (after the key sizes'
    ``.cpu()``) and none of Megatron-Core's (no drain before them); none inside a full-iteration graph (module
    docstring)."""
    if captured:
        return 0
    work = get_batch_work(framework, virtual_stage, virtual_stages)
    if log.pass_timers:
        return len(work.sends)
    return min(work.drains, len(work.sends))


def flag_allreduce_s(hw: HardwareGraph, model_group: list[int]) -> float:
    """One flag's all-reduce (the found-inf flag, the squared norm) over the model-parallel group."""
    return collective(hw, "all-reduce", model_group, FLAG_BYTES).time(hw)


def lead_seconds(compute: Compute, kind: str, virtual_stage: int, virtual_stages: int, broadcasts_s: float,
                 captured: bool = False, log: TrainLogging = DEFAULT,
                 framework: HostFramework = "megatron-lm") -> float:
    """Seconds ``add_drains`` puts at the head of a pass, for an estimator that sums passes without building
    them: its drains and exposed host work (none ``captured`` in a full-iteration graph) and, a forward, the
    batch broadcasts' time (``broadcasts_s``, 0 with tp 1 — no broadcast then; the caller sizes this stage's with
    ``broadcasts``) and their exposed calls' host time (``broadcast_calls``)."""
    if not issues_kernels(compute):
        return 0.0
    lead = 0.0
    if not captured:
        lead = (pass_drains(kind, virtual_stage, virtual_stages, log, framework) * drain_seconds(compute)
                + exposed_host_seconds(compute, kind, virtual_stage, virtual_stages, log, framework))
    if kind == "F" and broadcasts_s > 0:
        calls = broadcast_calls(captured, log, framework, virtual_stage, virtual_stages)
        lead += broadcasts_s + calls * collective_host_seconds(compute)
    return lead


def te_holds_master(moments: str, master: str, weights: DType, scaling: Fp8Scaling | None) -> bool:
    """Whether Transformer Engine's FusedAdam holds the master copy and writes the low-precision weights itself
    (module docstring): Megatron-Core's precision-aware optimizer (Adam's ``moments`` or ``master`` other than
    fp32, ``mapping.optimizer_moments`` / ``optimizer_master``) unless the ``weights`` are fp8 with a recipe other
    than delayed scaling (``scaling``; None: current scaling) and the master stays fp32 (remainders are an fp32
    master's, ``--main-params-dtype fp32``)."""
    if moments == "fp32" and master == "fp32":
        return False
    return master == "fp16" or weights is not DType.fp8 or scaling is Fp8Scaling.delayed


def loop_seconds(dev: DeviceModel, tensors: float, params: float, fp16: bool, te_master: bool = False) -> float:
    """Seconds the step's Python loops over ``tensors`` parameter tensors of ``params`` parameters in all add on a
    drained device (module docstring, "The optimizer's Python per parameter tensor"): their calls
    (``TENSOR_CALLS``, without the copy-back's when ``te_master``) and what the per-tensor launches (fp16's casts;
    bf16's copies unless ``te_master``) outlast their own kernels, whose streams the extra passes charge."""
    if tensors <= 0 or params <= 0:
        return 0.0
    c = dev.compute
    calls = TENSOR_CALLS - (COPY_BACK_CALLS if te_master else 0)
    seconds = tensors * calls * c.host_call_s
    if fp16 or not te_master:
        device = tensors * (c.fixed_op_s + dev.stream_s(TENSOR_LAUNCH_BYTES * params / tensors))
        seconds += max(0.0, tensors * c.host_dispatch_s - device)
    return seconds


def step_overhead(
    dev: DeviceModel, res: StageResidency | None, params: float, mixed: bool, fp16: bool, flag_s: float, dp: int,
    full_iteration: bool = False, te_master: bool = False, log: TrainLogging = DEFAULT, *, tensors: float = 0.0,
    shard: int = 1,
) -> float:
    """Seconds Megatron's mixed-precision optimizer step adds to a fused Adam step on a device whose kernels
    a host framework issues (module docstring): its extra passes over ``params`` parameters, its drains, its
    flag all-reduces, ``flag_s`` each (``flag_allreduce_s``), and its Python loops over the stage's ``tensors``
    parameter tensors (``loop_seconds``; with the distributed optimizer, ``shard`` > 1, over its share of them,
    at least one); fp32 training: nothing. When ``mapping.memory_levels`` (``res``) moves model state off the
    device, the step is an offloading runtime's (DeepSpeed's ZeRO-Offload and the like, which writes the
    low-precision copy in the same pass), not Megatron's fp16 optimizer: nothing is added either; naming the
    device's own memory changes nothing. ``full_iteration``: the data-parallel reduction runs inside a
    full-iteration CUDA graph, its timer's drain gone; the step itself stays eager (module docstring).
    ``te_master`` (``te_holds_master``): no read-back of the master for the low-precision copy, no copy-back loop.
    ``log``: below timing level 1 (``plan.train_logging``) the reduction's timer does not synchronise (the
    copy-back's drain stays: the loop's loss-scale ``.item()`` makes it); torchtitan's loop (``log.torch_loop``)
    drains none of them (its own synchronisations: ``train_logging.torch_loop_seconds``)."""
    if not mixed or not issues_kernels(dev.compute) or params <= 0:
        return 0.0
    if res is not None and any(res.placed.get(cat, home_level(dev)) != home_level(dev) for cat in STATE):
        return 0.0
    extra = FP16_EXTRA_SPLIT if fp16 else BF16_EXTRA_SPLIT
    if te_master:  # the master's read-back is the extra passes' only optimizer-state traffic
        extra = {cat: nbytes for cat, nbytes in extra.items() if cat != "optimizer"}
    stream = optimizer_seconds(dev, None, params, True, extra)
    drains = (STEP_DRAINS + (SCALER_DRAINS if fp16 else 0)
              + (DP_DRAINS if dp > 1 and not full_iteration and log.step_timers else 0))
    if log.torch_loop:  # torchtitan reads no norm, flag or loss scale back: its drains are train_logging's
        drains = 0
    flags = 2 if fp16 else 1
    loops = loop_seconds(dev, max(1.0, tensors / max(shard, 1)) if tensors > 0 else 0.0, params, fp16, te_master)
    return stream + drains * drain_seconds(dev.compute) + flags * flag_s + loops
