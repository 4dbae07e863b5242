"""What one serving iteration costs: a mixed batch of prefill chunks and decode steps on the project's devices.

Derived from the engine's own pricing, not a second roofline: the ops of
``workloads.transformer_inference.inference_graph`` priced by ``plan.passes.forward_pass`` and timed
by ``plan.timing.pass_parts`` (uncontended roofline, DRAM streams, tensor-parallel collectives) on each
pipeline stage of the plan ``simulate.make_plan`` builds — the GPU and the tile-level (grid) cost model alike.

A batch's ops split three ways, as Vidur's predictor splits them (Agrawal et al., MLSys 2024):

- per-token ops (projections, MLP, norms, embedding gathers and the collectives between them) depend on
  the batch's total new tokens N only: an op over N tokens of one sequence costs what it costs over one
  token of N sequences (same GEMM rows, same bytes). Each stage's pass is priced at a few N (every N up to
  64, then steps of 6 %) and interpolated linearly, so thousands of iterations cost a table look-up;
- attention (and the materialised softmax) depends on each sequence's (new tokens, context): its FLOPs,
  activations and KV-cache reads are summed over the batch into one op per layer (one varlen /
  paged-attention kernel per layer, as vLLM runs them) and priced exactly each iteration;
- the logits GEMM runs once per sampled row (the last token of a finished prompt, every decode sequence,
  the k + 1 rows of a speculative verify step).

The parts are put back together segment by segment (a segment is the work between two tensor-parallel
collectives), because a segment's time is not a sum: it lasts its device time or the host's time issuing
its kernels, whichever is longer, and at least its DRAM stream. The table keeps each segment's device time
and DRAM bytes with the attention and logits ops at size zero; which segments hold those ops is found once
by giving them a probe cost. For a batch that ``tilewright run`` also runs (a prefill of equal prompts, a
decode step), the result is the run's pass time exactly at the table's points, and within the
interpolation error between them (≲ 1 % on GPUs, up to ~3 % on a grid of cores, whose 32-row tiles make
the cost a staircase in N).

A runtime that prefills prompts one after another (tt-transformers: ``PrefillOrder.sequential``) runs each prompt
chunk of an iteration as its own pass, then its decode steps as one; on a 2-D mesh whose runtime calls other
collectives in its decode program (``mapping.tp_axes_collectives`` 'tt-transformers'), decode-only iterations are
priced in the decode pass's context (its users padded to tiles), as ``run`` prices them.

Expert parallelism (``mapping.ep`` > 1, ``plan.served_experts``): an iteration is one ep rank's batch, its MoE
layers routing ep × its tokens (the local experts they reach, the two all-to-alls per layer in the per-token
table's segments), as ``run`` prices a request's passes; every rank is taken to run the same batch.

Pipeline parallelism (``pp`` > 1): the batch is split into ``m = min(pp, sequences)`` micro-batches that
follow each other through the stages, and the iteration's period is the steady state of that pipeline,
max(one micro-batch's trip through every stage and send, m × the busiest stage) — a decode step's time in
``tilewright run``. With one micro-batch (pp = 1, or one sequence) an iteration is exactly a ``run`` pass.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from tilewright.engine.ir.common import PrefillOrder, dtype_bytes
from tilewright.engine.ir.ops import LayerKind, Op, OpKind
from tilewright.engine.ir.project import AttentionKind
from tilewright.engine.ir.workload import BertSpec, TransformerDims
from tilewright.engine.plan.group_comm import scaled
from tilewright.engine.plan.inference_phases import host_sampling_s, kv_dtype, pass_context, sampling_tile
from tilewright.engine.plan.launch import InferencePass, graphed, serving_device
from tilewright.engine.plan.passes import ChunkPass, PassContext, forward_pass
from tilewright.engine.plan.plan import Plan
from tilewright.engine.plan.served_experts import served_layers
from tilewright.engine.serving.config import ServingSetupError
from tilewright.engine.serving.grid_attention import GridAttention, shaped
from tilewright.engine.workloads.transformer_inference import inference_graph, kv_cache_bytes, sampling_ops

ATTENTION_KINDS = (OpKind.attention, OpKind.softmax)  # ops whose cost depends on the context
FIELDS = ("flops", "in_elems", "out_elems", "cache_elems", "saved_elems")
ZERO = dict.fromkeys((*FIELDS, "params"), 0.0) | {"gemm": None}  # an op that moves with the batch, at size 0
PROBE = ZERO | {"flops": 1e9}  # the same op with a known cost: finds the segments that hold it
EXACT_TOKENS = 64  # the per-token table is exact up to here (decode batches), then geometric
TABLE_STEP = 1.06  # ratio between table points past EXACT_TOKENS (interpolation error ≲ 0.2 %)


@dataclass(frozen=True, slots=True)
class Work:
    """One sequence's share of an iteration: ``tokens`` new tokens attending over ``context`` keys (the new
    ones last), and ``logits`` rows sampled (1 for a decode step or a prompt's last chunk, 0 for an earlier
    chunk, k + 1 for a speculative verify step)."""

    tokens: int
    context: int
    logits: int


def decode(context: int) -> Work:
    return Work(1, context, 1)


class ServingModelError(ServingSetupError):
    """The project's model cannot be served (not a decoder transformer, or its passes cannot be priced)."""

    def __init__(self, reason: str) -> None:
        super().__init__("workload", reason)


