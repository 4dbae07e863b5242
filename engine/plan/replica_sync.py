"""What a plan's stages exchange across their data-parallel replicas once the backward is done.

The gradient reduction of each chunk (whole after the backward, or in two buckets with
``overlap_grad_reduce``, whose early bucket takes NCCL's SMs from the backward beside it:
``dp_overlap_loss``), ZeRO-1/2's all-gather of the updated weights (``plan.param_gather`` for what
of it shows), and the tied embedding's all-reduce between the first and last stage (``plan.tied``); dense
weights over all of a stage's replicas, routed experts over their expert-data-parallel groups
(``plan.experts``).

When the reductions run is one rule for both engines and the search (``gradients_reduced``): without
``overlap_grad_reduce`` (Megatron-LM's local DDP, Megatron-Core's DDP with the option off) ``train_step`` (or
``finalize_model_grads``) reduces the model chunks after the whole forward-backward schedule, one blocking
collective per chunk in a Python loop over them; with it, each chunk's buckets start during its last backward.

**PyTorch DDP's buckets** (``ddp_bucket_calls``). Megatron-LM v2.x overlaps the reduction with the backward only
under ``--DDP-impl torch`` (its local DDP reduces after the schedule), which wraps each model chunk in
``torch.nn.parallel.DistributedDataParallel(model_module, device_ids=[i], output_device=i,
process_group=mpu.get_data_parallel_group())`` (``megatron/training.py``, the SC'21 runs' ``run_table_1.sh``
rows 1.7B-18.4B): no ``bucket_cap_mb``, so PyTorch's default (``bucket_cap_mb=25``, the PyTorch 1.7 reference's
signature; ``bucket_cap_mb * 1024 * 1024`` bytes) after a first bucket of ``dist._DEFAULT_FIRST_BUCKET_BYTES``
(1 MiB; ``torch/nn/parallel/distributed.py``; PyTorch 1.8 in the ``nvcr.io/nvidia/pytorch:20.12-py3`` container
the SC'21 scripts run, ``examples/sc21/SRUN.sh``). Each bucket is
its own ``allreduce`` on NCCL's stream, one after the other: each pays the latencies (NCCL's base and per-step
latency) the plan's one collective pays once, and NCCL's CTAs stay resident through them (``perf.comm_sm``).
Charged as that many calls (``group_comm.scaled``) to the early bucket (its share of the bytes, the first bucket
among them) and the late one (the rest of the calls), by the plan (both engines) and the search's tail alike.
Buckets close once they reach the cap (a bucket holds whole tensors), so the count is an upper bound by at most
one. Left out: Megatron-Core's DDP buckets (``bucket_size`` max(40M, 1M x dp) parameters when
``--overlap-grad-reduce``; the 'mcore' frameworks keep one collective per bucket part), the reducer's copies of
the gradients into and out of its buckets (4 + 4 B per parameter: the bytes local DDP's ``add_`` and
``zero_grad_buffer`` are charged, 6 + 2 B, at one micro-batch).

Split from ``plan.plan`` because it is one job of its own: these collectives follow the pipeline rather than
run in it, both engines charge them in the iteration's tail, and the search's estimator mirrors exactly
this part (``search.parallel.tail``). ``Plan`` inherits it; the attributes and methods declared below are
the plan's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.compute import Compute
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.perf.collectives import Collective
from tilewright.engine.perf.comm_sm import beside
from tilewright.engine.perf.device import issues_kernels
from tilewright.engine.perf.formats import OpFormats
from tilewright.engine.perf.memory import gathered_weight_bytes, param_gather_bytes
from tilewright.engine.plan.device_layers import stage_mean_bytes
from tilewright.engine.plan.experts import expert_dp, experts_apart
from tilewright.engine.plan.framework_host import host_framework
from tilewright.engine.plan.group_comm import (
    dp_group_collective,
    edp_group_collective,
    embedding_group_collective,
    scaled,
)
from tilewright.engine.plan.memo import memo_method
from tilewright.engine.plan.tied import TiedEmbedding
from tilewright.engine.workloads.graph import WorkloadGraph

if TYPE_CHECKING:  # plan.plan imports this module: the type only, for annotations
    from tilewright.engine.plan.stage_build import StagePlan

TORCH_DDP_BUCKET_BYTES = 25 * 2**20  # DistributedDataParallel(bucket_cap_mb=25), PyTorch's default (docstring)
TORCH_DDP_FIRST_BUCKET_BYTES = 2**20  # dist._DEFAULT_FIRST_BUCKET_BYTES: the reducer's first bucket


def torch_ddp_calls(nbytes: float) -> int:
    """All-reduces PyTorch DDP issues for ``nbytes`` of one rank's gradients: a 1 MiB first bucket, then 25 MiB
    ones (an upper bound by at most one: a bucket holds whole tensors and closes once it reaches the cap)."""
    if nbytes <= 0:
        return 0
    rest = max(0.0, nbytes - TORCH_DDP_FIRST_BUCKET_BYTES)
    return 1 + math.ceil(rest / TORCH_DDP_BUCKET_BYTES)


def ddp_bucket_calls(project: Project, compute: Compute, zero: int, fsdp: bool, nbytes: float,
                     early: float) -> tuple[int, int]:
    """(calls of the early bucket, calls of the late one) a stage's overlapped gradient reduction of ``nbytes``
    per rank is issued as, the early one carrying ``early`` of them: PyTorch DDP's buckets under Megatron-LM
    v2.x's ``--DDP-impl torch`` (the resolved 'megatron-lm' host framework on a GPU, training, no ZeRO/FSDP:
    module docstring), else (1, 1). Called for an overlapped reduction only (the plan's mapping or the search's
    candidate says so). One rule for the plan and the search's tail."""
    m = project.mapping
    train = project.run.mode is Mode.train
    if (zero or fsdp or not issues_kernels(compute) or nbytes <= 0
            or host_framework(m.host_framework, compute, train) != "megatron-lm"):
        return 1, 1
    first = max(1, torch_ddp_calls(nbytes * early))
    return first, max(1, torch_ddp_calls(nbytes) - first)


