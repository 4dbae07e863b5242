"""The fast evaluator of the parallelism search: the analytic engine's answer without building a plan.

Per candidate it needs stage sums of cached layer costs (``layer_table``), three cached collectives
(tensor group, data-parallel groups, one pipeline hop; ``comm``), the closed-form pipeline time of
``engine.plan.timing.closed_form`` and the closed-form activation peak of ``inflight``:

    T = closed_form(F_r + B_r, m, v, sends) + exposed data-parallel reduction + optimizer step (+ ZeRO gather,
        with overlap_param_gather only its exposed part: ``plan.param_gather``), the tail in ``tail``

The chunks' reductions run as in the analytic engine (``plan.replica_sync.gradients_reduced``: one after the
other after the stage's schedule, or with ``overlap_grad_reduce`` from each chunk's last backward); stage 0 ends
the pipeline, stage pp−1 ends earlier by the backward wave's trip back to stage 0 but may hold more
parameters (a head), so both are checked. Memory is evaluated first (``memory_fit``), because most of a
large search space does not fit and costs nothing more to reject.

Ops are costed with the plan's own ``PassContext`` (``search.op_settings``): per-tensor formats and
fidelity, fusion, the spatial split over a grid device's cores and per-op fixed costs count as they do in
the engines. With ``mapping.memory_levels``, each candidate's residency is resolved by the plan's rule
(``plan.residency.resolve``) from its stage-0 sizes; it then decides the op traffic, the optimizer
step's streams and the per-level capacity check. CUDA graphs (``mapping.cuda_graph_scope``) drop the captured
ops' host work in the layer table and, under 'full_iteration', the passes' host syncs and the sizes broadcast
(``framework_chunks``) and the reduction's drain (``tail._step_overhead``), as in the plan. With context
parallelism a device runs ``micro_batch / cp`` (``Estimator.micro_batch``) and ZeRO shards over dp · cp
(``replicas``), the plan's figures; the K/V ring is the plan's to time (``extended``).

The parts, each a class the ``Estimator`` inherits: ``stage_sums`` (layer tables summed into stages),
``candidate_chunks`` (a candidate's layer table and the chunks it is timed with), ``memory_fit`` (bytes per
device, per level), ``pipeline_hops`` (the sends and the closed form) and ``tail`` (what follows the
pipeline). This module builds what they share once per (project, system) pair and times a candidate.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.hardware.interleave import stream_usage
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.perf.device import device_capacity, device_model, remote_memory
from tilewright.engine.perf.memory import bytes_per_param, fp8_param_copy, param_gather_bytes
from tilewright.engine.plan.recurrence import run_pipeline
from tilewright.engine.plan.report import split_rows
from tilewright.engine.plan.residency import AdamStep, StageResidency, adam_step
from tilewright.engine.search.comm import CommModel, Layout
from tilewright.engine.search.layer_table import LayerCosts, LayerTable
from tilewright.engine.search.op_settings import OpSettings
from tilewright.engine.search.parallel.candidate import Candidate, precision_fields
from tilewright.engine.search.parallel.candidate_chunks import CandidateChunks
from tilewright.engine.search.parallel.memory_fit import MemoryFit
from tilewright.engine.search.parallel.pipeline_hops import PipelineHops
from tilewright.engine.search.parallel.stage_sums import Chunks, StageSums
from tilewright.engine.search.parallel.tail import IterationTail
from tilewright.engine.workloads.graph import WorkloadGraph


class Estimator(CandidateChunks, StageSums, MemoryFit, IterationTail, PipelineHops):
    """Memory and iteration time of candidates for one (project template, elaborated system) pair."""

    def __init__(self, project: Project, hw: HardwareGraph, workload: WorkloadGraph) -> None:
        run = project.run
        self.project = project
        self.hw = hw
        self.workload = workload
        self.settings = OpSettings.of(project, workload)
        self.elem = self.settings.elem_bytes
        self.weight_bytes = self.settings.weight_bytes
        first = hw.devices[0]
        self.dev = device_model(first.compute, first.memories, remote_memory(hw, 0), run.dtype)
        self.capacity = device_capacity(hw, 0, self.dev)
        # Adam's moments and master copy as the plan reads them, with ZeRO ≥ 1 only: Megatron-Core's precision-aware
        # optimizer needs the distributed optimizer, so a candidate without ZeRO runs fp32 state (Candidate.mapping
        # drops the fields there, and ``state_per`` / ``step_at`` read them per ZeRO stage)
        m = project.mapping
        self._per_zero = {z: bytes_per_param(self.weight_bytes, run.master_weights_fp32, run.optimizer, run.dtype,  # type: ignore[arg-type]
                                             fp32_grads=m.grad_reduce_in_fp32, **precision_fields(m, z))
                          for z in range(4)}
        self._steps = {z: adam_step(self._per_zero[z], **precision_fields(m, z)) for z in range(4)}
        self.per_param = self._per_zero[0]  # its weights and gradients are every stage's
        # fp8 training: the bf16 parameters beside the fp8 weights, unless mapping.fp8_param_gather (with ZeRO ≥ 1,
        # so per candidate: ``state_per``) keeps only the fp8 ones; the post-step gather moves the parameters
        weights, train, fp8_pg = self.settings.formats.weights, run.mode is Mode.train, project.mapping.fp8_param_gather
        self._param_copy = {z: fp8_param_copy(weights, train, fp8_pg, z) for z in range(4)}
        self.gather_bytes = param_gather_bytes(self.weight_bytes, weights, train, fp8_pg, 1)
        self.levels = bool(project.mapping.memory_levels)
        self.comm = CommModel(hw)
        # On a grid, stages' tensor groups differ in shape (placement strategies): each stage is timed on
        # its own. On a switched cluster they are alike, and stage 0's stands for all (as it always did).
        self.per_stage = any(d.coord for d in hw.devices)
        self.costs = LayerCosts(workload, self.dev, self.settings, self.comm)
        self._ring_costs: LayerCosts | None = None  # candidates with cp > 1 (``layer_costs``)
        blocks = workload.block_layers
        self.blocks = np.array(blocks)
        extras = [li.index for li in workload.layers if li.index not in blocks]
        self.first_extra = np.array([i for i in extras if i < blocks[0]], dtype=int)  # the plan's rule
        self.last_extra = np.array([i for i in extras if i > blocks[0]], dtype=int)
        self.uniform = self.costs.uniform_blocks
        self.order = np.concatenate((self.first_extra, self.blocks, self.last_extra)).astype(int)  # plan order
        self.order_klass = self.costs.klass[self.order]
        self._joins: dict[int, tuple[LayerTable, tuple[np.ndarray, np.ndarray] | None]] = {}  # by id(table)
        self._chunks: dict[tuple, Chunks] = {}
        self._params: dict[tuple[int, int, int], np.ndarray] = {}
        self._prefixes: dict[int, tuple[np.ndarray, np.ndarray, float, float]] = {}  # keyed by id, holds the array
        self._orders: dict[int, tuple] = {}  # the blocks' values in order and the extras' maxima, by id(values)
        self.out_elems = [ops[-1].out_elems if ops else 0.0 for ops in self.costs.ops]
        self._stream: dict[tuple[int, ...], dict[int, float]] = {}  # a stage's devices → their DRAM usage
        self._residency: dict[tuple, StageResidency | None] = {}
        self._framework: dict[tuple, tuple[Chunks, Chunks]] = {}  # plan.train_step's pass leads, by chunks
        self._flags: dict[tuple[int, ...], float] = {}  # the optimizer's flag all-reduce, by model group
        self._tied: dict[tuple, float] = {}  # the tied embedding's all-reduce (``IterationTail._tied_s``)

    def step_at(self, zero: int) -> AdamStep:
        """The fused Adam step of a candidate with ZeRO stage ``zero`` (``precision_fields``)."""
        return self._steps[zero]

    def spatial_splits(self, c: Candidate) -> list[dict[str, object]]:
        """On a grid device: how each forward op of a micro-batch is split over the cores, per stage (the
        rows of ``Plan.spatial_splits``)."""
        if self.dev.compute.grid is None:
            return []
        table, _ = self.layer_table(c)
        starts, ends = self._ranges(c.pp, c.interleave)
        out = []
        for r in range(c.pp):
            layers = [
                int(self.blocks[i]) for vs in range(r, c.pp * c.interleave, c.pp) for i in range(starts[vs], ends[vs])
            ]
            if r == 0:
                layers += self.first_extra.tolist()
            if r == (c.pp * c.interleave - 1) % c.pp:
                layers += self.last_extra.tolist()
            forward: Counter = Counter()
            for i in layers:
                forward.update(table.splits.get(int(self.costs.klass[i]), Counter()))
            out += split_rows(f"stage {r}, forward", forward)
        return out

    # --- time -----------------------------------------------------------------------------------------

    def iteration_time(self, c: Candidate, m: int, chunks: Chunks) -> float:
        t_pipe, hops = self.pipeline_time(c, m, chunks)
        placed = self.residency(c, m, chunks)
        if self.pipeline_p2p(c).blocking:  # a stage's last send is in its finish: no trip back after it
            hops = [0.0] * len(hops)
        return max(t_pipe + self.tail(c, chunks, t_pipe, hops, placed), self.dram_floor(c, m, chunks))

    def dram_floor(self, c: Candidate, m: int, chunks: Chunks) -> float:
        """As ``engine.plan.timing.dram_floor``: the busiest DRAM link's bytes over one iteration (every
        stage's and replica's streams) over its bandwidth; 0 without remote DRAM."""
        mem = self.dev.remote_dram
        if chunks.dram is None or mem is None:
            return 0.0
        layout = Layout(c.placement, c.rank_order)
        load: dict[int, float] = {}
        for r in range(c.pp):
            nbytes = m * chunks.dram[r]
            if nbytes <= 0:
                continue
            devices = tuple(d for g in self.comm.stage_groups(layout, c.tp, c.pp, c.dp, r) for d in g)
            usage = self._stream.get(devices)
            if usage is None:
                usage = self._stream[devices] = stream_usage(self.hw, devices, mem)
            for lk, u in usage.items():
                load[lk] = load.get(lk, 0.0) + u * nbytes
        links = self.hw.links
        return max((b / links[lk].bandwidth for lk, b in load.items()), default=0.0)

    def exact_time(self, c: Candidate, m: int, chunks: Chunks) -> float:
        """The pipeline by the analytic engine's recurrence (``run_pipeline``) instead of the closed form:
        O(pp·m·v) steps, used to refine the few candidates a search keeps."""
        pp, v = c.pp, c.interleave
        duration = {}
        for r in range(pp):
            for ch in range(v):
                duration[(r, ch, "F")] = float(chunks.fwd[ch, r])
                duration[(r, ch, "B")] = float(chunks.bwd[ch, r])
        hops = self.hops(c)
        send = {}
        for vs in range(pp * v - 1):
            send[(vs, False)] = send[(vs, True)] = hops[vs % pp]
        stages = run_pipeline(c.schedule, pp, m, v, duration, send, blocking=self.pipeline_p2p(c).blocking)
        placed = self.residency(c, m, chunks)
        reduced = {
            r: self._reduced(c, r, st.finish, [st.last_backward.get(ch, st.finish) for ch in range(v)],
                             [st.last_backward_start.get(ch, st.finish) for ch in range(v)])
            for r, st in enumerate(stages)
        }
        return max(self._ends(c, reduced, placed, chunks), self.dram_floor(c, m, chunks))
