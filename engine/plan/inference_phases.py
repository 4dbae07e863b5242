"""A batch of inference requests as phases through the pipeline: one prefill, then the decode steps.

Shared by the analytic and the event engines (through ``engine.plan.program``) so both time the same passes.

Definitions (every sequence of the batch arrives at time 0):
- the prefill runs the whole prompt and produces the first output token; time to first token (TTFT) is
  the end of the prefill of the last sequence of the batch (its last micro-batch on the last stage) when the
  batch is prefilled at once, the first sequence's first token when sequences are prefilled in turn;
- then ``output_tokens − 1`` decode steps, each feeding the token sampled last and producing the next one
  (decode step k, 0-based, attends over ``prompt + k + 1`` keys and produces output token k + 2); an
  encoder (BERT) answers in its one pass and has no decode steps and no KV cache;
- end to end (e2e) is the end of the last decode step; TPOT = (e2e − end of the batch's prefill)/(output_tokens − 1)
  (= (e2e − TTFT)/(output_tokens − 1) when the batch prefills at once; ``engines.result_builder``), absent
  (None) when ``output_tokens`` is 1.

Passes (``engine.workloads.transformer_inference``): fused, causal attention unless
``run.inference.attention`` is ``materialised``; logits of the last token only; embeddings gathered; no
loss, no dropout. The batch is split into ``micro_batches`` that follow each other through the stages
(``pp`` of them when the batch divides evenly, so every stage has work; one when ``pp`` is 1): the usual
pipelined serving schedule. Decode step k of a micro-batch starts on stage 0 once its step k − 1 left the
last stage (autoregressive). Tensor-parallel collectives of a decode step carry one token's activations.

Memory: weights, the KV cache and a workspace. The KV cache holds 2 · attention layers · kv_heads ·
head_dim elements per token (in ``mapping.formats.kv_cache``, default the activations' format), grows as
tokens are written (the prompt at the prefill, one token per decode step) and is allocated in pages of
``run.inference.kv_block_tokens`` tokens per sequence (vLLM's paged blocks; a sequence's last page is
whole). The workspace is the largest transient of an op (input plus output) at the context actually run:
the prefill's prompt or a decode step's token, never the model's training length; the KV cache an op
reads is counted in the cache, not again in the workspace.

The prefill order is the runtime's (``run.inference.prefill``, default the device's
``compute.runtime_prefill``): ``batched`` prefills each micro-batch in one pass (vLLM); ``sequential``
prefills its sequences one after another (tt-transformers), so TTFT is then the first sequence's first
token (one sequence's prefill on an idle machine) and ``prefill_s`` still the end of the last one.

What these passes leave out: runtimes launch ops the model graph folds into its neighbours — rotary
embeddings, KV-cache writes, head split/concat (a Llama layer here is 11 ops, in tt-transformers' decode ~17)
— whose fixed per-op cost is therefore not counted (on grid devices ``compute.programs_by_op`` counts them).
A runtime that samples on the device (``compute.runtime_sampling``) ends each decode step with the logits'
all-gather, untilize and (one sequence) argmax and index updates (``transformer_inference.sampling_ops``),
built into the decode passes here and priced the same way by ``serving.cost_model``; for more than one
sequence it samples on the host, and each decode step ends with the device waiting for the host's read of the
logits (``host_sampling_s``, on the last stage).

With prefetched weights (``WeightPlacement.prefetched``) a decode layer lasts at least its weights' stream from
DRAM, which the prefetcher runs behind its ops and collectives (``with_prefetch_floor``).

Decode cost is affine in the context except where the roofline switches sides, so decode passes are built
at three contexts (first, middle, last step) and each step's segments are interpolated between the two
nearest samples (segment by segment: the same ops and collectives, only durations move).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import cached_property

from tilewright.engine.ir.common import DType, PrefillOrder, dtype_bytes
from tilewright.engine.ir.compute import Compute
from tilewright.engine.ir.mapping import WeightPlacement
from tilewright.engine.ir.ops import LayerKind, Op, OpKind, TensorSplit
from tilewright.engine.ir.project import AttentionKind
from tilewright.engine.ir.workload import BertSpec, TransformerDims
from tilewright.engine.perf.collectives import Collective
from tilewright.engine.perf.formats import OpFormats
from tilewright.engine.perf.memory import workspace_bytes
from tilewright.engine.perf.op_cost import shard
from tilewright.engine.perf.spatial import device_chip
from tilewright.engine.perf.spatial_op import OnChip, prefetched
from tilewright.engine.plan.group_comm import scaled
from tilewright.engine.plan.hardware_flops import useful_share
from tilewright.engine.plan.launch import InferencePass, pass_device
from tilewright.engine.plan.passes import ChunkPass, PassContext, Segment, forward_pass, fused_edges
from tilewright.engine.plan.plan import Plan
from tilewright.engine.plan.report import split_rows
from tilewright.engine.plan.served_experts import served_layers
from tilewright.engine.plan.timing import pass_parts
from tilewright.engine.workloads import build_workload
from tilewright.engine.workloads.graph import WorkloadGraph
from tilewright.engine.workloads.transformer_inference import inference_graph, kv_cache_bytes


@dataclass
class NamedPass(ChunkPass):
    """A forward pass with the name the timeline shows for it (e.g. "decode token 17") and a key that
    identifies it for caches (passes made on the fly must not be told apart by ``id``)."""

    name: str = ""
    cache_key: tuple = ()


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
            local_bytes=sa.local_bytes + w * (sb.local_bytes - sa.local_bytes),
            host_s=sa.host_s + w * (sb.host_s - sa.host_s),
            dispatch_wait_s=sa.dispatch_wait_s + w * (sb.dispatch_wait_s - sa.dispatch_wait_s),
            last_label=sa.last_label,
        )
        for sa, sb in zip(a.segments, b.segments, strict=True)
    ]
    return NamedPass(a.kind, segs, a.dataflows, name=name, cache_key=key)


def with_runtime_step(ps: NamedPass, seconds: float) -> NamedPass:
    """``ps`` led by the serving runtime's host work for the iteration (``Compute.runtime_step_s``): the device
    waits for it (scheduling and inputs before the step, the sampled tokens' copy back and output processing
    after it; the wait is one per iteration, so it is placed first)."""
    if seconds <= 0 or not ps.segments:
        return ps
    step = Segment.host_wait("runtime step (host)", ps.segments[0].layer, seconds)
    return NamedPass(ps.kind, [step, *ps.segments], ps.dataflows, name=ps.name, cache_key=ps.cache_key)


def kv_dtype(plan: Plan) -> DType:
    """The KV cache's format: ``mapping.formats.kv_cache``, else the activations' format."""
    f = plan.project.mapping.formats.kv_cache
    if f is not None:
        return f
    return plan.formats.activations if plan.formats is not None else plan.project.run.dtype


def pages(tokens: int, block: int) -> int:
    """Tokens of KV cache a sequence of ``tokens`` occupies: whole pages of ``block`` tokens."""
    return math.ceil(tokens / block) * block if tokens > 0 else 0


def _transient(ops: list[Op]) -> list[Op]:
    """The ops as transient buffers: the KV cache an attention op reads lives in the cache."""
    return [op.model_copy(update={"in_elems": op.in_elems - op.cache_elems}) if op.cache_elems else op
            for op in ops]


@dataclass
class InferencePhases:
    plan: Plan
    batch: int
    prompt: int
    output_tokens: int
    micro_batches: int
    dims: TransformerDims | None
    block_tokens: int = 16
    kv_elem_bytes: float = 2.0
    sequential: bool = False  # the micro-batch's sequences are prefilled one after another (PrefillOrder)
    prefill: list[NamedPass] = field(default_factory=list)  # per stage
    samples: dict[int, list[ChunkPass]] = field(default_factory=dict)  # context → per-stage decode pass
    workspaces: list[float] = field(default_factory=list)  # per stage, per device
    # per stage, per device: FLOPs of padded expert capacity slots in the prefill pass / a decode sample's
    # (``padding_flops``), which the hardware runs and the model does not need (MFU leaves them out)
    prefill_padding: list[float] = field(default_factory=list)
    sample_padding: dict[int, list[float]] = field(default_factory=dict)  # context → per stage
    _recent: dict[int, tuple[int, NamedPass]] = field(default_factory=dict)  # stage → (step, its pass)
    _flops: dict[tuple[int, int], float] = field(default_factory=dict)  # (stage, phase) → its pass's flops

    @property
    def micro_batch(self) -> int:
        return self.batch // self.micro_batches

    @property
    def decoder(self) -> bool:
        """A transformer that generates token by token (GPT, LLaMA); not an encoder, not a CNN."""
        return self.dims is not None and not isinstance(self.dims, BertSpec)

    @property
    def decode_steps(self) -> int:
        """``output_tokens − 1``: the prefill produces the first output token; none for an encoder."""
        return self.output_tokens - 1 if self.decoder else 0

    @property
    def generated_tokens(self) -> int:
        """Output tokens per sequence: ``output_tokens`` for a decoder, 1 answer for anything else."""
        return self.output_tokens if self.decoder else 1

    def context(self, k: int) -> int:
        """Keys decode step ``k`` attends over: the prompt and the k + 1 tokens fed back so far."""
        return self.prompt + k + 1

    def decode(self, r: int, k: int) -> NamedPass:
        """Stage ``r``'s pass for decode step ``k`` (0-based), named by the output token it produces."""
        recent = self._recent.get(r)
        if recent is not None and recent[0] == k:  # micro-batches of one step share it
            return recent[1]
        lo, hi, w = self._bracket(k)
        ps = _mix(self.samples[lo][r], self.samples[hi][r], w, f"decode token {k + 2}", ("decode", k))
        self._recent[r] = (k, ps)  # the engines ask in step order: keep only the latest, memory stays flat
        return ps

    def _bracket(self, k: int) -> tuple[int, int, float]:
        """The two sampled contexts around decode step ``k``'s and its weight between them (0 → lo, 1 → hi)."""
        c = self.context(k)
        ctxs = sorted(self.samples)
        lo = max(s for s in ctxs if s <= c)
        hi = min((s for s in ctxs if s >= c), default=lo)
        return lo, hi, 0.0 if hi == lo else (c - lo) / (hi - lo)

    def first_token_s(self, first_micro_batch_end: float) -> float:
        """Time to the batch's first output token, from the end of micro-batch 0's prefill on the last stage:
        that end itself when the micro-batch is prefilled at once; with a sequential prefill, its first
        sequence's pass ends ``(n − 1)/n`` of the last stage's prefill earlier (n sequences, equal passes; the
        runtime's step before them is one, whatever n)."""
        if not self.sequential:
            return first_micro_batch_end
        n, last = self.micro_batch, self.plan.pp - 1
        duration = pass_parts(self.plan, last, self.prefill[last])[0]  # the sequences' passes and collectives
        if last == 0:  # the runtime's host work leads the pass once, not once per sequence (``with_runtime_step``)
            duration -= self.plan.stages[0].dev.compute.runtime_step_s or 0.0
        return first_micro_batch_end - (n - 1) / n * duration

    def pass_for(self, r: int, phase: int) -> ChunkPass:
        """Stage ``r``'s pass of a phase: 0 is the prefill, p ≥ 1 decode step p − 1. Ask in phase order
        (decode passes are made on the fly; only the latest per stage is kept)."""
        ps = self.prefill[r] if phase == 0 else self.decode(r, phase - 1)
        if (r, phase) not in self._flops:
            self._flops[(r, phase)] = ps.flops
        return ps

    def request_flops(self) -> float:
        """FLOPs per device of the whole batch: every phase of every stage, for every micro-batch."""
        total = 0.0
        for p in range(1 + self.decode_steps):
            total += self.micro_batches * sum(self._phase_flops(r, p) for r in range(self.plan.pp))
        return total

    def request_model_flops(self) -> float:
        """The model's FLOPs per device of the whole batch (MFU's numerator): ``request_flops`` without the
        padded expert capacity slots (``plan.hardware_flops``: routed experts count at top_k, as Megatron-LM's
        and NeMo's MFU formulas count them; HFU keeps the padding)."""
        padding = sum(self.prefill_padding)
        for k in range(self.decode_steps):
            lo, hi, w = self._bracket(k)
            padding += sum(a + w * (b - a) for a, b in zip(self.sample_padding[lo], self.sample_padding[hi],
                                                          strict=True))
        return self.request_flops() - self.micro_batches * padding

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
        """The stage's largest op transient (input + output) at the context run, for one micro-batch."""
        return self.workspaces[r]

    @cached_property
    def kv_bytes_per_token(self) -> list[float]:
        """Per stage, per device: the KV cache one micro-batch adds per token of context (each of its
        sequences one token), unpaged (``transformer_inference.kv_cache_bytes``)."""
        if not self.decoder:  # an encoder keeps no cache
            return [0.0] * self.plan.pp
        kinds = {li.index: li.kind for li in self.plan.workload.layers}
        tp = self.plan.project.mapping.tp
        out = []
        for st in self.plan.stages:
            layers = sum(kinds[i] is LayerKind.transformer for ids in st.chunk_layers.values() for i in ids)
            out.append(kv_cache_bytes(self.dims, layers, tp, self.micro_batch, 1, self.kv_elem_bytes))
        return out

    def kv_tokens(self, phase: int) -> int:
        """Cache tokens per sequence (in whole pages) once phase ``phase`` has written its tokens."""
        return pages(self.prompt + phase, self.block_tokens)

    def kv_grow(self, r: int, phase: int) -> float:
        """Bytes stage ``r`` (per device) allocates for one micro-batch at ``phase``: new pages only."""
        before = self.kv_tokens(phase - 1) if phase > 0 else 0
        return self.kv_bytes_per_token[r] * (self.kv_tokens(phase) - before)

    def kv_cache_bytes(self, r: int) -> float:
        """Stage ``r``'s whole KV cache (per device) at the end: every micro-batch, every phase written."""
        return self.kv_bytes_per_token[r] * self.micro_batches * self.kv_tokens(self.decode_steps)

    def spatial_splits(self) -> list[dict[str, object]]:
        """On grid devices: how each matmul of the prefill and of the last decode step was split."""
        out: list[dict[str, object]] = []
        for r, st in enumerate(self.plan.stages):
            if st.dev.compute.grid is None:
                continue
            out += split_rows(f"stage {r}, prefill", self.prefill[r].dataflows)
            if self.samples:
                out += split_rows(f"stage {r}, decode", self.samples[max(self.samples)][r].dataflows)
        return out


