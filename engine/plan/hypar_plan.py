"""A HyPar partition (``mapping.layer_parallelism``) as a plan both engines run unchanged.

The dp devices form HyPar's array, halved log2(N) times. Each layer runs, on every device, its batch share
(Π over levels of ½ where it chose dp) of each micro-batch's samples against its weight share (Π of ½
where it chose mp, split along the input channels as HyPar's mp does): FLOPs per device are the layer's
FLOPs / N either way, while weights, their gradient and optimizer state, and the weight traffic of each
op follow the weight share, and the stored activations follow the batch share.

How this fits the plan's interfaces, so ``engine.engines.event`` needs no change:

- the array is the stage's one "tensor group" (``tp`` = N, ``dp`` = 1): the engine then meets every device
  at each exchange (per-device mode) or runs the exchange once over all members' routes (aggregated);
- activation exchanges (partial sums, dp↔mp transitions) are segment collectives of kind ``exchange-L<h>``
  whose byte count is what each device sends; ``tp_collective`` turns them into pairwise exchanges at the
  level's stride. They are reported as ``tp_comm``;
- weight-gradient exchanges are the data-parallel reduction (``dp_collective``/``dp_buckets``): one phase
  per level, the nearest halves first. They are reported as ``dp_comm``.

Per-level amounts come from ``engine.plan.hypar_comm`` and add up to ``engine.search.hypar``'s total.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.common import dtype_bytes
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.ops import Op, TensorSplit
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.perf.collectives import Collective, Phase, pairwise_exchange
from tilewright.engine.perf.device import DeviceModel, device_capacity, device_model, remote_memory
from tilewright.engine.perf.memory import activation_bytes, bytes_per_param, model_state, workspace_bytes
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.plan.hardware_flops import model_flops_per_sample
from tilewright.engine.plan.hypar_comm import Exchange, HyparComm, hypar_comm, layer_choices, layer_tensors
from tilewright.engine.plan.memo import memo_method
from tilewright.engine.plan.passes import ChunkPass, Segment
from tilewright.engine.plan.placement import stage_groups
from tilewright.engine.plan.plan import Plan
from tilewright.engine.plan.residency import adam_step
from tilewright.engine.plan.stage_build import StagePlan
from tilewright.engine.workloads.graph import WorkloadGraph

EXCHANGE_KIND = "exchange-L"


def exchange_kind(level: int) -> str:
    return f"{EXCHANGE_KIND}{level}"


def exchange_level(kind: str) -> int | None:
    return int(kind[len(EXCHANGE_KIND) :]) if kind.startswith(EXCHANGE_KIND) else None


@dataclass(eq=False)
class HyparPlan(Plan):
    """A plan whose one stage is HyPar's array; see the module docstring."""

    comm: HyparComm | None = None
    array: list[int] = field(default_factory=list)  # device indices in array order (partners: i XOR stride)

    @memo_method
    def tp_collective(self, rank: int, replica: int, kind: str, nbytes: float) -> Collective:
        level = exchange_level(kind)
        if level is None or self.comm is None:
            return super().tp_collective(rank, replica, kind, nbytes)
        return pairwise_exchange(self.hw, self.array, self.comm.stride(level), nbytes)

    def weight_exchange(self, layers: set[int] | None = None) -> Collective:
        """The weight-gradient exchanges of ``layers`` (all when None), one phase per level, lowest
        level (nearest partners) first."""
        assert self.comm is not None
        per_level: dict[int, float] = {}
        for x in self.comm.exchanges:
            if x.when == "W" and (layers is None or x.layer in layers):
                per_level[x.level] = per_level.get(x.level, 0.0) + x.bytes_per_device
        phases: list[Phase] = []
        for level in sorted(per_level, reverse=True):
            coll = pairwise_exchange(self.hw, self.array, self.comm.stride(level), per_level[level])
            phases += coll.phases
        return Collective("exchange", "pairwise" if phases else "none", tuple(phases))

    @memo_method
    def dp_collective(self, rank: int, chunk: int) -> Collective:
        return self.weight_exchange()

    @memo_method
    def dp_buckets(self, rank: int, chunk: int) -> tuple[Collective, Collective]:
        """Without overlap: nothing early, every ΔW after the last backward. With overlap (as the base
        plan does it): every layer's but the first's from the start of the last backward, the first
        layer's — computed last — when that backward ends."""
        whole = self.dp_collective(rank, chunk)
        if not self.project.mapping.overlap_grad_reduce or not whole.phases or self.comm is None:
            return Collective(whole.kind, "none", ()), whole
        first = self.comm.layers[0].index
        rest = {lay.index for lay in self.comm.layers[1:]}
        return self.weight_exchange(rest), self.weight_exchange({first})


def _shared_op(op: Op, ways: int) -> Op:
    """The op as one device of a ``ways``-way weight split runs it: weighted ops split along their input
    channels (weight rows, partial sums out), the element-wise ops after them along the channels."""
    if ways == 1:
        return op
    return op.model_copy(update={"split": TensorSplit.row if op.params > 0 else TensorSplit.column})


