"""The iteration's tail in the parallelism search: what follows the pipeline on each stage.

Once a stage's last backward ends, its chunks' data-parallel gradient reductions finish (one after the other
after the stage's schedule; with ``overlap_grad_reduce`` each from that chunk's last backward, all but its first
layer's bucket from that backward's start: ``Plan.dp_buckets``, ``plan.replica_sync.gradients_reduced``), the
first and last stage all-reduce the tied embedding, the optimizer steps (with Megatron's fp16 overhead and flag
all-reduce, ``plan.train_step``) and, with ZeRO, the updated weights are gathered (with
``overlap_param_gather`` only what the next forward cannot hide, ``plan.param_gather``).

Separate from ``estimate`` because it has a job of its own: it mirrors what the analytic engine does after
the pipeline (``tied_allreduce``, ``Plan.dp_collective``, ``Plan.zero_gather_exposed``) and changes when that
does, while the estimator's other parts sum layer tables into stages, check memory and time the pipeline.
The ``Estimator`` inherits it (``exact_time`` reuses ``_reduced`` and ``_ends`` after the recurrence); the
attributes and methods declared below are the estimator's, which the tail reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.project import Project
from tilewright.engine.perf.device import DeviceModel, issues_kernels
from tilewright.engine.perf.memory import StateBytes
from tilewright.engine.plan.param_gather import exposed_fractions
from tilewright.engine.plan.replica_sync import ddp_bucket_calls, gradients_reduced, overlap_loss
from tilewright.engine.plan.residency import AdamStep, StageResidency
from tilewright.engine.plan.residency import step_seconds as optimizer_s
from tilewright.engine.plan.tied import TiedEmbedding, copy_params
from tilewright.engine.plan.train_logging import TrainLogging
from tilewright.engine.plan.train_logging import step_seconds as logging_seconds
from tilewright.engine.plan.train_step import flag_allreduce_s, step_overhead, te_holds_master
from tilewright.engine.search.comm import CommModel, Layout
from tilewright.engine.search.op_settings import OpSettings
from tilewright.engine.search.parallel.candidate import Candidate, replicas
from tilewright.engine.workloads.graph import WorkloadGraph

if TYPE_CHECKING:  # for annotations only
    from tilewright.engine.search.parallel.stage_sums import Chunks


class IterationTail:
    """The exposed reductions, tied all-reduce, optimizer step and weight gather after the pipeline."""

    project: Project
    hw: HardwareGraph
    workload: WorkloadGraph
    settings: OpSettings
    dev: DeviceModel
    comm: CommModel
    per_param: StateBytes
    weight_bytes: float
    gather_bytes: float  # per parameter, the post-step all-gather's (``Plan.gather_bytes_per_param``)
    _flags: dict[tuple[int, ...], float]  # the optimizer's flag all-reduce, by model group
    _tied: dict[tuple, float]  # ``_tied_s``, by layout, tp, pp, dp, cp and ZeRO stage

    if TYPE_CHECKING:  # the Estimator's layer → stage sums

        def params(self, tp: int, pp: int, v: int) -> np.ndarray: ...

        def stage_params(self, tp: int, pp: int, v: int) -> list[float]: ...

        def stage_tensors(self, pp: int, v: int) -> list[float]: ...

        def edge_bytes(self, tp: int, pp: int, v: int, zero: int) -> tuple[list[float], list[float]]: ...

        def step_at(self, zero: int) -> AdamStep: ...

        def layer_counts(self, pp: int, v: int) -> np.ndarray: ...

    def tail(
        self, c: Candidate, chunks: Chunks, t_pipe: float, hops: list[float], placed: StageResidency | None = None
    ) -> float:
        """What follows the pipeline on the stage that finishes last: exposed dp reduction, optimizer, gather.

        Stage r ends the backward wave earlier than stage 0 by the wave's trip back, and chunk c ends
        pp backward steps of each later chunk before the stage's end (interleaved 1F1B's cool-down)."""
        v, pp = c.interleave, c.pp
        stage_params = self.stage_params(c.tp, pp, v)
        # the last stage can only finish after stage 0 with more parameters to reduce and update, or when
        # both wait for the tied embedding's all-reduce
        tied = self._tied_s(c) > 0
        stages = [0, pp - 1] if pp > 1 and (tied or stage_params[pp - 1] > stage_params[0]) else [0]
        reduced = {}
        for r in stages:
            finish = t_pipe - sum(chunks.bwd[0, q] + hops[q] for q in range(r))
            last_backward, offset = [], 0.0
            for ch in range(v):
                last_backward.append(finish - offset)
                offset += pp * chunks.bwd[ch, r]
            starts = [t - chunks.bwd[ch, r] for ch, t in enumerate(last_backward)]
            reduced[r] = self._reduced(c, r, finish, last_backward, starts)
        return self._ends(c, reduced, placed, chunks) - t_pipe

    def _tied_s(self, c: Candidate) -> float:
        """The tied embedding's all-reduce between the first and last stage of every pipeline (``plan.tied``),
        as ``Plan.tied_collective``: each device with its peer of the same replica and tensor rank. Kept per
        what decides it (the tail asks twice per candidate, and the pairs are dp · tp tuples to build)."""
        key = (c.placement, c.rank_order, c.tp, c.pp, c.dp, c.cp, c.zero)
        hit = self._tied.get(key)
        if hit is None:
            hit = self._tied[key] = self._tied_seconds(c)
        return hit

    def _tied_seconds(self, c: Candidate) -> float:
        copy = copy_params(self.workload, c.tp) if c.pp > 1 else 0.0
        if copy <= 0:
            return 0.0
        layout = Layout(c.placement, c.rank_order)
        pairs = tuple(
            (a, b)
            for j in range(c.dp)
            for a, b in zip(
                self.comm.tensor_group(layout, c.tp, c.pp, c.dp, 0, j),
                self.comm.tensor_group(layout, c.tp, c.pp, c.dp, c.pp - 1, j),
                strict=True,
            )
        )
        nbytes = TiedEmbedding(0, c.pp - 1, -1, copy).allreduce_bytes(self.per_param.gradients, c.zero, replicas(c))
        return self.comm.concurrent_time("all-reduce", pairs, nbytes, ("tied", layout, c.tp, c.pp, c.dp))

    def _ends(
        self, c: Candidate, reduced: dict[int, float], placed: StageResidency | None, chunks: Chunks
    ) -> float:
        """The last of these stages' ends, from when each has reduced its gradients (as the analytic engine,
        ``tied_allreduce``): the first and last stage then all-reduce the tied embedding together."""
        ready = dict(reduced)
        tied = self._tied_s(c)
        if tied > 0 and 0 in ready and c.pp - 1 in ready:
            ready[0] = ready[c.pp - 1] = max(ready[0], ready[c.pp - 1]) + tied
        return max(self._after_reduction(c, r, t, placed, chunks) for r, t in ready.items())

    def _reduced(
        self, c: Candidate, r: int, finish: float, last_backward: list[float], last_start: list[float]
    ) -> float:
        """As the analytic engine, by the plan's rule (``plan.replica_sync.gradients_reduced``): without
        ``overlap_grad_reduce`` every chunk's whole reduction after the stage's schedule (``finish``), one after
        the other; with it (the candidate's or the project's, which ``Candidate.mapping`` keeps) all but each
        chunk's first layer's bucket from its last backward's start (``last_start``), as their gradients become
        ready, and the first layer's bucket at its end (``last_backward``), once the backward has made up the SMs
        the early bucket took from it; the stage's compute ends that much later too (``Plan.dp_overlap_loss``)."""
        if c.dp <= 1:
            return finish
        params = self.params(c.tp, c.pp, c.interleave)
        layout = Layout(c.placement, c.rank_order)
        kind = "reduce-scatter" if c.zero >= 1 else "all-reduce"
        name = self.comm.dp_key(layout, c.tp, c.pp, c.dp, r)
        groups = self.comm.dp_groups(layout, c.tp, c.pp, c.dp, r)
        overlap = c.overlap_grad_reduce or self.project.mapping.overlap_grad_reduce
        layers = self.layer_counts(c.pp, c.interleave)[:, r] if overlap else None
        chunks = []
        for ch, t in enumerate(last_backward):
            nbytes = params[ch, r] * self.per_param.gradients
            if layers is None or layers[ch] < 2:
                chunks.append((last_start[ch], t, 0.0, self.comm.concurrent_time(kind, groups, nbytes, name), 0.0))
                continue
            early = (layers[ch] - 1) / layers[ch]
            calls = ddp_bucket_calls(self.project, self.dev.compute, c.zero, c.fsdp, nbytes, early)  # DDP buckets
            early_s = self.comm.scaled_time(kind, groups, nbytes, early, name, calls[0])
            lost = overlap_loss(early_s, t - last_start[ch], self.dev.compute)  # ``Plan.dp_overlap_loss``
            chunks.append((last_start[ch], t, early_s,
                           self.comm.scaled_time(kind, groups, nbytes, 1 - early, name, calls[1]), lost))
        return gradients_reduced(finish, chunks, after_schedule=not overlap)

    def _after_reduction(
        self, c: Candidate, r: int, reduced: float, placed: StageResidency | None, chunks: Chunks
    ) -> float:
        """The optimizer step and, with ZeRO, the weight all-gather after the stage's gradients are reduced
        (with ``overlap_param_gather`` only what the next forward cannot hide, ``_gather_s``)."""
        stage_params = self.stage_params(c.tp, c.pp, c.interleave)
        layout = Layout(c.placement, c.rank_order)
        name = self.comm.dp_key(layout, c.tp, c.pp, c.dp, r)
        groups = self.comm.dp_groups(layout, c.tp, c.pp, c.dp, r) if c.dp > 1 else ()
        local = stage_params[r] / (replicas(c) if c.zero >= 1 else 1)
        fused = optimizer_s(self.dev, placed, local, self.step_at(c.zero))
        opt = fused + self._step_overhead(c, r, placed, local) + self._logging_s(c, r, stage_params[r])
        gather = 0.0
        if c.zero >= 1 and groups:
            edge = self.edge_bytes(c.tp, c.pp, c.interleave, c.zero)[1][r]  # bf16 edge layers gather 2 B
            gather = self._gather_s(c, r, groups, name, stage_params[r] * self.gather_bytes + edge, chunks, fused)
        return reduced + opt + gather

    def _gather_s(
        self, c: Candidate, r: int, groups: tuple[tuple[int, ...], ...], name: tuple, nbytes: float, chunks: Chunks,
        step_s: float,
    ) -> float:
        """The post-step weight all-gather the stage waits for: all of it, or with Megatron's
        ``overlap_param_gather`` what the next forward cannot hide, and with
        ``overlap_param_gather_with_optimizer_step`` what the fused step (``step_s``) leaves of the first chunk's,
        by the plan's rule (``plan.param_gather``)."""
        def seconds(f: float) -> float:  # the plan's ``scaled`` gather: the whole one's algorithm and latencies
            return self.comm.scaled_time("all-gather", groups, nbytes, f, name) if f > 0 else 0.0

        m = self.project.mapping
        if not m.overlap_param_gather:
            return seconds(1.0)
        with_step = m.overlap_param_gather_with_optimizer_step and c.interleave > 1
        first, rest = exposed_fractions(self.params(c.tp, c.pp, c.interleave)[:, r].tolist(),
                                        self.layer_counts(c.pp, c.interleave)[:, r].tolist(),
                                        chunks.fwd[:, r].tolist(), seconds, step_s if with_step else None)
        return seconds(first) + seconds(rest)

    def _step_overhead(self, c: Candidate, r: int, placed: StageResidency | None, local: float) -> float:
        """Megatron's fp16 optimizer beyond a fused Adam step (``plan.train_step``) on stage ``r``, its flags
        all-reduced over the model-parallel group (replica 0's tensor ranks of every stage), its Python loops over
        the stage's parameter tensors."""
        if not issues_kernels(self.dev.compute):  # no host framework: no flags to all-reduce (nothing added)
            return 0.0
        flag = self._model_flag_s(c)
        fp16 = self.project.run.dtype.value == "fp16"
        step = self.step_at(c.zero)
        te_master = te_holds_master(step.moments, step.master, self.settings.formats.weights,
                                    self.project.mapping.formats.fp8_scaling)
        return step_overhead(self.dev, placed, local, step.mixed, fp16, flag, replicas(c),
                             full_iteration=self.settings.full_iteration, te_master=te_master,
                             log=TrainLogging.of(self.project.mapping),
                             tensors=self.stage_tensors(c.pp, c.interleave)[r],
                             shard=replicas(c) if c.zero >= 1 else 1)

    def _model_flag_s(self, c: Candidate) -> float:
        """The 4-byte all-reduce over the model-parallel group (replica 0's tensor ranks of every stage), kept."""
        layout = Layout(c.placement, c.rank_order)
        group = tuple(d for r in range(c.pp) for d in self.comm.tensor_group(layout, c.tp, c.pp, c.dp, r, 0))
        flag = self._flags.get(group)
        if flag is None:
            flag = self._flags[group] = flag_allreduce_s(self.hw, list(group))
        return flag

    def _logging_s(self, c: Candidate, r: int, params: float) -> float:
        """The training loop's logging flags on stage ``r`` holding ``params`` parameters per device, as the plan
        adds them to its optimizer time (``plan.train_logging.step_seconds``)."""
        m = self.project.mapping
        log = TrainLogging.of(m)
        if not log.adds_step_work or not issues_kernels(self.dev.compute):
            return 0.0
        world = 0.0
        if log.world_reductions:
            layout = Layout(c.placement, c.rank_order)
            devices = tuple(d for s in range(c.pp) for g in self.comm.stage_groups(layout, c.tp, c.pp, c.dp, s)
                            for d in g)
            world = self._flags.get(devices)
            if world is None:
                world = self._flags[devices] = flag_allreduce_s(self.hw, list(devices))
        run = self.project.run
        return logging_seconds(self.dev, log, tensors=self.stage_tensors(c.pp, c.interleave)[r], params=params,
                               weight_bytes=self.weight_bytes, bf16=run.dtype.value == "bf16",
                               model_reduce_s=self._model_flag_s(c), world_reduce_s=world,
                               zero_shard=replicas(c) if c.zero >= 1 else 1, grad_bytes=self.per_param.gradients,
                               dp=replicas(c), overlap_grad_reduce=m.overlap_grad_reduce)