def _context(
    plan: Plan, r: int, mb: int, sp: bool, fmt: OpFormats | None, kind: InferencePass = "prefill"
) -> PassContext:
    m = plan.project.mapping
    st = plan.stages[r]
    residency = st.residency.residency if st.residency is not None else None  # mapping.memory_levels
    grid = st.dev.compute.grid
    return PassContext(
        pass_device(st.dev, kind), mb, m.tp, sp, plan.elem_bytes, fused_edges(m.fusion), fmt, m.spatial, residency,
        tp_axes=m.tp_axes, moe_framework=False, tp_axes_collectives=m.tp_axes_collectives,
        tp_tile=grid.tile if grid is not None else 1,
        tp_decode=kind == "decode",
        expert_parallel=plan.ep,  # the MoE layers' all-to-alls over the ep ranks (``plan.served_experts``)
    )


def step_formats(plan: Plan) -> OpFormats | None:
    """The plan's formats with the KV cache in its own (``kv_dtype``): what inference passes are costed in."""
    fmt = plan.formats
    kv_type = kv_dtype(plan)
    if fmt is not None and fmt.kv_cache != kv_type:  # the cache defaults to the activations' format
        fmt = dataclasses.replace(fmt, kv_cache=kv_type)
    return fmt


def decode_context(plan: Plan, r: int, sequences: int) -> PassContext:
    """The pass context stage ``r``'s decode step of ``sequences`` sequences is costed in (``forward_pass``
    of its layers, as ``inference_phases`` builds it): for per-op reports of a decode step."""
    return pass_context(plan, r, sequences, "decode")