def overlap_loss(early_s: float, backward_s: float, compute: Compute) -> float:
    """Seconds a chunk's last backward (``backward_s``, alone) loses to the early bucket of its gradient
    reduction (``early_s``, uncontended) that runs beside it: NCCL's CTAs hold ``collective_sms`` of the
    GPU's ``gemm_units`` SMs over the overlapped window (``perf.comm_sm.beside``). One formula for the
    plan (both engines) and the search's tail (``search.parallel.tail``)."""
    if early_s <= 0 or backward_s <= 0:
        return 0.0
    return beside(early_s, backward_s, compute.gemm_units, compute.collective_sms)[0]


def gradients_reduced(finish: float, chunks: Sequence[tuple[float, float, float, float, float]],
                      after_schedule: bool) -> float:
    """When a stage's data-parallel gradient reductions are done, from ``finish`` (its last pipeline step's end,
    a blocking send included) and per model chunk in the model's order (last backward's start, its end, the early
    bucket's seconds, the late bucket's, the seconds that backward lost beside the early bucket).

    ``after_schedule`` (no ``overlap_grad_reduce``): nothing starts before the stage's whole schedule is done, then
    each chunk's whole reduction runs after the one before on the same data-parallel links. Megatron-LM v2.x/v3's
    ``train_step`` calls the local DDP's ``allreduce_gradients`` (one blocking all-reduce of the chunk's flat
    gradient buffer) in ``for model_module in model`` after ``forward_backward_func`` returns; Megatron-Core's
    ``finalize_model_grads`` loops ``finish_grad_sync`` over the chunks, a synchronous call without the option
    (NVIDIA/Megatron-LM megatron/training.py ``train_step``, megatron/model/distributed.py @ 01d65bde,
    megatron/schedules.py @ 1c3a1e6a, megatron/core/distributed/finalize_model_grads.py @ c3d057f5).
    Otherwise each chunk's early bucket starts with its last backward and its late bucket when that backward ends,
    made up for the SMs the early one took, and the stage's compute ends that much later (``dp_overlap_loss``).
    One rule for both engines and the search's tail (``search.parallel.tail``)."""
    if after_schedule:
        reduced = finish
        for chunk in chunks:
            reduced += chunk[3]
        return reduced
    reduced = finish + sum(chunk[4] for chunk in chunks)
    for start, end, early, late, lost in chunks:
        reduced = max(reduced, start + early, end + lost + late)
    return reduced


