"""Layer → stage sums in the parallelism search: per-layer figures added up over the layers each stage holds.

The plan splits the workload's blocks into pp · v virtual stages, the earlier ones one block larger, with the
layers before the blocks on the first and those after them on the last (``plan.placement``); a candidate's
stages are sums (or maxima) of a layer table (``search.layer_table``) over those ranges, its passes with the
joins of consecutive layers (``LayerTable.joins``) or, with host waits inside layers, folded piece by piece.
The search asks for tens of thousands of (pp, v) splits of a few hundred tables, so the sums run on cached
prefix sums rather than layer by layer. ``Chunks`` holds one table's sums; each stage's parameters, parameter
tensors and bf16 edge layers' extra bytes are sums of the same kind.

Separate from ``estimate`` because it has one job of its own, which memory (``memory_fit``) and time
(``pipeline_hops``, ``tail``) are computed from. The ``Estimator`` inherits it; the attributes declared
below are the estimator's (``Estimator.__init__``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.perf.memory import gathered_weight_bytes, held_weight_bytes, params_on_device
from tilewright.engine.plan.activation_offload import offload_count
from tilewright.engine.plan.grad_hooks import param_tensors
from tilewright.engine.plan.memo import memo_method
from tilewright.engine.plan.tied import copy_params, tied_word_embedding
from tilewright.engine.search.layer_table import LayerCosts, LayerTable, fold
from tilewright.engine.search.op_settings import OpSettings
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


class StageSums:
    """Sums of layer tables and per-layer figures over the layers of each (virtual) stage of a candidate."""

    project: Project
    workload: WorkloadGraph
    settings: OpSettings
    costs: LayerCosts
    blocks: np.ndarray  # the blocks' layer indices, in order
    first_extra: np.ndarray  # the layers before the blocks (on the first virtual stage)
    last_extra: np.ndarray  # the layers after them (on the last)
    order: np.ndarray  # every layer in plan order
    order_klass: np.ndarray  # ``LayerCosts.klass`` of each layer in plan order
    _joins: dict[int, tuple[LayerTable, tuple[np.ndarray, np.ndarray] | None]]  # by id(table)
    _chunks: dict[tuple, Chunks]
    _params: dict[tuple[int, int, int], np.ndarray]
    _prefixes: dict[int, tuple[np.ndarray, np.ndarray, float, float]]  # keyed by id, holds the array
    _orders: dict[int, tuple]  # ``_in_order``'s, keyed by id, holds the array

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
        blocks, first, last = self._in_order(values)
        out = np.maximum.reduceat(blocks, starts)
        if first is not None:
            out[0] = max(out[0], first)
        if last is not None:
            out[-1] = max(out[-1], last)
        return out.reshape(v, pp).max(axis=0)

    def _in_order(self, values: np.ndarray) -> tuple[np.ndarray, np.floating | None, np.floating | None]:
        """The blocks' values in order, and the largest of the layers before and after them (None: no such
        layers): one table's, whatever (pp, v) splits it, so gathered once. Keyed by id, holds the array."""
        k = id(values)
        hit = self._orders.get(k)
        if hit is None or hit[0] is not values:
            first = values[self.first_extra].max() if self.first_extra.size else None
            last = values[self.last_extra].max() if self.last_extra.size else None
            hit = self._orders[k] = (values, values[self.blocks], first, last)
        return hit[1], hit[2], hit[3]

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
        lo, inner_end, end_pair, start_pair = self._join_index(pp, v)
        inside = pre[inner_end] - pre[lo]  # the pairs (k, k+1) with lo ≤ k < hi − 1
        # the pair ending each pass (``LayerTable.ends``): forward and recompute (hi − 2, hi − 1), backward (lo,
        # lo + 1); a stage of one layer reads ``last``'s row of zeros
        at_end, at_start = last[end_pair], last[start_pair]
        f = inside[:, 0] + at_end[:, 0]
        b = inside[:, 1] + at_start[:, 1] + at_end[:, 2]
        return fwd + f.reshape(v, pp), bwd + b.reshape(v, pp)

    @memo_method
    def _join_index(self, pp: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Where ``_passes`` reads the joins of each virtual stage, in plan order: its first position lo, the
        end of its inside pairs and the pairs that end its passes (``LayerTable.ends``: forward and recompute
        (hi − 2, hi − 1), backward (lo, lo + 1)), or, for a stage of one layer, ``_join_prefix``'s row of zeros
        after the last pair — the split's, whatever table it sums, so computed once per (pp, v)."""
        starts, ends = self._ranges(pp, v)
        lo = starts + self.first_extra.size
        hi = ends + self.first_extra.size
        lo[0] = 0  # the first virtual stage also runs the layers before the blocks, the last those after
        hi[-1] = self.order.size
        top = self.order.size - 2  # the last pair's position; ``_join_prefix``'s row of zeros follows it
        two = hi - lo >= 2
        end_pair = np.where(two, np.clip(hi - 2, 0, top), top + 1)
        start_pair = np.where(two, np.clip(lo, 0, top), top + 1)
        return lo, np.maximum(hi - 1, lo), end_pair, start_pair

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
                joined = (np.vstack((np.zeros((1, 2)), np.cumsum(pairs, axis=0))), np.vstack((last, np.zeros((1, 3)))))
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
        starts = self._ranges(pp, v)[0]
        pre, _, _ = self._prefix(act)
        return (pre[starts + self._offload_counts(pp, v)] - pre[starts]).reshape(v, pp).sum(axis=0).tolist()

    @memo_method
    def _offload_counts(self, pp: int, v: int) -> np.ndarray:
        """``offload_count`` of each virtual stage's blocks: the split's, whatever table it sums (the walk asks
        for tens of thousands of chunks, each of which summed this layer by layer)."""
        starts, ends = self._ranges(pp, v)
        asked = self.project.mapping.offload_layers
        return np.array([offload_count(int(b - a), asked) for a, b in zip(starts, ends, strict=True)], dtype=int)

    @memo_method
    def layer_counts(self, pp: int, v: int) -> np.ndarray:
        """Layers of each virtual stage, shaped (v, pp): its blocks, and the layers before (after) them on
        the first (last) one, as the plan splits them."""
        starts, ends = self._ranges(pp, v)
        out = (ends - starts).astype(float)
        out[0] += self.first_extra.size
        out[-1] += self.last_extra.size
        return out.reshape(v, pp)

    # --- per stage ------------------------------------------------------------------------------------

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
        w_stage, g_stage = self._sum(w, pp, v).sum(axis=0), self._sum(g, pp, v).sum(axis=0)
        word = tied_word_embedding(self.workload) if pp > 1 else None
        if word is not None:  # the last stage's copy of a tied embedding, in the word embedding's format (``params``)
            n = copy_params(self.workload, tp)
            w_stage[-1] += n * (held(fmt.for_op(word.name)) - held(base.for_op(word.name)))
            g_stage[-1] += n * (gathered(fmt.for_op(word.name)) - gathered(base.for_op(word.name)))
        return w_stage.tolist(), g_stage.tolist()