def pass_context(plan: Plan, r: int, sequences: int, kind: InferencePass) -> PassContext:
    """The pass context of stage ``r``'s inference pass of ``kind`` over ``sequences`` sequences, without
    sequence parallelism: what the serving cost model prices a batch's passes in (its 2-D collectives,
    decode padding and KV-cache format as ``run`` has them)."""
    return _context(plan, r, sequences, False, step_formats(plan), kind)


def padding_flops(layers: list[list[Op]], sequences: float, tp: int, sequence_parallel: bool) -> float:
    """Per device, the FLOPs a forward pass of ``layers`` over ``sequences`` spends on padded expert capacity
    slots: each op's FLOPs as ``op_cost.op_time`` counts them (per sample × sequences ÷ its tensor shard) times
    the share the model does not need (1 − ``hardware_flops.useful_share``); 0 for dense or dropless models."""
    return sum(op.flops * (1.0 - useful_share(op)) * sequences / shard(op, tp, sequence_parallel)
               for ops in layers for op in ops)


def _stage_layers(plan: Plan, graph: WorkloadGraph, r: int) -> list[list[Op]]:
    """Stage ``r``'s layers of ``graph`` as one of its devices runs them (its share of the routed experts with
    expert parallelism: ``plan.served_experts``)."""
    st = plan.stages[r]
    return served_layers([graph.layer_ops(i) for c in sorted(st.chunk_layers) for i in st.chunk_layers[c]], plan.ep)