class _PassBuilder:
    """Segments of one pass: each layer's compute, then the exchanges that follow it, one per level."""

    def __init__(self, kind: str, dev: DeviceModel, elem_bytes: int, comm: HyparComm):
        self.out = ChunkPass(kind)
        self.dev, self.elem_bytes, self.comm = dev, elem_bytes, comm

    def layer(self, ops: list[Op], name: str, layer: int, samples: float, ways: int) -> None:
        backward = self.out.kind == "B"
        seg = Segment(label=name, layer=layer, busy_s=0.0, compute_s=0.0, flops=0.0, dram_bytes=0.0)
        for op in reversed(ops) if backward else ops:
            t = op_time(_shared_op(op, ways), self.dev, samples, ways, False, backward, self.elem_bytes)  # type: ignore[arg-type]
            seg.add(t, self.out.dataflows)
        self.out.segments.append(seg)
        when = "F" if self.out.kind == "F" else "B"
        for level, nbytes, what in _merged(self.comm.exchanges, layer, when):
            if seg.comm is not None:
                seg = Segment(label=f"{name} {what}", layer=layer, busy_s=0.0, compute_s=0.0, flops=0.0,
                              dram_bytes=0.0)
                self.out.segments.append(seg)
            seg.comm = (exchange_kind(level), nbytes)


def _merged(exchanges: list[Exchange], layer: int, when: str) -> list[tuple[int, float, str]]:
    """(level, bytes per device, what) of the exchanges after one pass of one layer, one per level:
    what crosses a level at the same moment goes as one exchange."""
    by_level: dict[int, tuple[float, list[str]]] = {}
    for x in exchanges:
        if x.layer == layer and x.when == when:
            total, whats = by_level.get(x.level, (0.0, []))
            by_level[x.level] = (total + x.bytes_per_device, whats + [x.what])
    return [(lv, total, " + ".join(whats)) for lv, (total, whats) in sorted(by_level.items())]


def build_hypar_plan(project: Project, hw: HardwareGraph, workload: WorkloadGraph) -> HyparPlan:
    m, run = project.mapping, project.run
    elem = dtype_bytes(run.dtype)
    array = [g[0] for g in stage_groups(hw.devices, m)[0]]
    first = array[0]
    d = hw.devices[first]
    dev = device_model(d.compute, d.memories, remote_memory(hw, first), run.dtype)
    tensors = layer_tensors(workload)
    samples = m.micro_batch * m.dp  # one micro-batch across the array
    comm = hypar_comm(tensors, layer_choices(m, tensors), len(array), samples, elem)
    forward = _PassBuilder("F", dev, elem, comm)
    backward = _PassBuilder("B", dev, elem, comm)
    per_param = bytes_per_param(elem, run.master_weights_fp32, run.optimizer, run.dtype)
    params = act = workspace = 0.0
    for i, lay in enumerate(tensors):
        ops = workload.layer_ops(lay.index)
        share = samples * comm.batch_share[i]
        ways = round(1 / comm.weight_share[i])
        forward.layer(ops, lay.name, lay.index, share, ways)
        params += sum(op.params for op in ops) * comm.weight_share[i]
        act += activation_bytes([ops], share, 1, False, Recompute.none, elem)  # type: ignore[arg-type]
        workspace = max(workspace, workspace_bytes(ops, share, 1, False, elem))  # type: ignore[arg-type]
    for i in reversed(range(len(tensors))):
        lay = tensors[i]
        backward.layer(workload.layer_ops(lay.index), lay.name, lay.index, samples * comm.batch_share[i],
                       round(1 / comm.weight_share[i]))
    opt_bytes = adam_step(per_param).bytes_per_param  # fp32 moments: a HyPar partition refuses others
    stage = StagePlan(
        rank=0,
        groups=[array],
        dev=dev,
        chunk_layers={0: [lay.index for lay in tensors]},
        passes={(0, "F"): forward.out, (0, "B"): backward.out},
        act_bytes={0: act},
        transient_bytes=0.0,
        state=model_state(params, per_param, 0, 1),
        workspace=workspace,
        capacity=device_capacity(hw, first, dev),
        params=params,
        grad_bytes={0: params * per_param.gradients},
        optimizer_s=params * opt_bytes / dev.dram_bandwidth,
        label="stage 0",
    )
    hardware_flops = sum(op.flops + op.backward_flops for op in workload.ops()) * m.global_batch
    assert run.mode is Mode.train  # build_plan sends only training runs here
    return HyparPlan(
        project=project,
        hw=hw,
        workload=workload,
        pp=1,
        chunks=1,
        micro_batches=m.micro_batches,
        micro_batch=m.micro_batch,
        tp=len(array),
        dp=1,
        schedule=m.schedule,
        elem_bytes=elem,
        stages=[stage],
        p2p_bytes={},
        model_flops=model_flops_per_sample(workload) * m.global_batch,
        hardware_flops=hardware_flops,
        notes=_notes(comm, m.micro_batches, forward.out.dataflows),
        comm=comm,
        array=array,
    )


def _notes(comm: HyparComm, micro_batches: int, dataflows: Counter) -> list[str]:
    per_level = [0.0] * comm.levels
    for x in comm.exchanges:
        per_level[x.level - 1] += comm.devices * x.bytes_per_device * (1 if x.when == "W" else micro_batches)
    levels = ", ".join(f"L{h + 1} {b / 1e9:.3f}" for h, b in enumerate(per_level))
    notes = [
        f"HyPar partition over {comm.devices} devices ({comm.levels} levels): "
        f"{comm.bytes_per_step(micro_batches) / 1e9:.3f} GB exchanged per step (per level, GB: {levels or 'none'}); "
        "activation exchanges count as tp_comm, weight-gradient exchanges as dp_comm"
    ]
    if dataflows:
        chosen = ", ".join(f"{n} × {flow}" for flow, n in dataflows.most_common())
        notes.append(f"stage 0: SRAM tiling of forward matmuls per micro-batch: {chosen}")
    return notes