def _stage_layers(plan: Plan, r: int) -> list[int]:
    st = plan.stages[r]
    return [i for c in sorted(st.chunk_layers) for i in st.chunk_layers[c]]


def stage_context(plan: Plan, r: int, micro_batch: int, kind: InferencePass = "prefill") -> PassContext:
    """The pass context ``plan.inference_phases`` prices a stage's inference pass of ``kind`` with (the KV cache
    in its own format, 2-D tensor parallelism's collectives), on the device as a serving runtime drives it: its
    host costs kept, a captured graph's absence of host dispatch being decided per iteration
    (``IterationCostModel.stage_seconds``)."""
    return dataclasses.replace(pass_context(plan, r, micro_batch, kind), dev=serving_device(plan.stages[r].dev))


class IterationCostModel:
    """Seconds of one iteration of a mixed batch on ``plan``'s pipeline (one tensor group per stage).
    ``max_tokens`` bounds the per-token table (the scheduler's token budget)."""

    def __init__(self, plan: Plan, max_tokens: int, kind: InferencePass = "prefill") -> None:
        dims = plan.project.workload
        if not isinstance(dims, TransformerDims) or isinstance(dims, BertSpec):
            raise ServingModelError(
                "serving needs a decoder transformer (GPT, LLaMA); this workload has no token-by-token decode"
            )
        self.plan, self.dims = plan, dims
        self.max_tokens = max(int(max_tokens), 1)
        self.fused = plan.project.run.inference.attention == AttentionKind.fused
        self.pp = plan.pp
        self.kv_elem_bytes = dtype_bytes(kv_dtype(plan))
        self._contexts = [stage_context(plan, r, 1, kind) for r in range(self.pp)]
        m = plan.project.mapping
        # tt-transformers runs other collectives in its decode program (``plan.tp_placement``): decode-only
        # iterations are priced by a second model built in the decode pass's context, on first use
        self._decode_differs = (
            kind == "prefill" and m.tp_axes is not None and m.tp_axes_collectives == "tt-transformers"
        )
        self._decode_model: IterationCostModel | None = None
        order = plan.project.run.inference.prefill or plan.stages[0].dev.compute.runtime_prefill
        self.sequential = order == PrefillOrder.sequential  # prompts prefilled one after another (tt-transformers)
        # captured graphs (``plan.launch``): which iterations issue their kernels without host dispatch
        self._graphed = {k: graphed(plan.stages[0].dev.compute, k) for k in ("prefill", "decode")}
        self.runtime_step_s = plan.stages[0].dev.compute.runtime_step_s
        self._send_tokens = dims.seq_len * plan.micro_batch
        self.ep = plan.ep  # expert ranks whose tokens a MoE layer routes together (``plan.served_experts``)
        template = inference_graph(dims, 1, 1, 1, self.fused, routed_ranks=self.ep)
        self._kinds = {li.index: li.kind for li in template.layers}
        self.attention_layers = np.array(
            [sum(1 for i in _stage_layers(plan, r) if self._kinds[i] is LayerKind.transformer) for r in range(self.pp)],
            dtype=float,
        )
        one_layer = inference_graph(dims.model_copy(update={"layers": 1}), 1, 1, 1, self.fused)
        self._attn_ops = [op for op in one_layer.ops() if op.kind in ATTENTION_KINDS]
        self._head_ops = [op for op in template.ops() if self._variable(op) == "logits"]
        self._head_stage = self.pp - 1
        self._logit_cache: dict[tuple[int, int], tuple[float, float]] = {}
        self._decode_fields = (self._fields(1, 1), self._fields(1, 2))
        self._classes, self._reps = self._stage_classes()
        self._rows: dict[int, list[_Row]] = {}
        self._structure = [self._segment_structure(r, template) for r in range(self.pp)]
        self._zero_attn = [self._attention_parts(q, None) for q in self._reps]
        self._grid_attn = {  # grid devices split attention by its head structure (``grid_attention``)
            k: GridAttention(self._contexts[q], self._one_sequence_attention, _device, self._zero_attn[k])
            for k, q in enumerate(self._reps)
            if shaped(self._attn_ops, self._contexts[q])
        }
        self._zero_logits = self._logit_parts(0)
        self._sampling_tile = sampling_tile(plan.stages[-1].dev.compute)  # 0: no on-device sampling tail
        self._sampling_cache: dict[int, float] = {}
        self._points = self._table_points()
        self._stage_shape = self._shapes()
        self._splice = all(blocks > 0 for _, blocks, _ in self._stage_shape) and self._splice_agrees()

    # --- which ops move with the batch, and where they sit ----------------------------------------------------

    def _variable(self, op: Op) -> str:
        """ "attention" for ops priced per sequence's context, "logits" for the logits GEMM, "" otherwise."""
        if op.kind in ATTENTION_KINDS:
            return "attention"
        if self._kinds.get(op.layer) is LayerKind.head and op.kind is OpKind.matmul:
            return "logits"
        return ""

    def _stage_pass(self, r: int, graph, replace: dict[str, dict], tokens: int = 1) -> ChunkPass:
        """Stage ``r``'s pass of ``graph`` (``tokens`` new tokens) with the attention and logits ops' fields
        replaced (``replace``: variable kind → field updates)."""
        layers = []
        for i in _stage_layers(self.plan, r):
            ops = [op.model_copy(update=replace[v]) if (v := self._variable(op)) else op for op in graph.layer_ops(i)]
            layers.append(ops)
        return forward_pass(served_layers(layers, self.ep), self._context(r, tokens))

    def _context(self, r: int, tokens: int) -> PassContext:
        """Stage ``r``'s context for a pass of ``tokens`` new tokens (one sample of the table's graph): a decode
        step's are its users, whose rows tt-transformers pads to tiles (``tp_placement.axis_rows``)."""
        ctx = self._contexts[r]
        return dataclasses.replace(ctx, tp_rows=tokens) if ctx.tp_decode else ctx

    def _segment_structure(self, r: int, graph) -> _Structure:
        """Per segment of stage ``r``'s pass: host seconds issuing its kernels, and how many attention layers
        and logits GEMMs it holds (found by giving those ops a probe cost and seeing which segments grow)."""
        base = self._stage_pass(r, graph, {"attention": ZERO, "logits": ZERO})
        counts = []
        for kind in ("attention", "logits"):
            probe = self._stage_pass(r, graph, {"attention": ZERO, "logits": ZERO} | {kind: PROBE})
            if len(probe.segments) != len(base.segments):
                raise ServingModelError("the pass's segments changed with its ops' sizes")
            delta = np.array([_device(b) - _device(a) for a, b in zip(base.segments, probe.segments, strict=True)])
            unit = delta.max() if delta.size else 0.0
            if kind == "attention":
                layers = self.attention_layers[r] * (1 if self._attn_ops else 0)
                unit = delta.sum() / layers if layers else unit
            counts.append(np.rint(delta / unit) if unit > 0 else np.zeros(len(base.segments)))
        host = np.array([getattr(s, "host_s", 0.0) for s in base.segments])
        return _Structure(host, counts[0], counts[1])

    # --- the per-token table ---------------------------------------------------------------------------------

    def _table_points(self) -> list[int]:
        pts = list(range(1, min(EXACT_TOKENS, self.max_tokens) + 1))
        n = float(pts[-1])
        while pts[-1] < self.max_tokens:
            n = max(n * TABLE_STEP, pts[-1] + 1)
            pts.append(min(int(round(n)), self.max_tokens))
        return pts

    def _row(self, n: int) -> list[_Row]:
        """Per stage, per segment: the per-token ops of ``n`` new tokens (attention and logits at zero)."""
        hit = self._rows.get(n)
        if hit is None:
            hit = self._rows[n] = self._spliced_row(n) if self._splice else self._full_row(n)
        return hit

    def _full_row(self, n: int) -> list[_Row]:
        """The stages' passes of the whole model at ``n`` tokens."""
        graph = inference_graph(self.dims, n, n, 1, self.fused, routed_ranks=self.ep)
        out = []
        for r in range(self.pp):
            ps = self._stage_pass(r, graph, {"attention": ZERO, "logits": ZERO}, n)
            out.append(self._row_of(r, ps, n))
        return out

    def _row_of(self, r: int, ps: ChunkPass, n: int) -> _Row:
        comm = sum(self.plan.tp_time(r, 0, *s.comm) for s in ps.segments if s.comm)
        return _Row(
            np.array([_device(s) for s in ps.segments]),
            np.array([s.dram_bytes for s in ps.segments]),
            float(comm),
            self._send(r, n),
        )

    def _spliced_row(self, n: int) -> list[_Row]:
        """The stages' passes built from a one-block and a two-block model: every transformer block is the
        same, so a stage of L blocks repeats the two-block pass's middle segments (from the first block's
        last collective to the second's) L − 1 times; without collectives in a block its one segment grows
        by the second block's share L − 1 times."""
        graphs = {k: inference_graph(self.dims.model_copy(update={"layers": k}), n, n, 1, self.fused,
                                     routed_ranks=self.ep) for k in (1, 2)}
        out = []
        for r in range(self.pp):
            pre, blocks, post = self._stage_shape[r]
            rows = {}
            for k, g in graphs.items():
                by_kind = {li.kind: [] for li in g.layers}
                for li in g.layers:
                    by_kind[li.kind].append(
                        [
                            op.model_copy(update=ZERO) if self._variable_in(op, li.kind) else op
                            for op in g.layer_ops(li.index)
                        ]
                    )
                layers = [by_kind[kind][0] for kind in pre] + by_kind[LayerKind.transformer][: min(k, blocks)]
                layers += [by_kind[kind][0] for kind in post]
                rows[k] = self._row_of(r, forward_pass(served_layers(layers, self.ep), self._context(r, n)), n)
            out.append(_splice(rows[1], rows[2], blocks))
        return out

    def _variable_in(self, op: Op, kind: LayerKind) -> bool:
        return op.kind in ATTENTION_KINDS or (kind is LayerKind.head and op.kind is OpKind.matmul)

    def _shapes(self) -> list[tuple[list[LayerKind], int, list[LayerKind]]]:
        """Per stage: the layer kinds before its blocks, how many blocks, the kinds after."""
        out = []
        for r in range(self.pp):
            kinds = [self._kinds[i] for i in _stage_layers(self.plan, r)]
            blocks = [k for k in kinds if k is LayerKind.transformer]
            first = kinds.index(LayerKind.transformer) if blocks else len(kinds)
            pre, post = kinds[:first], kinds[first + len(blocks) :]
            if kinds[first : first + len(blocks)] != blocks or any(k is LayerKind.transformer for k in pre + post):
                raise ServingModelError(f"stage {r}: its blocks are not contiguous")
            out.append((pre, len(blocks), post))
        return out

    def _splice_agrees(self) -> bool:
        """Whether spliced passes equal the whole model's at a few token counts (they do unless a pass
        couples blocks in a way the splice does not know)."""
        for n in (1, 3):
            for a, b in zip(self._spliced_row(n), self._full_row(n), strict=True):
                same = a.device.shape == b.device.shape and np.allclose(a.device, b.device, rtol=1e-9, atol=0)
                if not (same and np.allclose(a.dram, b.dram, rtol=1e-9) and math.isclose(a.comm, b.comm, rel_tol=1e-9)):
                    return False
        return True

    def _send(self, r: int, tokens: int) -> float:
        """Stage ``r``'s pipeline send of ``tokens`` tokens' activations (``InferencePhases.send``'s scaling)."""
        if r >= self.pp - 1:
            return 0.0
        return scaled(self.plan.p2p(r, 0, False), tokens / self._send_tokens).time(self.plan.hw)

    def per_token(self, n: int) -> list[_Row]:
        """Per stage: the per-token ops of ``n`` tokens: exact when blocks can be spliced (cheap), else
        interpolated between the table's points."""
        if self._splice or n > self._points[-1]:
            return self._row(n)
        i = bisect.bisect_left(self._points, max(n, 1))
        hi = self._points[i]
        if hi == n:
            return self._row(n)
        lo = self._points[i - 1]
        w = (n - lo) / (hi - lo)
        return [a.mix(b, w) for a, b in zip(self._row(lo), self._row(hi), strict=True)]

    # --- attention and logits ---------------------------------------------------------------------------------

    def _stage_classes(self) -> tuple[list[int], list[int]]:
        """Stages whose ops cost the same (same device model and residency) share one attention pricing."""
        reps: list[int] = []
        out = []
        for r in range(self.pp):
            st = self.plan.stages[r]
            for k, q in enumerate(reps):
                other = self.plan.stages[q]
                if other.dev == st.dev and other.residency == st.residency:
                    out.append(k)
                    break
            else:
                reps.append(r)
                out.append(len(reps) - 1)
        return out, reps

    @lru_cache(maxsize=8192)  # noqa: B019 - one model per simulation, freed with it
    def _fields(self, tokens: int, context: int) -> tuple[tuple[float, ...], ...]:
        """Per attention-dependent op of one layer: its FLOPs and element counts for one sequence."""
        graph = inference_graph(self.dims.model_copy(update={"layers": 1}), tokens, context, 1, self.fused)
        return tuple(tuple(getattr(op, f) for f in FIELDS) for op in graph.ops() if op.kind in ATTENTION_KINDS)

    @lru_cache(maxsize=8192)  # noqa: B019 - one model per simulation, freed with it
    def _one_sequence_attention(self, tokens: int, context: int) -> tuple[Op, ...]:
        """One sequence's attention ops of one layer, with their head structure (``Op.attention``)."""
        graph = inference_graph(self.dims.model_copy(update={"layers": 1}), tokens, context, 1, self.fused)
        return tuple(op for op in graph.ops() if op.kind in ATTENTION_KINDS)

    def attention_fields(self, work: Sequence[Work]) -> np.ndarray:
        """Summed fields (ops × FIELDS) of the batch's attention: decode steps by their affine dependence
        on the context, other work sequence by sequence."""
        one, two = (np.array(f) for f in self._decode_fields)
        total = np.zeros_like(one)
        decodes = 0
        context_sum = 0
        for w in work:
            if w.tokens == 1:
                decodes += 1
                context_sum += w.context
            else:
                total += np.array(self._fields(w.tokens, w.context))
        if decodes:
            total += decodes * one + (context_sum - decodes) * (two - one)
        return total

    def _attention_parts(self, q: int, fields: np.ndarray | None) -> tuple[float, float]:
        """(device seconds, DRAM bytes) of one layer's merged attention on class representative ``q``."""
        if fields is None:
            merged = [op.model_copy(update=ZERO) for op in self._attn_ops]
        else:
            merged = [
                op.model_copy(update=dict(zip(FIELDS, map(float, row), strict=True)))
                for op, row in zip(self._attn_ops, fields, strict=True)
            ]
        ps = forward_pass([merged], self._contexts[q])
        return sum(_device(s) for s in ps.segments), sum(s.dram_bytes for s in ps.segments)

    def _logit_parts(self, rows: int) -> tuple[float, float]:
        """(device seconds, DRAM bytes) of the logits GEMM for ``rows`` sampled rows on the last stage."""
        hit = self._logit_cache.get((rows, 0))
        if hit is None:
            r = self._head_stage
            if rows <= 0:
                ops, ctx = [op.model_copy(update=ZERO) for op in self._head_ops], self._contexts[r]
            else:
                ops, ctx = self._head_ops, dataclasses.replace(self._contexts[r], micro_batch=rows)
            ps = forward_pass([ops], ctx)
            hit = self._logit_cache[(rows, 0)] = (
                sum(_device(s) for s in ps.segments),
                sum(s.dram_bytes for s in ps.segments),
            )
        return hit

    def _sampling_s(self, rows: int) -> float:
        """Seconds of the runtime's sampling after a decode iteration of ``rows`` sequences on the last stage
        (``Compute.runtime_sampling``): the ops ``transformer_inference.sampling_ops`` appends to a decode step
        and the logits' all-gather, timed as ``tilewright run`` times them (the head's pass with and without
        them), then for more than one sequence the host's read of the logits (``host_sampling_s``); 0 when the
        runtime samples elsewhere."""
        if not self._sampling_tile or rows <= 0 or not self._head_ops:
            return 0.0
        hit = self._sampling_cache.get(rows)
        if hit is None:
            r, logits = self._head_stage, self._head_ops[-1]
            ctx = dataclasses.replace(self._contexts[r], micro_batch=rows)
            tail = forward_pass([[logits, *sampling_ops(logits, self.dims.vocab, rows, self._sampling_tile)]], ctx)
            bare = forward_pass([[logits]], ctx)
            comm = sum(self.plan.tp_time(r, 0, *s.comm) for s in tail.segments if s.comm)
            host = host_sampling_s(self.plan.stages[r].dev.compute, self.dims.vocab, rows)
            hit = self._sampling_cache[rows] = (
                sum(_device(s) for s in tail.segments) - sum(_device(s) for s in bare.segments) + comm + host
            )
        return hit

    # --- one iteration ----------------------------------------------------------------------------------------

    def stage_seconds(self, work: Sequence[Work]) -> np.ndarray:
        """Per stage: seconds of one micro-batch made of ``work`` (its send to the next stage included), with
        the runtime's step and sampling tail. A runtime that prefills sequentially (``PrefillOrder``) runs each
        prompt chunk as its own pass, then the decode (and speculative verify) steps together, as ``run``
        prefills a batch in turn."""
        if self._decode_differs and work and all(w.tokens == 1 for w in work):
            if self._decode_model is None:
                self._decode_model = IterationCostModel(self.plan, self.max_tokens, "decode")
            return self._decode_model.stage_seconds(work)
        if self.sequential:  # a prompt chunk samples at most its last row; decode and verify steps sample every row
            steps = [w for w in work if w.logits == w.tokens]
            groups = [[w] for w in work if w.logits != w.tokens] + ([steps] if steps else [])
        else:
            groups = [list(work)]
        out = sum((self._pass_seconds(g) for g in groups), np.zeros(self.pp))
        if all(w.tokens == w.logits == 1 for w in work):  # a decode step: the runtime's sampling tail, if on the device
            out[self._head_stage] += self._sampling_s(len(work))
        out[0] += self.runtime_step_s  # the runtime's host work for the iteration (``with_runtime_step``)
        return out

    def _pass_seconds(self, work: Sequence[Work]) -> np.ndarray:
        """Per stage: seconds of one pass over ``work``. Each segment lasts as the engine times it
        (``plan.passes.Segment.close``, ``plan.timing``): its device time or the host's time issuing its
        kernels, whichever is longer (device time alone when the runtime replays the iteration as a captured
        graph: decode-only batches, ``plan.launch.graphed``), and at least its DRAM stream; then its
        collective."""
        rows = self.per_token(sum(w.tokens for w in work))
        fields = self.attention_fields(work) if len(self._grid_attn) < len(self._reps) else None
        attn = [
            self._grid_attn[k].parts(work) if k in self._grid_attn else self._attention_parts(q, fields)
            for k, q in enumerate(self._reps)
        ]
        attn = [(a[0] - z[0], a[1] - z[1]) for a, z in zip(attn, self._zero_attn, strict=True)]
        lg = self._logit_parts(sum(w.logits for w in work))
        lg = (lg[0] - self._zero_logits[0], lg[1] - self._zero_logits[1])
        out = np.zeros(self.pp)
        graph = self._graphed["decode" if all(w.logits == w.tokens for w in work) else "prefill"]
        for r in range(self.pp):
            row, st = rows[r], self._structure[r]
            a_dev, a_dram = attn[self._classes[r]]
            device = row.device + st.attention * a_dev + st.logits * lg[0]
            busy = device if graph else np.maximum(device, st.host)
            dram = row.dram + st.attention * a_dram + st.logits * lg[1]
            if dram.any():
                busy = np.maximum(busy, dram * self.plan.dram_seconds_per_byte(r))
            out[r] = busy.sum() + row.comm + row.send
        return out

    def iteration_seconds(self, work: Sequence[Work]) -> float:
        """Seconds of one iteration (the pipeline's steady-state period when pp > 1)."""
        if not work:
            return 0.0
        groups = split_micro_batches(work, self.pp)
        trips, busiest = [], 0.0
        for g in groups:
            t = self.stage_seconds(g)
            trips.append(float(t.sum()))
            busiest += float(t.max())
        return max(max(trips), busiest if len(groups) > 1 else 0.0)

    def kv_bytes_per_token(self) -> list[float]:
        """Per stage, per device: KV-cache bytes one sequence adds per token (unpaged)."""
        tp = self.plan.project.mapping.tp
        return [kv_cache_bytes(self.dims, int(n), tp, 1, 1, self.kv_elem_bytes) for n in self.attention_layers]


