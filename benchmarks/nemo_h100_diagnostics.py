"""Diagnostics of ``calibrate_nemo_h100`` beyond its table: attention-costing what-ifs per row (``--whatif``) and
the per-op times of one block (``--detail``), to attribute a row's error rather than to check it.
"""

from __future__ import annotations

from nemo_h100_published import Row
from nemo_h100_run import evaluate, project_for
from tilewright.engine.ir import Project
from tilewright.engine.simulate import simulate

# What-if variants, cumulative, that attribute the dense rows' error to attention costing (module docstring of
# engine/plan/launch.py: fused attention keeps the scores on chip). Each is expressible in the IR today, as a
# proxy: a window of s/2 gives every query s/2 keys, the pair count of causal attention; fusing the softmax
# into out_proj keeps its a·s² output on chip as a flash kernel does; no recomputation drops the separate
# re-run of the attention core, which is costed unfused (flash recomputes the scores inside its backward).
WHATIF = ("causal pairs", "+ softmax out on chip", "+ no unfused re-run")


def whatif_projects(row: Row) -> list[Project]:
    base = project_for(row)
    spec, m = base.workload, base.mapping
    out = []
    if spec.sliding_window is None:
        spec = spec.model_copy(update={"sliding_window": spec.seq_len // 2})
    out.append(base.model_copy(update={"workload": spec}))
    m = m.model_copy(update={"fusion": [["attention", "softmax", "out_proj"]]})
    out.append(base.model_copy(update={"workload": spec, "mapping": m}))
    m = m.model_copy(update={"recompute": "none", "recompute_modules": None})
    out.append(base.model_copy(update={"workload": spec, "mapping": m}))
    return out


def whatif(selected: list[Row]) -> None:
    print(f"{'row':40} {'meas':>6} {'base':>7} " + " ".join(f"{w:>22}" for w in WHATIF))
    for row in selected:
        base = evaluate(row)
        cells = []
        for project in whatif_projects(row):
            res = simulate(project)
            per = res.samples_per_iteration * res.tokens_per_sample / res.iteration_time_s / res.devices
            cells.append(f"{per:>8.0f} ({100 * (per / row.pub.tokens_per_gpu - 1):+6.1f}%)")
        print(f"{row.label:40} {row.pub.tokens_per_gpu:>6.0f} {100 * base.error:>+6.1f}% "
              + " ".join(f"{c:>22}" for c in cells))


def detail(row: Row) -> None:
    """Per-op times of one block (a MoE block if the model has one; not one of the bf16 edge layers of an fp8
    row) for one micro-batch on one device of stage 0, as the plan costs them one op at a time, with the expert
    all-to-alls; for routed-expert GEMMs also the time of one GEMM per local expert (Megatron-Core's grouped GEMM
    on Hopper runs one GEMM per expert) on the same efficiency curve, against ours (one GEMM over every
    token-slot). A collective's time is that of the bytes the plan leaves exposed (``plan.tp_overlap``)."""
    import tilewright.engine.plan.stage_build as planmod  # where build_plan's stages run their passes
    from tilewright.engine.ir.ops import MoERole
    from tilewright.engine.plan.passes import backward_pass, forward_pass
    from tilewright.engine.simulate import make_plan

    seen: list = []
    original = planmod.forward_pass

    def spy(layers, ctx, *a, **k):  # type: ignore[no-untyped-def]
        seen.append((layers, ctx))
        return original(layers, ctx, *a, **k)

    planmod.forward_pass = spy
    try:
        plan = make_plan(project_for(row))
    finally:
        planmod.forward_pass = original
    ctx = seen[0][1]
    blocks = [ops for layers, _ in seen for ops in layers if ops and ops[0].name.startswith("block")]
    # an fp8 row keeps its first and last layers in bf16 (FP8_BF16_LAYERS): show a block in the run's format,
    # which every other layer is (block0 of an FP8-CS row costs about twice an fp8 block)
    bf16 = getattr(ctx.formats, "bf16_layers", frozenset())
    blocks = [ops for ops in blocks if ops[0].name.split(".")[0] not in bf16] or blocks
    moe = [ops for ops in blocks if any(o.moe is not None for o in ops)]
    ops = (moe or blocks)[0]
    comp = ctx.dev.compute
    print(f"{row.label}: one micro-batch ({ctx.micro_batch:g} samples) of {ops[0].name.split('.')[0]}, tp {ctx.tp}, "
          f"ep {ctx.expert_parallel}; ms (F/B: device busy, the host's issue time in brackets; each op alone here, "
          f"while the plan's segments span the ops up to a collective and last the longer of the two sums)")
    totals = [0.0, 0.0, 0.0, 0.0]
    for op in ops:
        f, b = forward_pass([[op]], ctx), backward_pass([[op]], ctx)
        comm = [f"{kind} {plan.tp_time(0, 0, kind, n) * 1e3:.3f}" for kind, n in
                (seg.comm for seg in f.segments if seg.comm)]
        times = [sum(s.busy_s for s in f.segments), sum(s.host_s for s in f.segments),
                 sum(s.busy_s for s in b.segments), sum(s.host_s for s in b.segments)]
        totals = [t + x for t, x in zip(totals, times, strict=True)]
        line = (f"  {op.name.split('.', 1)[1]:20} F {times[0] * 1e3:7.3f} [{times[1] * 1e3:6.3f}] "
                f"B {times[2] * 1e3:7.3f} [{times[3] * 1e3:6.3f}]  {', '.join(comm)}")
        if op.moe is not None and op.moe.role is MoERole.expert and op.gemm is not None:
            local = op.moe.experts / ctx.expert_parallel
            m_rows, n, k = op.gemm[0] * ctx.micro_batch, op.gemm[1] / ctx.tp, op.gemm[2]
            peak = ctx.dev.matmul_peak(ctx.formats, True)

            def gemm_s(m: float, peak: float = peak, n: float = n, k: float = k) -> float:
                flops = 2 * m * n * k / comp.shape_efficiency(m, n, k)
                return sum(ctx.dev.matmul_parts(flops, peak))

            one, per = gemm_s(m_rows), local * gemm_s(m_rows / local)
            line += f"  [fwd GEMM: one {one * 1e3:.3f}, {local:g} per-expert {per * 1e3:.3f} ×{per / one:.2f}]"
        print(line)
    print(f"  {'block':20} F {totals[0] * 1e3:7.3f} [{totals[1] * 1e3:6.3f}] B {totals[2] * 1e3:7.3f} "
          f"[{totals[3] * 1e3:6.3f}]  (all-to-alls not included)")
