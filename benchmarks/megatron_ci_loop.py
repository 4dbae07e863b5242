"""Host work of Megatron-LM's training loop that its CI runs have and our model lacks: a diagnostic, print-only.

Why: the small-GPT rows of ``benchmarks/data/public_megatron_logs.csv`` (12 layers × hidden 512) measure 1.7-2.6×
our iteration, the 7B rows match. A cost the CI pays once per iteration whatever the model's size would do that.
This counts, from the code the CI runs (NVIDIA/Megatron-LM, 2023 ``megatron/training.py`` and
``megatron/core/timers.py``; ``megatron/optimizer/optimizer.py`` and ``clip_grads.py``; apex ``FusedAdam``), the
per-iteration host work beyond what ``plan.train_step`` and ``plan.train_logging`` charge, priced with the
preset's own host costs (``Compute.host_dispatch_s`` per kernel launch, ``host_call_s`` per framework call,
``host_sync_s`` + ``fixed_op_s`` per synchronisation of a just-launched tiny kernel, ``host_collective_s`` per
collective call; ``plan.launch``). Every phase below runs after a drain (the optimizer's ``.item()``, a
synchronising timer), on an idle device: its host time is the iteration's. Nothing is fitted to the CI times.

- **Timer reports** (``--log-timers-to-tensorboard``: ``timers.write`` every iteration, its default
  ``--tensorboard-log-interval`` 1; ``timers.log`` every ``--log-interval``): each is ``_get_global_min_max_time``
  over the 25 names of ``training_log``'s ``timers_to_log``. It builds a zeros tensor (a launch), writes each
  existing timer's time into it (``rank_name_to_time[rank, i] = ...``: a fill launch), all-gathers it over every
  rank, then per name: ``rank_name_to_time[:, i]`` (a view), ``> 0.0`` (a launch), the boolean index (``nonzero``:
  a launch and a synchronisation for the count, then the gather's launch), ``numel()``; an existing timer adds
  ``.min().item()`` and ``.max().item()`` (two launches, two synchronisations). Which timers exist depends on
  ``--timing-log-level`` (``timer_names``).
- **The rest of ``training_log``**: the ``interval-time`` timer's ``elapsed(barrier=True)`` (a world barrier);
  on the last pipeline stage the loss's running sum (a launch), its ``.item()`` at the log and the reset
  ``torch.cuda.FloatTensor([0.0])`` (a pageable copy: synchronous); on the last rank, the tensorboard scalars
  (``SCALARS`` plus one per existing timer), each ``add_scalar``'s Python (``ADD_SCALAR_CALLS``); the loss scalars
  pass a CUDA tensor (``make_np`` copies it to the host: a synchronisation each). Per micro-batch, the last
  stage's ``loss_func`` averages the loss over the data-parallel group for the log
  (``average_losses_across_data_parallel_group``: ``clone``, ``cat``, an all-reduce, the division), inside the
  ``forward-compute`` timer whose stop drains it: its launches, the collective's call and its device time.
- **Moved into the model**: the optimizer's Python loops over parameter tensors (this diagnostic priced them
  from recalled counts; ``plan.train_step.loop_seconds`` now charges them from the code re-read, with bf16's
  per-tensor ``copy_`` of the copy-back) and the loss-scale ``.item()`` every iteration (``plan.train_step``
  ``STEP_DRAINS``): not priced here any more, so as not to count them twice.

Listed, not priced (no cost the code states): ``--deterministic-mode`` (``torch.use_deterministic_algorithms``
fills every ``torch.empty`` with NaN, a write of each such tensor: apex's fused softmax and LayerNorm outputs,
the legacy attention's ``baddbmm`` buffer, the pipeline's receive buffers), ``NCCL_ALGO=Tree`` (a chain within a
node for the tensor-parallel all-reduces), ``CUDA_DEVICE_MAX_CONNECTIONS=1``, the Python garbage collector (what
Megatron's later ``--manual-gc`` aligns across ranks), ``print`` of the log lines, ``torch.cuda.memory_stats``.
Not in the timed window: evaluation (``--eval-interval 1000`` > 50 iterations), checkpoints (``--save-interval
10000``; the final save follows the loop), the first third of the iterations (left out of the CI's average).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.engine.ir import Project
from tilewright.engine.ir.hardware import Compute
from tilewright.engine.perf.collectives import collective
from tilewright.engine.simulate import make_plan

LISTED_TIMERS = 25  # training_log's timers_to_log (2023)
REPORT_LAUNCHES = 1  # the zeros tensor
EXIST = (6, 4, 3)  # per existing timer: launches (fill, gt, nonzero, index, min, max), calls, synchronisations
MISSING = (3, 2, 1)  # per listed timer that does not exist: launches (gt, nonzero, index), calls, syncs
SCALARS = 7  # learning rate ×2, loss ×2, loss scale ×2 (on by default; batch size and world size off), iteration time
SCALARS_PER_FLAG = 2  # grad norm, num zeros, params norm: the value and its "vs samples" twin
MEMORY_SCALARS = 3  # --log-memory-to-tensorboard
LOSS_SCALAR_SYNCS = 2  # the loss tensor's two add_scalar calls copy it to the host
ADD_SCALAR_CALLS = 8  # per add_scalar: api-usage log, make_np, Summary, Event, wall time, step, serialise, enqueue
LOSS_LAUNCHES, LOSS_SYNCS = 2, 2  # running sum, reset tensor; the .item() and the reset's pageable copy
LOSS_AVG_LAUNCHES = 3  # per micro-batch: clone, cat, division (the all-reduce beside them)


@dataclass(frozen=True)
class LoopCosts:
    """Seconds per iteration of each priced mechanism (module docstring)."""

    timer_reports: float
    training_log: float

    @property
    def total(self) -> float:
        """Their sum."""
        return self.timer_reports + self.training_log


def timer_names(r: dict) -> int:
    """Timers of ``timers_to_log`` a rank has at the row's ``--timing-log-level`` (the most of any rank)."""
    level = r["timing_log_level"] if r["timing_log_level"] is not None else 2
    n = 1  # 'optimizer' (level 0)
    if level >= 1:
        n += 1 + 3  # forward-backward; the layernorm, embedding and data-parallel gradient reductions' timers
        n += 4  # optimizer: copy to main grad, clip, inner step, copy main to model params
        n += r["precision"] == "fp16"  # unscale-and-check-inf (a loss scaler)
        n += bool(r["log_num_zeros_in_grad"])  # count-zeros
        n += r["zero"] >= 1  # params-all-gather
    if level >= 2:
        n += 3  # forward-compute, backward-compute, batch-generator
        n += 0 if r["pp"] == 1 else 3 if r["pp"] == 2 else 6  # the pipeline's send/receive timers (middle stages)
    return min(n, LISTED_TIMERS)