def prefetch_stream_s(plan: Plan, r: int, ops: list[Op], mb: int, fmt: OpFormats | None) -> float:
    """Seconds stage ``r``'s DRAM prefetcher (``WeightPlacement.prefetched``) takes to stream one layer's
    projection weights (per device) into the matmul cores' L1 in a decode step of ``mb`` sequences: their
    bytes at the bank-adjacent read rate (the reader cores sit next to their banks, as a DRAM-sharded
    matmul's do); 0 when nothing of the layer is prefetched, as when ``mapping.memory_levels`` holds the weights
    in SRAM (``spatial_op.prefetched``: the matmuls read them from L1, no DRAM stream)."""
    st = plan.stages[r]
    dev = st.dev
    m = plan.project.mapping
    if dev.compute.grid is None or m.spatial.weights is not WeightPlacement.prefetched:
        return 0.0
    chip = device_chip(dev)
    in_sram = st.residency is not None and st.residency.residency.at("weights") == "sram"
    if not prefetched(chip, m.spatial, float(mb), OnChip(weights=in_sram)):
        return 0.0
    nbytes = 0.0
    for op in ops:
        if op.kind is OpKind.matmul and op.params > 0 and op.split in (TensorSplit.column, TensorSplit.row):
            per = fmt.for_op(op.name).weight_bytes if fmt is not None else plan.elem_bytes
            nbytes += op.params / m.tp * per
    return nbytes / chip.dram_read_Bps(interleaved=False)


