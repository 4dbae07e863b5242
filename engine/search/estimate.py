"""The fast evaluator of the parallelism search: the analytic engine's answer without building a plan.

Per candidate it needs stage sums of cached layer costs (``layer_table``), three cached collectives
(tensor group, data-parallel groups, one pipeline hop; ``comm``), the closed-form pipeline time of
``engine.analytic.pipeline.closed_form`` and the closed-form activation peak of ``inflight``:

    T = closed_form(F_r + B_r, m, v, sends) + exposed data-parallel reduction + optimizer step (+ ZeRO gather)

The reduction of a chunk starts at that chunk's last backward, as in the analytic engine; stage 0 ends
the pipeline, stage pp−1 ends earlier by the backward wave's trip back to stage 0 but may hold more
parameters (a head), so both are checked. Memory is evaluated first (``memory``), because most of a
large search space does not fit and costs nothing more to reject.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from engine.analytic.pipeline import closed_form
from engine.hardware.graph import HardwareGraph
from engine.ir.mapping import Recompute
from engine.ir.project import Project
from engine.perf.device import DeviceModel, device_model
from engine.perf.memory import bytes_per_param
from engine.plan.plan import ADAM_BYTES_FP32, ADAM_BYTES_MIXED
from engine.search.candidate import Candidate
from engine.search.comm import CommModel, Layout
from engine.search.inflight import peak_activation
from engine.search.layer_table import LayerCosts, LayerTable
from engine.workloads.graph import WorkloadGraph

ELEM_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}


@dataclass(frozen=True)
class Chunks:
    """Per (virtual stage = chunk·pp + rank) sums of one layer table, shaped (v, pp)."""

    fwd: np.ndarray
    bwd: np.ndarray
    act: np.ndarray
    transient: np.ndarray  # per stage (max over its chunks)
    workspace: np.ndarray  # per stage
    fb: list[float]  # per stage: forward + backward of one micro-batch over all its chunks
    act_stage: list[float]  # per stage: one micro-batch's stored activations over all its chunks


def _remote_memory(hw: HardwareGraph, device: int):
    """As ``engine.plan.plan``: the edge-attached memory of the device's nearest owning ancestor."""
    path = hw.devices[device].node
    for port in hw.memory_ports:
        if port.edge is not None and path.startswith(port.owner + "/"):
            return port.memory
    return None


def _capacity(hw: HardwareGraph, device: int, dev: DeviceModel) -> float:
    """As ``engine.plan.plan``: local DRAM, else SRAM plus a fair share of the edge DRAM."""
    if dev.local_dram is not None:
        return dev.local_dram.capacity_bytes
    path = hw.devices[device].node
    owners = {p.owner for p in hw.memory_ports if p.edge is not None and path.startswith(p.owner + "/")}
    if not owners:
        return dev.sram_bytes
    owner = max(owners, key=len)
    ports = [p for p in hw.memory_ports if p.owner == owner and p.edge is not None]
    sharing = sum(1 for d in hw.devices if d.node.startswith(owner + "/"))
    return dev.sram_bytes + sum(p.capacity_bytes for p in ports) / max(sharing, 1)