def _sync_s(c: Compute) -> float:
    """A synchronisation on a tiny just-launched kernel: the kernel's floor and the host's wake-up."""
    return c.host_sync_s + c.fixed_op_s


def report_seconds(c: Compute, existing: int, gather_s: float) -> float:
    """One ``_get_global_min_max_time`` over ``LISTED_TIMERS`` names of which ``existing`` exist; ``gather_s``:
    the all-gather's device time."""
    missing = LISTED_TIMERS - existing
    launches = REPORT_LAUNCHES + existing * EXIST[0] + missing * MISSING[0]
    calls = existing * EXIST[1] + missing * MISSING[1]
    syncs = existing * EXIST[2] + missing * MISSING[2]
    return (launches * c.host_dispatch_s + calls * c.host_call_s + syncs * _sync_s(c) + c.host_collective_s
            + gather_s)


def loop_costs(r: dict, p: Project) -> LoopCosts:
    """The priced mechanisms of row ``r`` (its project ``p``), per iteration (module docstring)."""
    plan = make_plan(p)
    c = plan.stages[0].dev.compute
    world = sorted({d for st in plan.stages for grp in st.groups for d in grp})
    gather_s = collective(plan.hw, "all-gather", world, 4 * LISTED_TIMERS * len(world)).time(plan.hw)
    barrier_s = collective(plan.hw, "all-reduce", world, 4).time(plan.hw)
    existing = timer_names(r)
    per_log = 1.0 / max(1, r["log_interval"])
    reports = 0.0
    if r["log_timers_to_tensorboard"]:
        reports += report_seconds(c, existing, gather_s)  # timers.write, every iteration
    reports += per_log * report_seconds(c, existing, gather_s)  # timers.log
    flags = sum(bool(r[k]) for k in ("log_num_zeros_in_grad", "log_params_norm")) + 1  # + grad norm
    scalars = SCALARS + SCALARS_PER_FLAG * flags + (MEMORY_SCALARS if r["log_memory_to_tensorboard"] else 0)
    scalars += existing if r["log_timers_to_tensorboard"] else 0
    tb = scalars * ADD_SCALAR_CALLS * c.host_call_s + LOSS_SCALAR_SYNCS * _sync_s(c)
    loss = LOSS_LAUNCHES * c.host_dispatch_s + LOSS_SYNCS * _sync_s(c)
    last = plan.stages[-1]
    dp_group = [grp[0] for grp in last.groups]
    avg_s = collective(plan.hw, "all-reduce", dp_group, 4).time(plan.hw) if len(dp_group) > 1 else 0.0
    micro = r["gbs"] // (r["mb"] * r["dp"])
    average = micro * (LOSS_AVG_LAUNCHES * c.host_dispatch_s + c.host_collective_s + avg_s)
    log = per_log * (c.host_collective_s + barrier_s + loss) + tb + average
    return LoopCosts(reports, log)
