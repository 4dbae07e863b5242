"""A candidate's chunks in the parallelism search: the layer costs it runs, and what the plan adds to its passes.

A candidate's layer table is keyed by its tensor group, micro-batch per device (``micro_batch / cp``),
sequence parallelism, recomputation and, with ``mapping.memory_levels``, its residency; with cp > 1 every
attention core is a flash kernel (``plan.context.flash_fused``). The chunks it is timed with are that table's
stage sums (``stage_sums``), on a grid each stage on its own tensor group (placements such as snake shape the
stages' groups differently), and each pass led by the training framework's drains and batch broadcasts and,
with scatter-gather pipelines, the received tensor's all-gather, as the plan leads them (``plan.train_step``,
``plan.pipeline_p2p``).

Separate from ``estimate`` because it has one job of its own: turning a candidate into the chunks the
closed form (``pipeline_hops``) and the tail (``tail``) time. The ``Estimator`` inherits it; the attributes
and methods declared below are the estimator's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.project import Project
from tilewright.engine.perf.collectives import collective
from tilewright.engine.perf.device import DeviceModel, issues_kernels
from tilewright.engine.plan.context import flash_fused
from tilewright.engine.plan.framework_host import host_framework
from tilewright.engine.plan.pipeline_p2p import PipelineP2P, gather_lead_seconds
from tilewright.engine.plan.residency import StageResidency
from tilewright.engine.plan.train_logging import TrainLogging
from tilewright.engine.plan.train_step import broadcasts, lead_seconds
from tilewright.engine.search.comm import CommModel, Layout
from tilewright.engine.search.layer_table import LayerCosts, LayerTable
from tilewright.engine.search.op_settings import OpSettings
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.search.parallel.stage_sums import Chunks
from tilewright.engine.workloads.graph import WorkloadGraph


class CandidateChunks:
    """The layer table and the timed chunks of a candidate."""

    project: Project
    hw: HardwareGraph
    workload: WorkloadGraph
    settings: OpSettings
    dev: DeviceModel
    comm: CommModel
    costs: LayerCosts
    per_stage: bool  # stages' tensor groups differ in shape (a grid): each stage is timed on its own
    _ring_costs: LayerCosts | None  # candidates with cp > 1 (``layer_costs``)
    _framework: dict[tuple, tuple[Chunks, Chunks]]  # plan.train_step's pass leads, by chunks
    _chunks: dict[tuple, Chunks]

    if TYPE_CHECKING:  # the Estimator's

        def chunks(self, table: LayerTable, key: tuple, pp: int, v: int) -> Chunks: ...

        def _passes(self, table: LayerTable, pp: int, v: int) -> tuple[np.ndarray, np.ndarray]: ...

        def residency(self, c: Candidate, m: int, chunks: Chunks) -> StageResidency | None: ...

        def pipeline_p2p(self, c: Candidate) -> PipelineP2P: ...

        def p2p_bytes(self, c: Candidate) -> float: ...

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
        plan runs ring attention (``plan.context.flash_fused``)."""
        if c.cp <= 1:
            return self.costs
        if self._ring_costs is None:
            blocks = map(self.workload.layer_ops, self.workload.block_layers)
            fused = self.settings.fused | flash_fused(blocks, c.cp, self.settings.fused)
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
        mb, seq = self.micro_batch(c), self.workload.tokens_per_sample
        captured = self.settings.full_iteration
        k = (id(chunks), group, mb, c.pp, c.interleave, gathers)
        hit = self._framework.get(k)
        if hit is None:
            compute, log = self.dev.compute, TrainLogging.of(self.project.mapping)  # plan.train_logging
            fw = host_framework(self.settings.host_framework, compute, self.settings.train)  # plan.framework_host
            gather = collective(self.hw, "all-gather", list(group), self.p2p_bytes(c) * c.tp).time(self.hw) \
                if gathers else 0.0
            fwd, bwd, vss = chunks.fwd.copy(), chunks.bwd.copy(), c.pp * c.interleave
            sent: dict[tuple[float, ...], float] = {}  # get_batch's broadcasts depend on the stage: timed once each
            for ch in range(c.interleave):
                for r in range(c.pp):
                    vs = ch * c.pp + r
                    sizes = tuple(n for _, n in broadcasts(mb, seq, captured, fw, vs, vss)) if c.tp > 1 else ()
                    if sizes not in sent:
                        sent[sizes] = sum(collective(self.hw, "broadcast", list(group), n).time(self.hw) for n in sizes)
                    bcast = sent[sizes]
                    fwd[ch, r] += (lead_seconds(compute, "F", vs, vss, bcast, captured, log, fw)
                                   + gather_lead_seconds(compute, "F", vs, vss, gather, captured))
                    bwd[ch, r] += (lead_seconds(compute, "B", vs, vss, bcast, captured, log, fw)
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
