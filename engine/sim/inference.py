"""Inference: prefill of the prompt, then token-by-token decode against a KV cache.

Prefill is a forward pass of ``prompt_tokens`` through the pipeline; time to first token (TTFT) is
its length plus the first decode step. Each decode step runs every op for one new token: matmuls
shrink to one row per sequence (memory-bound on the weights), attention reads the whole cached
context (2·context·kv_dim elements per layer per sequence). Tensor-parallel collectives carry one
token's activations, so they are latency-bound. Time per output token (TPOT) is the mean decode
step. Costs come from the same op and collective models as training; the pipeline runs one request
batch, so stages add up.
"""

from __future__ import annotations

from engine.ir.ops import Op, OpKind
from engine.ir.workload import LlamaSpec, TransformerDims
from engine.plan.passes import ChunkPass, PassContext, forward_pass
from engine.plan.plan import Plan
from engine.results.result import MemoryTrack, Result, memory_verdict
from engine.sim.recorder import Recorder
from engine.workloads import build_workload

QUADRATIC = {OpKind.attention, OpKind.softmax}


def _kv_dim(dims: TransformerDims) -> int:
    head = dims.hidden // dims.heads
    kv_heads = dims.kv_heads_n if isinstance(dims, LlamaSpec) else dims.heads
    return kv_heads * head


def _per_token(op: Op, seq: int, context: int, kv_dim: int) -> Op:
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
        update["in_elems"] = op.in_elems / seq + 2.0 * context * kv_dim  # this token's q,k,v + the KV cache
    return op.model_copy(update=update)


def _pass_time(plan: Plan, rank: int, ps: ChunkPass, acc: dict[str, float], weight: float = 1.0) -> float:
    """Duration of a pass; adds its compute, memory stall and collective time (× weight) to ``acc``."""
    comm = sum(plan.tp_time(rank, 0, *seg.comm) for seg in ps.segments if seg.comm)
    acc["compute"] += weight * ps.compute_s
    acc["memory_stall"] += weight * (ps.busy_s - ps.compute_s)
    acc["tp_comm"] += weight * comm
    acc["flops"] += weight * ps.flops
    return ps.busy_s + comm


def simulate_inference(plan: Plan) -> Result:
    project = plan.project
    run, m = project.run, project.mapping
    dims = project.workload if isinstance(project.workload, TransformerDims) else None
    batch, prompt, new = run.inference.batch, run.inference.prompt_tokens, run.inference.output_tokens
    rec = Recorder()
    stage_lanes = [rec.timeline.lane(f"stage {r}", "compute") for r in range(plan.pp)]
    if dims is None:  # a CNN or MLP: one forward pass of the batch is the whole request
        seq_spec, kv_dim = project.workload, 0
    else:
        seq_spec, kv_dim = dims.model_copy(update={"seq_len": prompt}), _kv_dim(dims)
    prefill_graph = build_workload(seq_spec)
    t = 0.0
    acc = dict.fromkeys(("compute", "memory_stall", "tp_comm", "pp_comm", "flops"), 0.0)
    for r, st in enumerate(plan.stages):
        ctx = PassContext(st.dev, batch, m.tp, m.sequence_parallel, plan.elem_bytes)
        layers = [prefill_graph.layer_ops(i) for c in sorted(st.chunk_layers) for i in st.chunk_layers[c]]
        dur = _pass_time(plan, r, forward_pass(layers, ctx), acc)
        rec.slice(stage_lanes[r], t, dur, "compute", "prefill", r, 0, -1)
        send = plan.p2p(r, 0, False).time(plan.hw) if r < plan.pp - 1 else 0.0
        acc["pp_comm"] += send
        t += dur + send
    prefill = t
    steps = []
    if dims is not None:
        samples = sorted({prompt, prompt + new // 2, prompt + new - 1})
        step_at = {}
        for context in samples:
            step = 0.0
            weight = new / len(samples)  # the sampled steps stand for all decode steps in the breakdown
            for r, st in enumerate(plan.stages):
                ctx = PassContext(st.dev, batch, m.tp, False, plan.elem_bytes)
                layers = [
                    [_per_token(op, dims.seq_len, context, kv_dim) for op in plan.workload.layer_ops(i)]
                    for c in sorted(st.chunk_layers)
                    for i in st.chunk_layers[c]
                ]
                step += _pass_time(plan, r, forward_pass(layers, ctx), acc, weight)
            step_at[context] = step
        for k in range(new):  # decode time is affine in the context between the sampled points
            c = prompt + k
            lo = max(s for s in samples if s <= c)
            hi = min((s for s in samples if s >= c), default=lo)
            w = 0.0 if hi == lo else (c - lo) / (hi - lo)
            steps.append(step_at[lo] * (1 - w) + step_at[hi] * w)
        for k, dur in enumerate(steps):
            rec.slice(stage_lanes[0], t, dur, "compute", f"decode token {k + 1}", 0, k, -1)
            t += dur
    tpot = sum(steps) / len(steps) if steps else 0.0
    flops = acc.pop("flops") * m.tp
    memory = []
    for st in plan.stages:
        layers = sum(len(v) for v in st.chunk_layers.values())
        kv = 2.0 * layers * kv_dim * (prompt + new) * batch * plan.elem_bytes / m.tp if dims else 0.0
        row = {"weights": st.state.weights, "gradients": 0.0, "optimizer": 0.0, "activations": 0.0,
               "kv_cache": kv, "workspace": st.workspace * batch / max(m.micro_batch, 1)}
        node = plan.hw.devices[st.groups[0][0]].node
        memory.append(MemoryTrack(node, st.capacity, [0.0, t], {k: [v, v] for k, v in row.items()}))
    peak_row, oom = memory_verdict(memory)
    return Result(
        project=project.name,
        mode="infer",
        engine=run.engine.value,
        iteration_time_s=t,
        samples_per_iteration=batch,
        tokens_per_sample=max(new, 1) if dims else 1,
        model_flops_per_iteration=flops,
        hardware_flops_per_iteration=flops,
        devices=m.tp * m.pp,
        peak_flops_per_device=plan.stages[0].dev.peak_flops,
        memory_breakdown_bytes=peak_row,
        time_breakdown_s=acc,
        ttft_s=prefill + (steps[0] if steps else 0.0),
        tpot_s=tpot,
        oom=oom,
        timeline=rec.timeline,
        memory=memory,
        notes=list(plan.notes),
        critical_path=[("request", 0.0, t)],
    )