def with_prefetch_floor(plan: Plan, r: int, ps: ChunkPass, layers: list[list[Op]], mb: int,
                        fmt: OpFormats | None) -> ChunkPass:
    """A decode pass in which no layer ends before its prefetched weights have arrived: the prefetcher runs
    on its own cores behind every op and collective of the layer (tt-metal's ``dram_prefetcher`` on a
    sub-device of its own), its buffers a layer's weights deep, so a layer takes the longer of its ops and
    collectives and its weights' stream (``prefetch_stream_s``); the wait is added to the layer's last
    segment, where both engines read it."""
    stream = {ops[0].layer: prefetch_stream_s(plan, r, ops, mb, fmt) for ops in layers if ops}
    if not any(stream.values()):
        return ps
    busy: dict[int, float] = {}
    last: dict[int, int] = {}
    for i, seg in enumerate(ps.segments):
        ccl = plan.tp_time(r, 0, *seg.comm) if seg.comm else 0.0
        busy[seg.layer] = busy.get(seg.layer, 0.0) + seg.busy_s + ccl
        last[seg.layer] = i
    segments = list(ps.segments)
    for layer, i in last.items():
        wait = stream.get(layer, 0.0) - busy[layer]
        if wait > 0:
            segments[i] = dataclasses.replace(segments[i], busy_s=segments[i].busy_s + wait)
    return ChunkPass(ps.kind, segments, ps.dataflows)