def _splice(one: _Row, two: _Row, blocks: int) -> _Row:
    """A stage of ``blocks`` blocks from its one-block and two-block passes (``_spliced_row``)."""
    if blocks <= 2:
        return one if blocks == 1 else two
    extra = blocks - 1
    b = len(two.device) - len(one.device)
    comm = one.comm + extra * (two.comm - one.comm)
    if b == 0:
        return _Row(
            one.device + extra * (two.device - one.device), one.dram + extra * (two.dram - one.dram), comm, one.send
        )
    k = len(one.device) - 1

    def grow(a: np.ndarray) -> np.ndarray:
        return np.concatenate([a[:k], np.tile(a[k : k + b], extra), a[k + b :]])

    return _Row(grow(two.device), grow(two.dram), comm, one.send)


def _device(seg) -> float:
    """A segment's device seconds, without the wait for the host (``Segment.dispatch_wait_s``)."""
    return seg.busy_s - getattr(seg, "dispatch_wait_s", 0.0)


@dataclass(frozen=True)
class _Structure:
    """Per segment of a stage's pass: host seconds, attention layers, logits GEMMs it holds."""

    host: np.ndarray
    attention: np.ndarray
    logits: np.ndarray


@dataclass(frozen=True)
class _Row:
    """One stage's per-token ops at one token count: device seconds and DRAM bytes per segment, its
    collectives' seconds and its pipeline send's."""

    device: np.ndarray
    dram: np.ndarray
    comm: float
    send: float

    def mix(self, other: _Row, w: float) -> _Row:
        return _Row(
            self.device + w * (other.device - self.device),
            self.dram + w * (other.dram - self.dram),
            self.comm + w * (other.comm - self.comm),
            self.send + w * (other.send - self.send),
        )


def split_micro_batches(work: Sequence[Work], pp: int) -> list[list[Work]]:
    """``min(pp, len(work))`` micro-batches, balanced by new tokens (largest first onto the lightest)."""
    m = min(pp, len(work)) if pp > 1 else 1
    if m <= 1:
        return [list(work)]
    groups: list[list[Work]] = [[] for _ in range(m)]
    load = [0] * m
    for w in sorted(work, key=lambda w: -w.tokens):
        k = load.index(min(load))
        groups[k].append(w)
        load[k] += w.tokens
    return groups


def chunk_blocks(tokens: int, block: int) -> int:
    """KV pages a sequence of ``tokens`` tokens occupies."""
    return math.ceil(tokens / block) if tokens > 0 else 0