class Estimator:
    """Memory and iteration time of candidates for one (project template, elaborated system) pair."""

    def __init__(self, project: Project, hw: HardwareGraph, workload: WorkloadGraph) -> None:
        run = project.run
        self.project = project
        self.hw = hw
        self.workload = workload
        self.elem = ELEM_BYTES[run.dtype.value]
        first = hw.devices[0]
        self.dev = device_model(first.compute, first.memories, _remote_memory(hw, 0), run.dtype)
        self.capacity = _capacity(hw, 0, self.dev)
        self.per_param = bytes_per_param(self.elem, run.master_weights_fp32, run.optimizer)
        self.opt_bytes = ADAM_BYTES_MIXED if self.per_param.optimizer > 8 else ADAM_BYTES_FP32
        self.comm = CommModel(hw)
        self.costs = LayerCosts(workload, self.dev, self.elem, self.comm)
        blocks = workload.block_layers
        self.blocks = np.array(blocks)
        self.first_extra = np.array([li.index for li in workload.layers if li.index not in blocks and li.index < blocks[0]])
        self.last_extra = np.array([li.index for li in workload.layers if li.index not in blocks and li.index > blocks[0]])
        self.uniform = self.costs.uniform_blocks
        self._chunks: dict[tuple, Chunks] = {}
        self._params: dict[tuple[int, int, int], np.ndarray] = {}
        self.out_elems = [ops[-1].out_elems if ops else 0.0 for ops in self.costs.ops]

    # --- layer → stage --------------------------------------------------------------------------------

    @cache  # noqa: B019 - one estimator per search
    def _ranges(self, pp: int, v: int) -> tuple[np.ndarray, np.ndarray]:
        """Block-order [start, end) of each virtual stage, the earlier ones one larger (``split_layers``)."""
        parts = pp * v
        base, extra = divmod(len(self.blocks), parts)
        idx = np.arange(parts)
        starts = idx * base + np.minimum(idx, extra)
        return starts, starts + base + (idx < extra)

    def _sum(self, values: np.ndarray, pp: int, v: int) -> np.ndarray:
        starts, ends = self._ranges(pp, v)
        pre = np.concatenate(([0.0], np.cumsum(values[self.blocks])))
        out = pre[ends] - pre[starts]
        if self.first_extra.size:
            out[0] += values[self.first_extra].sum()
        if self.last_extra.size:
            out[-1] += values[self.last_extra].sum()
        return out.reshape(v, pp)

    def _max(self, values: np.ndarray, pp: int, v: int) -> np.ndarray:
        starts, _ = self._ranges(pp, v)
        out = np.maximum.reduceat(values[self.blocks], starts)
        if self.first_extra.size:
            out[0] = max(out[0], values[self.first_extra].max())
        if self.last_extra.size:
            out[-1] = max(out[-1], values[self.last_extra].max())
        return out.reshape(v, pp).max(axis=0)

    def chunks(self, table: LayerTable, key: tuple, pp: int, v: int) -> Chunks:
        k = (key, pp, v)
        ch = self._chunks.get(k)
        if ch is None:
            fwd, bwd, act = self._sum(table.fwd, pp, v), self._sum(table.bwd, pp, v), self._sum(table.act, pp, v)
            ch = self._chunks[k] = Chunks(
                fwd,
                bwd,
                act,
                self._max(table.transient, pp, v),
                self._max(table.workspace, pp, v),
                (fwd.sum(axis=0) + bwd.sum(axis=0)).tolist(),
                act.sum(axis=0).tolist(),
            )
        return ch

    def params(self, tp: int, pp: int, v: int) -> np.ndarray:
        """Parameters per device of each chunk, shaped (v, pp)."""
        k = (tp, pp, v)
        p = self._params.get(k)
        if p is None:
            p = self._params[k] = self._sum(self.costs.params(tp), pp, v)
        return p

    def layer_table(self, c: Candidate) -> tuple[LayerTable, tuple]:
        group = self.comm.tensor_group(Layout(c.placement, c.rank_order), c.tp, c.pp, c.dp, 0, 0)
        key = (c.tp, c.micro_batch, c.sequence_parallel, c.recompute, group)
        return self.costs.table(c.tp, c.micro_batch, c.sequence_parallel, c.recompute, group), key

    # --- memory ---------------------------------------------------------------------------------------

    def stages_to_check(self, pp: int) -> list[int]:
        """Stage 0 holds the most in-flight micro-batches and the most blocks, so with identical blocks
        only it and the last stage (the head) can be the largest."""
        return sorted({0, pp - 1}) if self.uniform else list(range(pp))

    def memory_parts(self, c: Candidate, m: int, chunks: Chunks) -> list[tuple[float, float]]:
        """Per stage that can be the fullest: (parameters, activation peak + workspace) in bytes/params."""
        params = self.stage_params(c.tp, c.pp, c.interleave)
        out = []
        for r in self.stages_to_check(c.pp):
            recompute = float(chunks.transient[r]) if c.recompute is Recompute.full else 0.0
            if c.interleave == 1:
                live = min(c.pp - r, m)  # 1F1B (Narayanan et al. §2.2); see ``inflight``
                act = live * chunks.act_stage[r] + recompute
            else:
                act = peak_activation(c.schedule, c.pp, m, c.interleave, r, chunks.act[:, r], recompute)
            out.append((params[r], act + float(chunks.workspace[r])))
        return out

    def state_bytes_per_param(self, zero: int, dp: int) -> float:
        p = self.per_param
        return p.weights + p.gradients + p.optimizer / (dp if zero >= 1 else 1)

    def memory(self, c: Candidate, m: int, chunks: Chunks) -> float:
        """Peak bytes of the fullest device (weights, gradients, optimizer, activations, workspace)."""
        per = self.state_bytes_per_param(c.zero, c.dp)
        return max(p * per + rest for p, rest in self.memory_parts(c, m, chunks))

    def stage_params(self, tp: int, pp: int, v: int) -> list[float]:
        return self._stage_params(tp, pp, v)

    @cache  # noqa: B019
    def _stage_params(self, tp: int, pp: int, v: int) -> list[float]:
        return self.params(tp, pp, v).sum(axis=0).tolist()

    # --- time -----------------------------------------------------------------------------------------

    def sends(self, c: Candidate) -> tuple[float, float]:
        """(hop from stage r to r+1, hop from the last stage back to stage 0 for the next chunk)."""
        if c.pp == 1:
            return 0.0, 0.0
        layout = Layout(c.placement, c.rank_order)
        starts, ends = self._ranges(c.pp, c.interleave)
        last_layer = int(self.blocks[ends[0] - 1])
        nbytes = self.out_elems[last_layer] * c.micro_batch * self.elem / c.tp
        g = [self.comm.tensor_group(layout, c.tp, c.pp, c.dp, r, 0) for r in (0, 1, c.pp - 1)]
        hop = self.comm.p2p_time(g[0], g[1], nbytes)
        wrap = self.comm.p2p_time(g[2], g[0], nbytes) if c.interleave > 1 else 0.0
        return hop, wrap

    def pipeline_time(self, c: Candidate, m: int, chunks: Chunks) -> tuple[float, float, float]:
        """(closed-form pipeline time, forward hop, wrap hop)."""
        hop, wrap = self.sends(c)
        if c.interleave == 1:
            sends = [hop] * (c.pp - 1)
        else:
            sends = [wrap if (vs % c.pp) == c.pp - 1 else hop for vs in range(c.pp * c.interleave - 1)]
        return closed_form(chunks.fb, m, c.interleave, sends), hop, wrap

    def lower_bound(self, c: Candidate, m: int, chunks: Chunks) -> float:
        """The pipeline without any communication: no candidate sharing these chunks can be faster."""
        return closed_form(chunks.fb, m, c.interleave, [])

    def iteration_time(self, c: Candidate, m: int, chunks: Chunks) -> float:
        t_pipe, hop, _ = self.pipeline_time(c, m, chunks)
        return t_pipe + self.tail(c, chunks, t_pipe, hop)

    def tail(self, c: Candidate, chunks: Chunks, t_pipe: float, hop: float) -> float:
        """What follows the pipeline on the stage that finishes last: exposed dp reduction, optimizer, gather."""
        params = self.params(c.tp, c.pp, c.interleave)
        layout = Layout(c.placement, c.rank_order)
        kind = "reduce-scatter" if c.zero >= 1 else "all-reduce"
        v, pp = c.interleave, c.pp
        end = 0.0
        stage_params = self.stage_params(c.tp, pp, v)
        # the last stage ends the backward wave earlier; it can only finish later with more parameters
        stages = [0, pp - 1] if pp > 1 and stage_params[pp - 1] > stage_params[0] else [0]
        for r in stages:
            # the backward wave leaves stage r for stage 0: stage r finishes that much earlier
            finish = t_pipe - sum(chunks.bwd[0, q] + hop for q in range(r)) if r else t_pipe
            groups: tuple[tuple[int, ...], ...] = ()
            name = self.comm.dp_key(layout, c.tp, pp, c.dp, r)
            if c.dp > 1:
                groups = self.comm.dp_groups(layout, c.tp, pp, c.dp, r)
            reduced = finish
            offset = 0.0
            for ch in range(v):
                nbytes = params[ch, r] * self.per_param.gradients
                dp_t = self.comm.concurrent_time(kind, groups, nbytes, name) if groups else 0.0
                reduced = max(reduced, finish - offset + dp_t)
                offset += pp * chunks.bwd[ch, r]
            local = stage_params[r] / (c.dp if c.zero >= 1 else 1)
            opt = local * self.opt_bytes / self.dev.dram_bandwidth
            gather = 0.0
            if c.zero >= 1 and groups:
                gather = self.comm.concurrent_time("all-gather", groups, stage_params[r] * self.elem, name)
            end = max(end, reduced + opt + gather)
        return end - t_pipe