def sampling_tile(compute: Compute) -> int:
    """Rows of the tiles an on-device sampler untilizes (``Compute.runtime_sampling``; the grid's tile, 1 on a
    device without one); 0: the runtime samples elsewhere, not modelled."""
    if not compute.runtime_sampling:
        return 0
    return compute.grid.tile if compute.grid is not None else 1


LOGIT_BYTES = 2  # the logits a host sampler reads: untilized to bf16 rows (ttnn.untilize of the LM head's output)


def host_sampling_s(compute: Compute, vocab: int, sequences: int) -> float:
    """Seconds the device waits, after a decode step of ``sequences`` sequences, for the runtime to read the
    logits back and sample them on the host (``Compute.runtime_host_read_bytes_per_s``): tt-transformers takes
    the argmax on the device only for one sequence (``sampling_ops``); for more, its decode reads one device's
    untilized, all-gathered logits — the sequences' rows padded to whole tiles × the vocabulary padded to whole
    tiles, bf16 — with a blocking copy before it samples them and launches the next step (tenstorrent/tt-metal
    models/tt_transformers/tt/generator.py ``read_decode_output``, demo/simple_text_demo.py ``sample_host``).
    Only that copy is priced; the host's conversion and argmax over the logits and the next step's input copies
    are not (no published rate). 0 for one sequence, or when the runtime samples on the device or elsewhere."""
    rate = compute.runtime_host_read_bytes_per_s
    tile = sampling_tile(compute)
    if not rate or not tile or sequences <= 1:
        return 0.0
    rows = math.ceil(sequences / tile) * tile
    return rows * math.ceil(vocab / tile) * tile * LOGIT_BYTES / rate


def with_host_sampling(ps: NamedPass, seconds: float) -> NamedPass:
    """``ps`` followed by the host's read and sampling of its logits (``host_sampling_s``), which the device
    waits for before the next step."""
    if seconds <= 0 or not ps.segments:
        return ps
    read = Segment.host_wait("logits read and host sampling", ps.segments[-1].layer, seconds)
    return NamedPass(ps.kind, [*ps.segments, read], ps.dataflows, name=ps.name, cache_key=ps.cache_key)


