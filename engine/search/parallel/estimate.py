"""The fast evaluator of the parallelism search: the analytic engine's answer without building a plan.

Per candidate it needs stage sums of cached layer costs (``layer_table``), three cached collectives
(tensor group, data-parallel groups, one pipeline hop; ``comm``), the closed-form pipeline time of
``engine.plan.timing.closed_form`` and the closed-form activation peak of ``inflight``:

    T = closed_form(F_r + B_r, m, v, sends) + exposed data-parallel reduction + optimizer step (+ ZeRO gather,
        with overlap_param_gather only its exposed part: ``plan.param_gather``), the tail in ``tail``

The reduction of a chunk starts at that chunk's last backward, as in the analytic engine; stage 0 ends
the pipeline, stage pp−1 ends earlier by the backward wave's trip back to stage 0 but may hold more
parameters (a head), so both are checked. Memory is evaluated first (``memory``), because most of a
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
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import numpy as np
from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.hardware.interleave import stream_usage
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.perf.collectives import collective
from tilewright.engine.perf.device import device_capacity, device_model, issues_kernels, remote_memory
from tilewright.engine.perf.memory import (
    StateBytes,
    bytes_per_param,
    fp8_param_copy,
    gathered_weight_bytes,
    held_weight_bytes,
    param_gather_bytes,
    params_on_device,
)
from tilewright.engine.plan.activation_offload import offload_count
from tilewright.engine.plan.context import ring_fused
from tilewright.engine.plan.grad_hooks import param_tensors
from tilewright.engine.plan.memo import memo_method
from tilewright.engine.plan.pipeline_p2p import gather_lead_seconds
from tilewright.engine.plan.recurrence import run_pipeline
from tilewright.engine.plan.report import split_rows
from tilewright.engine.plan.residency import AdamStep, StageResidency, adam_step, resolve, workspace_level
from tilewright.engine.plan.tied import copy_params
from tilewright.engine.plan.train_logging import TrainLogging
from tilewright.engine.plan.train_step import TOKEN_BYTES, broadcasts, lead_seconds
from tilewright.engine.search.comm import CommModel, Layout
from tilewright.engine.search.layer_table import LayerCosts, LayerTable, fold
from tilewright.engine.search.op_settings import OpSettings
from tilewright.engine.search.parallel.candidate import Candidate, precision_fields, replicas
from tilewright.engine.search.parallel.inflight import peak_activation
from tilewright.engine.search.parallel.pipeline_hops import PipelineHops
from tilewright.engine.search.parallel.tail import IterationTail
from tilewright.engine.workloads.graph import WorkloadGraph


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
    dram: list[float] | None = None  # per stage: bytes one member streams from remote DRAM per micro-batch
    # per stage: of act_stage, the stored activations activation offload copies to host memory (its first
    # transformer layers of each chunk, ``plan.activation_offload``), when the activations are placed there
    offloaded: list[float] | None = None


class Estimator(IterationTail, PipelineHops):
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
        self.out_elems = [ops[-1].out_elems if ops else 0.0 for ops in self.costs.ops]
        self._stream: dict[tuple[int, ...], dict[int, float]] = {}  # a stage's devices → their DRAM usage
        self._residency: dict[tuple, StageResidency | None] = {}
        self._framework: dict[tuple, tuple[Chunks, Chunks]] = {}  # plan.train_step's pass leads, by chunks
        self._flags: dict[tuple[int, ...], float] = {}  # the optimizer's flag all-reduce, by model group

    # --- layer → stage --------------------------------------------------------------------------------

    @memo_method
    def _ranges(self, pp: int, v: int) -> tuple[np.ndarray, np.ndarray]:
        """Block-order [start, end) of each virtual stage, the earlier ones one larger (``split_layers``)."""
        parts = pp * v
        base, extra = divmod(len(self.blocks), parts)
        idx = np.arange(parts)
        starts = idx * base + np.minimum(idx, extra)
        return starts, starts + base + (idx < extra)

    def _prefix(self, values: np.ndarray) -> tuple[np.ndarray, float, float]:
        """Prefix sums over the blocks, and the sums of the layers before and after them."""
        k = id(values)
        hit = self._prefixes.get(k)
        if hit is None or hit[0] is not values:
            pre = np.concatenate(([0.0], np.cumsum(values[self.blocks])))
            first = float(values[self.first_extra].sum()) if self.first_extra.size else 0.0
            last = float(values[self.last_extra].sum()) if self.last_extra.size else 0.0
            hit = self._prefixes[k] = (values, pre, first, last)
        return hit[1], hit[2], hit[3]

    def _sum(self, values: np.ndarray, pp: int, v: int) -> np.ndarray:
        starts, ends = self._ranges(pp, v)
        pre, first, last = self._prefix(values)
        out = pre[ends] - pre[starts]
        out[0] += first
        out[-1] += last
        return out.reshape(v, pp)

    def _max(self, values: np.ndarray, pp: int, v: int) -> np.ndarray:
        starts, _ = self._ranges(pp, v)
        out = np.maximum.reduceat(values[self.blocks], starts)
        if self.first_extra.size:
            out[0] = max(out[0], values[self.first_extra].max())
        if self.last_extra.size:
            out[-1] = max(out[-1], values[self.last_extra].max())
        return out.reshape(v, pp).max(axis=0)

    def _passes(self, table: LayerTable, pp: int, v: int) -> tuple[np.ndarray, np.ndarray]:
        """Forward and backward (+ recompute) seconds of each virtual stage, shaped (v, pp): the sums of its
        layers' passes plus the joins (``layer_table.join_seconds``) of each two consecutive layers in it,
        since the plan runs a chunk's layers as one pass, those of the pair that ends each pass with
        ``LayerTable.ends`` (the word embedding's backward ends stage 0's); without collectives, one segment
        per pass."""
        if table.single is not None:  # tp 1: each pass of a chunk is one segment (``layer_table.single_segment``)
            f, b, r = (np.maximum(self._sum(table.single[:, j, 0], pp, v), self._sum(table.single[:, j, 1], pp, v))
                       for j in range(3))
            return f, b + r
        if table.pieces is not None:  # tp 1 with host waits inside layers: fold each chunk's passes
            return self._folded(table, pp, v)
        fwd, bwd = self._sum(table.fwd, pp, v), self._sum(table.bwd, pp, v)
        joined = self._join_prefix(table) if table.joins else None
        if joined is None:
            return fwd, bwd
        pre, last = joined
        starts, ends = self._ranges(pp, v)
        lo = starts + self.first_extra.size
        hi = ends + self.first_extra.size
        lo[0] = 0  # the first virtual stage also runs the layers before the blocks, the last those after
        hi[-1] = self.order.size
        inside = pre[np.maximum(hi - 1, lo)] - pre[lo]  # the pairs (k, k+1) with lo ≤ k < hi − 1
        # the pair ending each pass (``LayerTable.ends``): forward and recompute (hi − 2, hi − 1), backward (lo, lo + 1)
        two = (hi - lo >= 2)[:, None]
        at_end = np.where(two, last[np.clip(hi - 2, 0, len(last) - 1)], 0.0)
        at_start = np.where(two, last[np.clip(lo, 0, len(last) - 1)], 0.0)
        f = inside[:, 0] + at_end[:, 0]
        b = inside[:, 1] + at_start[:, 1] + at_end[:, 2]
        return fwd + f.reshape(v, pp), bwd + b.reshape(v, pp)

    def _join_prefix(self, table: LayerTable) -> tuple[np.ndarray, np.ndarray] | None:
        """Prefix sums of the joins of consecutive layers in plan order (``pre[k]``: the pairs before position
        k) and, per position k, what the pair (k, k+1) adds where it ends a pass (``LayerTable.ends``), None
        when no pair joins: one table's, whatever (pp, v) splits it, so built once per table (the search asks
        for tens of thousands of splits of a few hundred tables). Keyed by id, holds the table."""
        hit = self._joins.get(id(table))
        if hit is None or hit[0] is not table:
            klass = self.order_klass
            keys = [(int(a), int(b)) for a, b in zip(klass[:-1], klass[1:], strict=True)]
            pairs = np.array([table.joins[k] for k in keys])
            last = np.array([table.ends.get(k, (0.0, 0.0, 0.0)) for k in keys])
            joined = None
            if pairs.size and (pairs.any() or last.any()):
                joined = (np.vstack((np.zeros((1, 2)), np.cumsum(pairs, axis=0))), last)
            hit = self._joins[id(table)] = (table, joined)
        return hit[1]

    def _folded(self, table: LayerTable, pp: int, v: int) -> tuple[np.ndarray, np.ndarray]:
        """Forward and backward (+ recompute) seconds of each virtual stage, shaped (v, pp), by folding its
        layers' ``Pieces`` in the order each pass runs them (``layer_table.fold``): forward and recompute in
        layer order, backward in reverse."""
        assert table.pieces is not None
        starts, ends = self._ranges(pp, v)
        last = pp * v - 1
        fwd, bwd = np.zeros(pp * v), np.zeros(pp * v)
        for vs in range(pp * v):
            order = self.blocks[starts[vs]:ends[vs]].tolist()
            if vs == 0:
                order = self.first_extra.tolist() + order
            if vs == last:
                order = order + self.last_extra.tolist()
            parts = [table.pieces[int(self.costs.klass[i])] for i in order]
            fwd[vs] = fold([p[0] for p in parts])
            bwd[vs] = fold([p[1] for p in reversed(parts)]) + fold([p[2] for p in parts])
        return fwd.reshape(v, pp), bwd.reshape(v, pp)

    def chunks(self, table: LayerTable, key: tuple, pp: int, v: int) -> Chunks:
        k = (key, pp, v)
        ch = self._chunks.get(k)
        if ch is None:
            (fwd, bwd), act = self._passes(table, pp, v), self._sum(table.act, pp, v)
            ch = self._chunks[k] = Chunks(
                fwd,
                bwd,
                act,
                self._max(table.transient, pp, v),
                self._max(table.workspace, pp, v),
                (fwd.sum(axis=0) + bwd.sum(axis=0)).tolist(),
                act.sum(axis=0).tolist(),
                self._sum(table.dram, pp, v).sum(axis=0).tolist() if table.dram is not None else None,
                self._offloaded(table.act, pp, v),
            )
        return ch

    def _offloaded(self, act: np.ndarray, pp: int, v: int) -> list[float]:
        """Per stage: the stored activations of the first ``offload_count`` transformer layers of each of its
        chunks, what activation offload copies to the host (``plan.activation_offload``)."""
        starts, ends = self._ranges(pp, v)
        pre, _, _ = self._prefix(act)
        asked = self.project.mapping.offload_layers
        out = np.array([pre[a + offload_count(int(b - a), asked)] - pre[a] for a, b in zip(starts, ends, strict=True)])
        return out.reshape(v, pp).sum(axis=0).tolist()

    def params(self, tp: int, pp: int, v: int) -> np.ndarray:
        """Parameters per device of each chunk, shaped (v, pp)."""
        k = (tp, pp, v)
        p = self._params.get(k)
        if p is None:
            p = self._sum(self.costs.params(tp), pp, v)
            if pp > 1:  # the last stage holds the tied word embedding's copy (``plan.tied``)
                p[-1, -1] += copy_params(self.workload, tp)
            self._params[k] = p
        return p

    def layer_table(self, c: Candidate, placed: StageResidency | None = None) -> tuple[LayerTable, tuple]:
        """The candidate's per-layer costs; ``placed``: its residency (``residency``), None without
        ``memory_levels`` (and for what residency does not change: activations, workspace, memory)."""
        group = self.comm.tensor_group(Layout(c.placement, c.rank_order), c.tp, c.pp, c.dp, 0, 0)
        res = placed.residency if placed is not None else None
        knobs = (c.tp, self.micro_batch(c), c.sequence_parallel, c.recompute)
        return (self.layer_costs(c).table(*knobs, group, res, c.recompute_modules),
                (*knobs, group, res, c.recompute_modules, c.cp > 1))

    def layer_costs(self, c: Candidate) -> LayerCosts:
        """The layer costs ``c``'s passes are built from: with cp > 1 every attention core a flash kernel, as the
        plan runs ring attention (``plan.context.ring_fused``)."""
        if c.cp <= 1:
            return self.costs
        if self._ring_costs is None:
            fused = self.settings.fused | ring_fused(map(self.workload.layer_ops, self.workload.block_layers), c.cp)
            self._ring_costs = LayerCosts(self.workload, self.dev, replace(self.settings, fused=fused), self.comm)
        return self._ring_costs

    @staticmethod
    def micro_batch(c: Candidate) -> float:
        """Samples' worth of tokens one device runs per micro-batch: ``micro_batch / cp``, the plan's ``mb``
        (``plan.context``), which its passes, stored activations, residency and pipeline sends are sized by.
        The K/V ring itself is not in the layer table: candidates with cp > 1 are timed by the plan
        (``extended``); their memory and ZeRO shards are the plan's here."""
        return c.micro_batch / c.cp if c.cp > 1 else c.micro_batch

    def timed_chunks(self, c: Candidate, m: int, chunks: Chunks) -> Chunks:
        """The chunks to time ``c`` with (``chunks``: any of its chunks, for the memory they hold): with
        its residency (``memory_levels``), and on a grid every stage on its own tensor group."""
        placed = self.residency(c, m, chunks)
        if not self.per_stage:
            if placed is not None:
                chunks = self.chunks(*self.layer_table(c, placed), c.pp, c.interleave)
        else:
            chunks = self.stage_chunks(c, placed)
        return self.framework_chunks(c, chunks)

    def framework_chunks(self, c: Candidate, chunks: Chunks) -> Chunks:
        """``chunks`` with each pass led by the training framework's drains and, a forward, its batch
        broadcasts over the tensor group, as the plan leads them (``plan.train_step.add_drains``); inside a
        full-iteration CUDA graph (``OpSettings.full_iteration``) no drains and the batch's broadcast only. With
        scatter-gather pipelines, each pass that consumes a received tensor is led by its all-gather too
        (``plan.pipeline_p2p.add_receive_gathers``)."""
        gathers = self.pipeline_p2p(c).gather and c.pp > 1
        if not issues_kernels(self.dev.compute) and not gathers:
            return chunks
        group = self.comm.tensor_group(Layout(c.placement, c.rank_order), c.tp, c.pp, c.dp, 0, 0)
        batch = self.micro_batch(c) * (self.workload.tokens_per_sample + 1) * TOKEN_BYTES
        captured = self.settings.full_iteration
        k = (id(chunks), group, batch, c.pp, c.interleave, gathers)
        hit = self._framework.get(k)
        if hit is None:
            bcast = sum(collective(self.hw, "broadcast", list(group), n).time(self.hw)
                        for _, n in broadcasts(batch, captured)) if c.tp > 1 else 0.0
            gather = collective(self.hw, "all-gather", list(group), self.p2p_bytes(c) * c.tp).time(self.hw) \
                if gathers else 0.0
            fwd, bwd, vss = chunks.fwd.copy(), chunks.bwd.copy(), c.pp * c.interleave
            compute, log = self.dev.compute, TrainLogging.of(self.project.mapping)  # plan.train_logging
            for ch in range(c.interleave):
                for r in range(c.pp):
                    vs = ch * c.pp + r
                    fwd[ch, r] += (lead_seconds(compute, "F", vs, vss, bcast, captured, log)
                                   + gather_lead_seconds(compute, "F", vs, vss, gather, captured))
                    bwd[ch, r] += (lead_seconds(compute, "B", vs, vss, bcast, captured, log)
                                   + gather_lead_seconds(compute, "B", vs, vss, gather, captured))
            fb = (fwd.sum(axis=0) + bwd.sum(axis=0)).tolist()
            hit = self._framework[k] = (chunks, replace(chunks, fwd=fwd, bwd=bwd, fb=fb))  # holds the key's chunks
        return hit[1]

    def stage_chunks(self, c: Candidate, placed: StageResidency | None) -> Chunks:
        """Chunks whose stage r is timed on stage r's tensor group — its collectives' links and, on tiles
        sharing DRAM ports, its streams' rate — as the plan times each stage. A placement such as snake
        gives the stages of a grid differently shaped groups."""
        layout = Layout(c.placement, c.rank_order)
        res = placed.residency if placed is not None else None
        groups = [self.comm.tensor_group(layout, c.tp, c.pp, c.dp, r, 0) for r in range(c.pp)]
        knobs = (c.tp, self.micro_batch(c), c.sequence_parallel, c.recompute)
        rm = c.recompute_modules
        costs = self.layer_costs(c)
        first = self.chunks(costs.table(*knobs, groups[0], res, rm), (*knobs, groups[0], res, rm, c.cp > 1), c.pp,
                            c.interleave)
        if len(set(groups)) == 1:
            return first
        k = (*knobs, tuple(groups), res, rm, c.pp, c.interleave, c.cp > 1)
        ch = self._chunks.get(k)
        if ch is None:
            fwd, bwd = first.fwd.copy(), first.bwd.copy()
            sums: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}
            for r, g in enumerate(groups[1:], start=1):
                if g not in sums:
                    table = costs.table(*knobs, g, res, rm)
                    sums[g] = self._passes(table, c.pp, c.interleave)
                fwd[:, r], bwd[:, r] = sums[g][0][:, r], sums[g][1][:, r]
            fb = (fwd.sum(axis=0) + bwd.sum(axis=0)).tolist()
            ch = self._chunks[k] = replace(first, fwd=fwd, bwd=bwd, fb=fb)
        return ch

    # --- residency (mapping.memory_levels) ------------------------------------------------------------

    def stage_sizes(self, c: Candidate, m: int, chunks: Chunks, r: int = 0) -> dict[str, float]:
        """Bytes per device of each category on stage ``r``, as ``plan.residency.stage_sizes`` counts them
        (1F1B holds at most pp micro-batches' activations, plus the largest workspace)."""
        params = self.stage_params(c.tp, c.pp, c.interleave)[r]
        per = self.state_per(c.zero)
        acts = float(chunks.workspace[r]) + chunks.act_stage[r] * min(m, c.pp)
        return {
            "weights": params * per.weights + self.edge_bytes(c.tp, c.pp, c.interleave, c.zero)[0][r],
            "gradients": params * per.gradients,
            "optimizer": params * per.optimizer / (replicas(c) if c.zero >= 1 else 1),
            "activations": acts,
            "kv_cache": 0.0,
        }

    def residency(self, c: Candidate, m: int, chunks: Chunks) -> StageResidency | None:
        """``mapping.memory_levels`` resolved for ``c`` from its stage-0 sizes (the plan resolves each stage;
        with named levels they all agree, with ``auto`` stage 0 — the fullest of identical blocks — stands
        for all); None without ``memory_levels``."""
        if not self.levels:
            return None
        key = (c.tp, c.pp, c.dp, c.cp, c.micro_batch, c.interleave, c.recompute, c.recompute_modules,
               c.sequence_parallel, c.zero, m)
        hit = self._residency.get(key)
        if hit is None:
            device = self.comm.tensor_group(Layout(c.placement, c.rank_order), c.tp, c.pp, c.dp, 0, 0)[0]
            sizes = self.stage_sizes(c, m, chunks)
            refused = c.recompute is not Recompute.none or c.pp > 1  # as the plan (plan.residency.stage_residency)
            off_host = frozenset({"activations"}) if refused else frozenset()
            hit = self._residency[key] = resolve(self.project.mapping, self.hw, device, self.dev, sizes, off_host)
        return hit

    def fits(self, c: Candidate, m: int, chunks: Chunks) -> tuple[bool, float]:
        """(fits, bytes of its fullest memory): the device's memory, or with ``memory_levels`` each level
        against its own capacity (as the engines' one track per level), with the schedule's activation
        peak (``memory_parts``) beside the state each level holds."""
        placed = self.residency(c, m, chunks)
        if placed is None:
            need = self.memory(c, m, chunks)
            return need <= self.capacity, need
        per = self.state_per(c.zero)
        worst, need = 0.0, 0.0
        parts = zip(self.stages_to_check(c.pp), self.memory_parts(c, m, chunks), self.edge_weights(c), strict=True)
        for r, (params, acts), edge in parts:
            ws = float(chunks.workspace[r])  # beside the activations, or on the device when they are offloaded
            # activation offload keeps the last transformer layers' activations on the device, beside the workspace
            stored = chunks.act_stage[r]
            offloading = placed.placed.get("activations") == "host" and chunks.offloaded is not None and stored > 0
            share = chunks.offloaded[r] / stored if offloading else 1.0  # type: ignore[index]
            sizes = {
                "weights": params * per.weights + edge,
                "gradients": params * per.gradients,
                "optimizer": params * per.optimizer / (replicas(c) if c.zero >= 1 else 1),
                "activations": (acts - ws) * share,
                "kept": (acts - ws) * (1.0 - share),
                "workspace": ws,
            }
            used = dict.fromkeys(placed.levels, 0.0)
            for cat, nbytes in sizes.items():
                lv = workspace_level(placed) if cat in ("workspace", "kept") else placed.placed.get(cat)
                if lv in used:
                    used[lv] += nbytes
            for lv, info in placed.levels.items():
                fill = used[lv] / info.capacity if info.capacity > 0 else float("inf")
                if fill > worst:
                    worst, need = fill, used[lv]
        return worst <= 1.0, need

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

    def state_per(self, zero: int) -> StateBytes:
        """Model-state bytes per parameter under ZeRO stage ``zero`` (the plan's ``bytes_per_param``, with the
        bf16 parameters of an fp8 run unless ``fp8_param_gather`` drops them: ``perf.memory``)."""
        copy, per = self._param_copy[zero], self._per_zero[zero]
        return replace(per, weights=per.weights + copy) if copy else per

    def step_at(self, zero: int) -> AdamStep:
        """The fused Adam step of a candidate with ZeRO stage ``zero`` (``precision_fields``)."""
        return self._steps[zero]

    def state_bytes_per_param(self, zero: int, dp: int) -> float:
        p = self.state_per(zero)
        return p.weights + p.gradients + p.optimizer / (dp if zero >= 1 else 1)

    def memory(self, c: Candidate, m: int, chunks: Chunks) -> float:
        """Peak bytes of the fullest device (weights, gradients, optimizer, activations, workspace)."""
        per = self.state_bytes_per_param(c.zero, replicas(c))
        parts = self.memory_parts(c, m, chunks)
        return max(p * per + rest + e for (p, rest), e in zip(parts, self.edge_weights(c), strict=True))

    def stage_params(self, tp: int, pp: int, v: int) -> list[float]:
        return self._stage_params(tp, pp, v)

    @memo_method
    def stage_tensors(self, pp: int, v: int) -> list[float]:
        """Parameter tensors of each stage (``plan.grad_hooks.param_tensors``, the count the plan's logging flags
        read: ``plan.train_logging``); the tied copy is a shared parameter they skip."""
        rows = self.workload.tokens_per_sample
        per = np.array([sum(param_tensors(op, rows, False)[0] for op in ops) for ops in self.costs.ops], dtype=float)
        return self._sum(per, pp, v).sum(axis=0).tolist()

    @memo_method
    def _stage_params(self, tp: int, pp: int, v: int) -> list[float]:
        return self.params(tp, pp, v).sum(axis=0).tolist()

    @memo_method
    def edge_bytes(self, tp: int, pp: int, v: int, zero: int) -> tuple[list[float], list[float]]:
        """Per stage: the bytes per device its bf16 edge layers' weights hold, and the post-step gather moves,
        beyond the per-parameter figures of the rest (``state_per``, ``gather_bytes``): a parameter of such a
        layer is a plain bf16 one (``perf.formats``), 2 B held and gathered, where its fp8 twin holds 1 B + a
        2 B bf16 copy (1 B with ``fp8_param_gather``) and gathers 2 B (1 B). What ``build_plan`` counts op by op
        (``perf.memory.held_weight_bytes``, ``Plan.gather_bytes_per_param``); zeros without edge layers."""
        fmt = self.settings.formats
        if not fmt.bf16_layers:
            return [0.0] * pp, [0.0] * pp
        base = fmt.without_edge_layers()
        train, fp8_pg = self.project.run.mode is Mode.train, self.project.mapping.fp8_param_gather
        held, gathered = held_weight_bytes(train, fp8_pg, zero), gathered_weight_bytes(train, fp8_pg, zero)
        w, g = np.zeros(len(self.costs.ops)), np.zeros(len(self.costs.ops))
        for li, ops in zip(self.workload.layers, self.costs.ops, strict=True):
            if li.name not in fmt.bf16_layers:
                continue
            for op in ops:
                n = params_on_device([op], tp)
                w[li.index] += n * (held(fmt.for_op(op.name)) - held(base.for_op(op.name)))
                g[li.index] += n * (gathered(fmt.for_op(op.name)) - gathered(base.for_op(op.name)))
        return self._sum(w, pp, v).sum(axis=0).tolist(), self._sum(g, pp, v).sum(axis=0).tolist()

    def edge_weights(self, c: Candidate, zero: int | None = None) -> list[float]:
        """``edge_bytes``' held weights of each stage ``stages_to_check`` lists, in its order (``memory_parts``')."""
        held = self.edge_bytes(c.tp, c.pp, c.interleave, c.zero if zero is None else zero)[0]
        return [held[r] for r in self.stages_to_check(c.pp)]

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

    @memo_method
    def layer_counts(self, pp: int, v: int) -> np.ndarray:
        """Layers of each virtual stage, shaped (v, pp): its blocks, and the layers before (after) them on
        the first (last) one, as the plan splits them."""
        starts, ends = self._ranges(pp, v)
        out = (ends - starts).astype(float)
        out[0] += self.first_extra.size
        out[-1] += self.last_extra.size
        return out.reshape(v, pp)

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
