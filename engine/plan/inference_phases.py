"""An inference request as phases through the pipeline: one prefill, then one decode step per output token.

Shared by the analytic and the event engines (through ``engine.plan.program``) so both time the same passes.
- The request batch is split into ``micro_batches`` that follow each other through the stages (``pp``
  of them when the batch divides evenly, so every stage has work; one when ``pp`` is 1): the usual
  pipelined serving schedule. Decode step k of a micro-batch starts on stage 0 once its step k − 1
  left the last stage (autoregressive).
- Prefill is a forward pass of ``prompt_tokens`` per sequence. A decode step runs every op for one new
  token: matmuls shrink to one row per sequence (memory-bound on the weights), attention reads the whole
  cached context (2·context·kv_dim elements per layer per sequence), and tensor-parallel collectives carry
  one token's activations (latency-bound).
- Decode cost is affine in the context except where the roofline switches sides, so passes are built
  at three contexts (first, middle, last step) and each step's segments are interpolated between the
  two nearest samples (segment by segment: the same ops and collectives, only durations move).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from tilewright.engine.ir.ops import Op, OpKind
from tilewright.engine.ir.workload import BertSpec, LlamaSpec, TransformerDims
from tilewright.engine.perf.collectives import Collective
from tilewright.engine.plan.passes import ChunkPass, PassContext, Segment, forward_pass, fused_edges
from tilewright.engine.plan.plan import Plan, scaled
from tilewright.engine.workloads import build_workload

QUADRATIC = {OpKind.attention, OpKind.softmax}


@dataclass
class NamedPass(ChunkPass):
    """A forward pass with the name the timeline shows for it (e.g. "decode token 17") and a key that
    identifies it for caches (passes made on the fly must not be told apart by ``id``)."""

    name: str = ""
    cache_key: tuple = ()


def kv_dim(dims: TransformerDims) -> int:
    head = dims.hidden // dims.heads
    kv_heads = dims.kv_heads_n if isinstance(dims, LlamaSpec) else dims.heads
    return kv_heads * head


def per_token(op: Op, seq: int, context: int, kv: int) -> Op:
    """The op for one new token attending over ``context`` cached tokens."""
    quadratic = op.kind in QUADRATIC or (op.selective and op.kind is OpKind.dropout)
    scale = context / (seq * seq) if quadratic else 1.0 / seq
    update = {
        "flops": op.flops * scale,
        "in_elems": op.in_elems * scale,
        "out_elems": op.out_elems * scale,
        "saved_elems": 0.0,
        "gemm": (1, op.gemm[1], op.gemm[2]) if op.gemm else None,
    }
    if op.kind is OpKind.attention:
        update["in_elems"] = op.in_elems / seq + 2.0 * context * kv  # this token's q,k,v + the KV cache
    return op.model_copy(update=update)


def _mix(a: ChunkPass, b: ChunkPass, w: float, name: str, key: tuple) -> NamedPass:
    """Segment-wise linear interpolation between two passes of the same ops (w = 0 → a, 1 → b)."""
    if w == 0.0:
        return NamedPass(a.kind, a.segments, a.dataflows, name=name, cache_key=key)
    segs = [
        Segment(
            label=sa.label,
            layer=sa.layer,
            busy_s=sa.busy_s + w * (sb.busy_s - sa.busy_s),
            compute_s=sa.compute_s + w * (sb.compute_s - sa.compute_s),
            flops=sa.flops + w * (sb.flops - sa.flops),
            dram_bytes=sa.dram_bytes + w * (sb.dram_bytes - sa.dram_bytes),
            comm=sa.comm,
        )
        for sa, sb in zip(a.segments, b.segments, strict=True)
    ]
    return NamedPass(a.kind, segs, a.dataflows, name=name, cache_key=key)


@dataclass
class InferencePhases:
    plan: Plan
    batch: int
    prompt: int
    new_tokens: int
    micro_batches: int
    dims: TransformerDims | None
    prefill: list[NamedPass] = field(default_factory=list)  # per stage
    samples: dict[int, list[ChunkPass]] = field(default_factory=dict)  # context → per-stage decode pass
    _recent: dict[int, tuple[int, NamedPass]] = field(default_factory=dict)  # stage → (step, its pass)
    _flops: dict[tuple[int, int], float] = field(default_factory=dict)  # (stage, phase) → its pass's flops

    @property
    def micro_batch(self) -> int:
        return self.batch // self.micro_batches

    @property
    def decode_steps(self) -> int:
        """Output tokens generated one by one; none for an encoder (BERT answers in its one pass)."""
        return self.new_tokens if self.dims is not None and not isinstance(self.dims, BertSpec) else 0

    def decode(self, r: int, k: int) -> NamedPass:
        """Stage ``r``'s pass for decode step ``k`` (0-based: the token after prompt + k of context)."""
        recent = self._recent.get(r)
        if recent is not None and recent[0] == k:  # micro-batches of one step share it
            return recent[1]
        c = self.prompt + k
        ctxs = sorted(self.samples)
        lo = max(s for s in ctxs if s <= c)
        hi = min((s for s in ctxs if s >= c), default=lo)
        w = 0.0 if hi == lo else (c - lo) / (hi - lo)
        ps = _mix(self.samples[lo][r], self.samples[hi][r], w, f"decode token {k + 1}", ("decode", k))
        self._recent[r] = (k, ps)  # the engines ask in step order: keep only the latest, memory stays flat
        return ps

    def pass_for(self, r: int, phase: int) -> ChunkPass:
        """Stage ``r``'s pass of a phase: 0 is the prefill, p ≥ 1 decode step p − 1. Ask in phase order
        (decode passes are made on the fly; only the latest per stage is kept)."""
        ps = self.prefill[r] if phase == 0 else self.decode(r, phase - 1)
        if (r, phase) not in self._flops:
            self._flops[(r, phase)] = ps.flops
        return ps

    def request_flops(self) -> float:
        """FLOPs per device of the whole request: every phase of every stage, for every micro-batch."""
        total = 0.0
        for p in range(1 + self.decode_steps):
            total += self.micro_batches * sum(self._phase_flops(r, p) for r in range(self.plan.pp))
        return total

    def _phase_flops(self, r: int, phase: int) -> float:
        hit = self._flops.get((r, phase))
        return hit if hit is not None else self.pass_for(r, phase).flops

    def p2p_scale(self, tokens: int) -> float:
        """A pipeline send of ``tokens`` per sequence of one micro-batch, relative to the plan's send."""
        seq = self.dims.seq_len if self.dims is not None else 1
        return self.micro_batch * tokens / (self.plan.micro_batch * seq)

    def send(self, r: int, tokens: int) -> Collective:
        """Stage ``r``'s send of one micro-batch's ``tokens`` per sequence to stage r + 1."""
        return scaled(self.plan.p2p(r, 0, False), self.p2p_scale(tokens))

    def workspace(self, r: int) -> float:
        """The stage's largest op workspace, for one micro-batch of the request."""
        return self.plan.stages[r].workspace * self.micro_batch / max(self.plan.micro_batch, 1)

    @cached_property
    def kv_bytes_per_token(self) -> list[float]:
        """Per stage, per device: the KV cache one micro-batch adds per token of context."""
        if self.decode_steps == 0:  # no cache: nothing is generated after the one pass
            return [0.0] * self.plan.pp
        out = []
        m = self.plan.project.mapping
        for st in self.plan.stages:
            layers = sum(len(v) for v in st.chunk_layers.values())
            out.append(2.0 * layers * kv_dim(self.dims) * self.micro_batch * self.plan.elem_bytes / m.tp)
        return out