class ReplicaSync:
    """The data-parallel gradient reductions, ZeRO's post-step weight gather and the tied all-reduce."""

    project: Project
    hw: HardwareGraph
    workload: WorkloadGraph
    tp: int
    dp: int
    elem_bytes: int
    stages: list[StagePlan]
    formats: OpFormats | None
    tied: TiedEmbedding | None
    tied_bytes: float

    if TYPE_CHECKING:  # the Plan's

        @property
        def ep(self) -> int: ...

        @property
        def expert_tp(self) -> int: ...

    @memo_method
    def dp_collective(self, rank: int, chunk: int) -> Collective:
        """Gradient reduction of one chunk across replicas, all tensor ranks at once (one ring each)."""
        st = self.stages[rank]
        if self.replicas <= 1 or self.project.mapping.zero >= 2:  # stage ≥ 2 reduces in every backward pass
            return Collective("all-reduce", "none", ())
        kind = "reduce-scatter" if self.project.mapping.zero >= 1 else "all-reduce"
        experts = st.expert_grad_bytes.get(chunk, 0.0)
        return self._replica_collective(rank, kind, st.grad_bytes[chunk] - experts, experts)

    def _replica_collective(self, rank: int, kind: str, dense_bytes: float, expert_bytes: float) -> Collective:
        """``kind`` over the stage's replicas, every tensor rank at once: the dense weights' bytes over all
        of them, then (expert parallelism) the routed experts' bytes over the replicas holding the same
        experts, ``expert_groups`` (Megatron-Core's expert-data-parallel group)."""
        st = self.stages[rank]
        dense = dp_group_collective(self.hw, st.groups, kind, dense_bytes)
        if expert_bytes <= 0:
            return dense
        expert = edp_group_collective(self.hw, st.groups, self.ep, kind, expert_bytes, self.expert_tp)
        same = dense.payload_fraction == expert.payload_fraction  # else the phases differ: data = wire bytes
        return Collective(dense.kind, dense.algorithm, dense.phases + expert.phases,
                          dense.payload_fraction if same else 1.0)

    @property
    def replicas(self) -> int:
        """The largest group a gradient is reduced over: dp, or the routed experts' expert-data-parallel
        group when expert tensor parallelism folds it over tensor ranks too (``experts.expert_dp``)."""
        if not experts_apart(self.ep, self.expert_tp, self.tp):
            return self.dp
        return max(self.dp, expert_dp(self.tp, self.dp, self.ep, self.expert_tp))

    @property
    def dp_after_schedule(self) -> bool:
        """Whether every chunk's gradients are reduced after the stage's whole schedule, chunk after chunk
        (no ``overlap_grad_reduce``: ``gradients_reduced``), rather than from each chunk's last backward."""
        return not self.project.mapping.overlap_grad_reduce

    @memo_method
    def dp_buckets(self, rank: int, chunk: int) -> tuple[Collective, Collective]:
        """With overlap: (the reduction of all but the chunk's first layer, launched as its last backward
        starts, as the gradients of later layers become ready; the first layer's bucket, launched when
        that backward ends). Without overlap: (nothing, the whole reduction, after the stage's schedule and
        the chunks before it: ``gradients_reduced``)."""
        whole = self.dp_collective(rank, chunk)
        layers = len(self.stages[rank].chunk_layers[chunk])
        if not self.project.mapping.overlap_grad_reduce or layers < 2 or not whole.phases:
            return Collective(whole.kind, "none", ()), whole
        early = (layers - 1) / layers
        m = self.project.mapping
        calls = ddp_bucket_calls(self.project, self.stages[rank].dev.compute, m.zero, m.fsdp,
                                 self.stages[rank].grad_bytes[chunk], early)
        return scaled(whole, early, calls[0]), scaled(whole, 1 - early, calls[1])

    @memo_method
    def dp_overlap_loss(self, rank: int, chunk: int) -> float:
        """Seconds the chunk's last backward (its recompute and backward passes, uncontended) loses to the
        SMs its early bucket's NCCL kernel holds (``overlap_loss``); 0 without overlap. Both engines charge
        it on the stage, after its last step, and launch the chunk's late bucket that much later: the loss
        stays on the stage that pays it (it does not delay the gradients sent to the stage before)."""
        early = self.dp_buckets(rank, chunk)[0]
        if not early.phases:
            return 0.0
        from tilewright.engine.plan.timing import pass_parts  # timing imports the plan

        # under the combined 1F1B a chunk's last backward is a cooldown one, run alone (``plan.schedules``)
        passes = {**self.stages[rank].passes, **self.stages[rank].alone}
        backward = sum(pass_parts(self, rank, passes.get((chunk, k)))[0] for k in ("R", "B"))  # type: ignore[arg-type]
        return overlap_loss(early.time(self.hw), backward, self.stages[rank].dev.compute)

    @memo_method
    def zero_gather(self, rank: int) -> Collective:
        """ZeRO 1 and 2: all-gather the updated weights after the sharded optimizer step (stage 3 keeps them
        sharded: each layer gathers its weights when it runs, ``plan.sharding``)."""
        st = self.stages[rank]
        if self.replicas <= 1 or self.project.mapping.zero < 1 or self.project.mapping.zero >= 3:
            return Collective("all-gather", "none", ())
        experts = sum(st.expert_grad_bytes.values()) / self.stage_grad_per_param(rank)
        per = self.gather_bytes_per_param(rank)
        return self._replica_collective(rank, "all-gather", (st.params - experts) * per, experts * per)

    @memo_method
    def gather_bytes_per_param(self, rank: int) -> float:
        """Bytes per parameter stage ``rank``'s ``zero_gather`` moves: the parameters' dtype (bf16 under fp8
        training unless ``mapping.fp8_param_gather`` keeps them in fp8, ``perf.memory.param_gather_bytes``),
        op by op where formats differ per op (a bf16 edge layer's parameters stay 2 B: ``perf.formats``)."""
        m, train = self.project.mapping, self.project.run.mode is Mode.train
        if self.formats is None:
            return param_gather_bytes(self.elem_bytes, self.project.run.dtype, train, m.fp8_param_gather, m.zero)
        per_op = gathered_weight_bytes(train, m.fp8_param_gather, m.zero)
        tied = {self.tied.layer: self.tied.params} if self.tied is not None and rank == self.tied.last else {}
        mean = stage_mean_bytes(self.formats, self.workload, self.stages[rank].chunk_layers, self.tp, per_op,
                                self.ep, self.expert_tp, tied)
        return mean if mean is not None else per_op(self.formats)

    @memo_method
    def zero_gather_exposed(self, rank: int) -> tuple[Collective, Collective]:
        """What of ``zero_gather`` the iteration waits for, as two collectives run one after the other: with
        ``overlap_param_gather`` the first bucket and what the next forward cannot hide of the rest, else
        the whole gather and nothing (``plan.param_gather``). Energy and traffic count the whole gather."""
        from tilewright.engine.plan.param_gather import exposed_gather  # it times passes (plan.timing)

        return exposed_gather(self, rank)  # type: ignore[arg-type]  # self is the Plan

    @memo_method
    def tied_collective(self) -> Collective:
        """The tied embedding's gradient all-reduce over every embedding group (first and last stage of each
        pipeline, ``plan.tied``), after both stages' data-parallel reductions and before their optimizer step."""
        if self.tied is None or self.tied_bytes <= 0:
            return Collective("all-reduce", "none", ())
        first, last = self.stages[self.tied.first].groups, self.stages[self.tied.last].groups
        return embedding_group_collective(self.hw, first, last, self.tied_bytes)

    def tied_ranks(self) -> tuple[int, ...]:
        """The pipeline ranks that take part in the tied embedding's all-reduce (none without one)."""
        if not self.tied_collective().phases:
            return ()
        return (self.tied.first, self.tied.last)  # type: ignore[union-attr]

    def stage_grad_per_param(self, rank: int) -> float:
        """Gradient bytes per parameter of a stage (its ``grad_bytes`` over its ``params``)."""
        st = self.stages[rank]
        total = sum(st.grad_bytes.values())
        return total / st.params if st.params > 0 and total > 0 else 1.0