def inference_phases(plan: Plan) -> InferencePhases:
    project = plan.project
    m, inf = project.mapping, project.run.inference
    dims = project.workload if isinstance(project.workload, TransformerDims) else None
    micro_batches = plan.pp if plan.pp > 1 and inf.batch % plan.pp == 0 else 1
    kv_type = kv_dtype(plan)
    fmt = step_formats(plan)
    ph = InferencePhases(plan, inf.batch, inf.prompt_tokens, inf.output_tokens, micro_batches, dims,
                         inf.kv_block_tokens, dtype_bytes(kv_type))
    mb = ph.micro_batch
    if dims is None:  # a CNN or an MLP: one forward pass of the batch
        graph = build_workload(project.workload)
        for r in range(plan.pp):
            ps = forward_pass(_stage_layers(plan, graph, r), _context(plan, r, mb, m.sequence_parallel, fmt))
            ph.prefill.append(NamedPass(ps.kind, ps.segments, ps.dataflows, name="prefill", cache_key=("prefill",)))
            ph.workspaces.append(plan.stages[r].workspace * mb / max(plan.micro_batch, 1))
            ph.prefill_padding.append(0.0)  # no routed experts outside a transformer
        return ph
    fused = inf.attention == AttentionKind.fused
    step_s = plan.stages[0].dev.compute.runtime_step_s  # the runtime's host work per iteration
    order = inf.prefill or plan.stages[0].dev.compute.runtime_prefill
    ph.sequential = order == PrefillOrder.sequential and mb > 1
    per_pass = 1 if ph.sequential else mb  # sequences in one prefill pass
    prefill = inference_graph(dims, inf.prompt_tokens, inf.prompt_tokens, per_pass, fused, routed_ranks=plan.ep)
    decode: dict[int, WorkloadGraph] = {}
    if ph.decode_steps:
        n = ph.decode_steps
        tile = sampling_tile(plan.stages[-1].dev.compute)
        for c in sorted({ph.context(0), ph.context((n - 1) // 2), ph.context(n - 1)}):
            decode[c] = inference_graph(dims, 1, c, mb, fused, tile, plan.ep)
    for r in range(plan.pp):
        layers = _stage_layers(plan, prefill, r)
        ps = forward_pass(layers, _context(plan, r, per_pass, m.sequence_parallel, fmt))
        repeat = mb // per_pass  # sequential: the same one-sequence pass, once per sequence
        # its splits are reported once: the ops of one sequence's pass
        segments = ps.segments * repeat
        named = NamedPass(ps.kind, segments, ps.dataflows, name="prefill", cache_key=("prefill",))
        ph.prefill_padding.append(repeat * padding_flops(layers, per_pass, m.tp, m.sequence_parallel))
        ph.prefill.append(with_runtime_step(named, step_s) if r == 0 else named)
        ops = [op for ls in layers for op in ls]
        space = workspace_bytes(_transient(ops), per_pass, m.tp, m.sequence_parallel, plan.elem_bytes)
        if decode:  # the longest context's step (materialised scores grow with it)
            ops = [op for ls in _stage_layers(plan, decode[max(decode)], r) for op in ls]
            space = max(space, workspace_bytes(_transient(ops), mb, m.tp, False, plan.elem_bytes))
        ph.workspaces.append(space)
    for c, graph in decode.items():
        passes = []
        for r in range(plan.pp):
            layers = _stage_layers(plan, graph, r)
            ps = forward_pass(layers, _context(plan, r, mb, False, fmt, "decode"))
            passes.append(with_prefetch_floor(plan, r, ps, layers, mb, fmt))
            ph.sample_padding.setdefault(c, []).append(padding_flops(layers, mb, m.tp, False))
        passes[0] = with_runtime_step(NamedPass(passes[0].kind, passes[0].segments, passes[0].dataflows), step_s)
        sample_s = host_sampling_s(plan.stages[-1].dev.compute, dims.vocab, mb)
        passes[-1] = with_host_sampling(NamedPass(passes[-1].kind, passes[-1].segments, passes[-1].dataflows), sample_s)
        ph.samples[c] = passes
    return ph
