"""Predictions for small GPTs on one DGX A100 node, for comparison with vTrain-style measurements.

Small jobs (125M-2.7B parameters, micro-batch 1, tp up to 8) are where the host's kernel dispatch and the
unfused attention's score traffic matter (``engine/plan/launch.py``). We have no measurements of them: this
prints our prediction of each mapping with its breakdown, so that measured runs (vTrain, MICRO'24: 1,440
single-node runs of such models on 2-8 A100s) can be put next to it. Columns: iteration time, the share of
the device's pass time spent waiting for the host to issue kernels (``dispatch``), the share of a block
layer's device time (forward and backward) spent outside the ops' roofline (``fixed``: the floor every
kernel pays, each GEMM kernel's launch and fill, the bias gradients' extra pass), the share of unfused
attention (score traffic included) in the forward compute, and achieved model TFLOP/s per GPU.

Models: the GPT-3 paper's small sizes (Brown et al. 2020, Table 2.1), seq 2048, vocab 51200.
Usage: python benchmarks/calibrate_small_gpt.py [--engine event|analytic] [--quick]
"""

from __future__ import annotations

import argparse
import itertools

from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.simulate import make_plan, simulate

# name: (layers, hidden, heads), GPT-3 Table 2.1
MODELS = {
    "125M": (12, 768, 12),
    "350M": (24, 1024, 16),
    "760M": (24, 1536, 16),
    "1.3B": (24, 2048, 16),
    "2.7B": (32, 2560, 32),
}
GLOBAL_BATCH = 32


def project(model: str, gpus: int, tp: int, pp: int, mb: int, engine: str) -> Project:
    layers, hidden, heads = MODELS[model]
    spec = GPTSpec(name=f"gpt-{model}", layers=layers, hidden=hidden, heads=heads, seq_len=2048, vocab=51200)
    dp = gpus // (tp * pp)
    mapping = Mapping(tp=tp, pp=pp, dp=dp, micro_batch=mb, global_batch=GLOBAL_BATCH)
    return Project(
        name=spec.name,
        hardware=load_system("dgx-a100"),
        workload=spec,
        mapping=mapping,
        run=RunSettings(dtype="fp16", engine=engine),
    )


def shares(p: Project) -> tuple[float, float, float]:
    """(dispatch wait / device pass time, per-kernel fixed cost / block layer time, attention / forward pass
    time) of stage 0, per micro-batch."""
    plan = make_plan(p)
    st = plan.stages[0]
    busy = sum(ps.busy_s for ps in st.passes.values())
    wait = sum(ps.dispatch_wait_s for ps in st.passes.values())
    fwd = st.passes[(0, "F")]
    attn = _attention_seconds(plan) / fwd.busy_s if fwd.busy_s else 0.0
    return wait / busy if busy else 0.0, _fixed_share(plan), attn


def _fixed_share(plan) -> float:
    """Device time outside the ops' roofline (kernel floors, GEMM fills, bias-gradient passes) over device
    time, forward and backward of one block layer of stage 0, costed as the plan costs them (``plan.launch``,
    ``perf.op_cost``)."""
    from tilewright.engine.perf.op_cost import op_time
    from tilewright.engine.plan.launch import attention_scores, extra_launches
    from tilewright.engine.plan.passes import _costed

    st = plan.stages[0]
    m = plan.project.mapping
    ops = plan.workload.layer_ops(plan.workload.block_layers[0])
    scores = attention_scores(ops)
    fixed = busy = 0.0
    for backward in (False, True):
        for op in ops:
            t = op_time(_costed(op, st.dev, scores.get(op.name, 0.0), (False, False)), st.dev, m.micro_batch, m.tp,
                        m.sequence_parallel, backward, plan.elem_bytes)
            extra = extra_launches(op, backward, st.dev.compute)
            fixed += t.overhead_s + extra
            busy += t.busy_s + extra
    return fixed / busy if busy else 0.0


def _attention_seconds(plan) -> float:
    """Forward seconds of the attention ops of stage 0 (per micro-batch), costed as the plan costs them."""
    from tilewright.engine.ir.ops import OpKind
    from tilewright.engine.plan.passes import PassContext, forward_pass

    st = plan.stages[0]
    m = plan.project.mapping
    ctx = PassContext(st.dev, m.micro_batch, m.tp, m.sequence_parallel, plan.elem_bytes)
    layers = [plan.workload.layer_ops(i) for i in st.chunk_layers[0]]
    attn_layers = [[op for op in ops if op.kind in (OpKind.attention, OpKind.softmax)] for ops in layers]
    return forward_pass(attn_layers, ctx).busy_s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="analytic", choices=["event", "analytic"])
    ap.add_argument("--quick", action="store_true", help="one micro-batch size and pp 1 only")
    args = ap.parse_args()
    print(
        f"{'model':>5} {'gpus':>4} {'tp':>2} {'pp':>2} {'dp':>2} {'mb':>2} {'iteration s':>11} "
        f"{'dispatch':>8} {'fixed':>6} {'attention':>9} {'TFLOP/s/GPU':>11}"
    )
    mbs = (1,) if args.quick else (1, 2, 4)
    pps = (1,) if args.quick else (1, 2)
    rows: list[tuple[int, int, float, float, float]] = []  # tp, micro-batch, TFLOP/s per GPU, dispatch, fixed
    for model, gpus, tp, pp, mb in itertools.product(MODELS, (2, 4, 8), (1, 2, 4, 8), pps, mbs):
        if tp * pp > gpus or MODELS[model][0] % pp or MODELS[model][2] % tp:
            continue
        if GLOBAL_BATCH % (mb * gpus // (tp * pp)):
            continue
        p = project(model, gpus, tp, pp, mb, args.engine)
        res = simulate(p)
        wait, fixed, attn = shares(p)
        tflops = res.model_flops_per_iteration / res.iteration_time_s / gpus / 1e12
        print(
            f"{model:>5} {gpus:>4} {tp:>2} {pp:>2} {gpus // (tp * pp):>2} {mb:>2} {res.iteration_time_s:>11.4f} "
            f"{100 * wait:>7.1f}% {100 * fixed:>5.1f}% {100 * attn:>8.1f}% {tflops:>11.1f}"
        )
        rows.append((tp, mb, tflops, wait, fixed))
    summary(rows)


def summary(rows: list[tuple[int, int, float, float, float]]) -> None:
    """Means over the mappings by tp and by micro-batch: the slices the measured comparison reports."""

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else 0.0

    by_tp = ", ".join(f"tp {t} {mean([r[2] for r in rows if r[0] == t]):.1f}" for t in sorted({r[0] for r in rows}))
    by_mb = ", ".join(f"mb {b} {mean([r[2] for r in rows if r[1] == b]):.1f}" for b in sorted({r[1] for r in rows}))
    tps = sorted({r[0] for r in rows})
    fixed_tp = ", ".join(f"tp {t} {100 * mean([r[4] for r in rows if r[0] == t]):.1f}" for t in tps)
    print(
        f"summary: {len(rows)} mappings, mean {mean([r[2] for r in rows]):.1f} TFLOP/s/GPU ({by_tp}; {by_mb}); "
        f"mean dispatch wait {100 * mean([r[3] for r in rows]):.2f} %, max {100 * max(r[3] for r in rows):.1f} %; "
        f"outside the roofline (floors, fills, bias passes) {100 * mean([r[4] for r in rows]):.1f} % of layer time "
        f"({fixed_tp})"
    )


if __name__ == "__main__":
    main()