def inference_phases(plan: Plan) -> InferencePhases:
    project = plan.project
    run, m = project.run, project.mapping
    dims = project.workload if isinstance(project.workload, TransformerDims) else None
    inf = run.inference
    micro_batches = plan.pp if plan.pp > 1 and inf.batch % plan.pp == 0 else 1
    ph = InferencePhases(plan, inf.batch, inf.prompt_tokens, inf.output_tokens, micro_batches, dims)
    mb = ph.micro_batch
    spec = dims.model_copy(update={"seq_len": inf.prompt_tokens}) if dims is not None else project.workload
    prefill_graph = build_workload(spec)
    fused = fused_edges(m.fusion)
    for st in plan.stages:
        ctx = PassContext(st.dev, mb, m.tp, m.sequence_parallel, plan.elem_bytes, fused)
        layers = [prefill_graph.layer_ops(i) for c in sorted(st.chunk_layers) for i in st.chunk_layers[c]]
        ps = forward_pass(layers, ctx)
        ph.prefill.append(NamedPass(ps.kind, ps.segments, ps.dataflows, name="prefill", cache_key=("prefill",)))
    if ph.decode_steps == 0:
        return ph
    kv = kv_dim(dims)
    for context in sorted({inf.prompt_tokens, inf.prompt_tokens + inf.output_tokens // 2,
                           inf.prompt_tokens + inf.output_tokens - 1}):
        per_stage = []
        for st in plan.stages:
            ctx = PassContext(st.dev, mb, m.tp, False, plan.elem_bytes, fused)
            layers = [
                [per_token(op, dims.seq_len, context, kv) for op in plan.workload.layer_ops(i)]
                for c in sorted(st.chunk_layers)
                for i in st.chunk_layers[c]
            ]
            per_stage.append(forward_pass(layers, ctx))
        ph.samples[context] = per_stage
    return ph
