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

``--vtrain``: the input space of vTrain's single-node validation instead (its public configuration files:
2, 4 or 8 A100s of one node; GPTs of 12 or 24 layers, hidden 1024 or 2048, 16 heads, sequence 1024,
no vocabulary given, so vTrain's default 50,257 padded per tp as Megatron pads it; global batch 16, 32 or 64;
micro-batch 1-8; every tp × pp × dp equal to the GPU count;
``--checkpoint-activations``, i.e. full recompute of each layer; 1F1B; the data-parallel all-reduce after
the backward; Megatron-DeepSpeed's layers, ``host_framework`` 'megatron-deepspeed': vTrain's data/README.md).
Each row adds the iteration's time breakdown (percent of the iteration; ``host_wait`` includes Megatron's host
synchronisations and Megatron-DeepSpeed's two blocking scalar copies per layer forward,
``engine/plan/deepspeed_host.py``; ``optimizer`` its fp16 optimizer's extra passes: ``engine/plan/train_step.py``);
the summary gives mean iteration time and the mean breakdown by tp and by
micro-batch. Predictions only: vTrain's measured times are held out.

Usage: python benchmarks/calibrate_small_gpt.py [--engine event|analytic] [--quick] [--vtrain]
"""

from __future__ import annotations

import argparse
import itertools

from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.mapping import Recompute
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

# vTrain's single-node inputs: name: (layers, hidden, heads), seq 1024; the files name no vocabulary: vTrain's
# vTrainConfig default (GPT-2 BPE), padded per tp as Megatron does (calibrate_public_megatron_logs.padded_vocab)
VTRAIN_VOCAB = 50257
VTRAIN_MODELS = {
    "12x1024": (12, 1024, 16),
    "24x1024": (24, 1024, 16),
    "12x2048": (12, 2048, 16),
    "24x2048": (24, 2048, 16),
}
VTRAIN_GLOBAL_BATCHES = (16, 32, 64)
VTRAIN_MICRO_BATCHES = (1, 2, 4, 8)
# breakdown columns (engine/results/result.py TIME_CATEGORIES), compute and recompute merged
COLUMNS = ("compute", "memory_stall", "host_wait", "tp_comm", "pp_comm", "dp_comm", "bubble", "optimizer")


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


def vtrain_project(model: str, gpus: int, tp: int, pp: int, mb: int, gb: int, engine: str) -> Project:
    """One of vTrain's single-node runs: seq 1024, full recompute (``--checkpoint-activations``), 1F1B."""
    layers, hidden, heads = VTRAIN_MODELS[model]
    from calibrate_public_megatron_logs import padded_vocab  # that module imports this one

    spec = GPTSpec(name=f"gpt-{model}", layers=layers, hidden=hidden, heads=heads, seq_len=1024,
                   vocab=padded_vocab(VTRAIN_VOCAB, tp))
    # vTrain measured with Microsoft's Megatron-DeepSpeed (VIA-Research/vTrain data/README.md @ f8dda84), whose
    # pre-July-2023 mpu layers (megatron/mpu/layers.py: copy_to_tensor_model_parallel_region, then F.linear) have no
    # gradient-accumulation fusion (--no-gradient-accumulation-fusion's behaviour: plan.grad_hooks) and block on
    # the input-gradient all-reduce (overlap_dgrad_comm's era default already reads that from full recompute); its
    # ParallelTransformerLayer.forward makes two blocking scalar copies per layer forward, whatever the launch flags
    # (host_framework 'megatron-deepspeed': plan.deepspeed_host)
    mapping = Mapping(tp=tp, pp=pp, dp=gpus // (tp * pp), micro_batch=mb, global_batch=gb,
                      recompute=Recompute.full, gradient_accumulation_fusion=False, host_framework="megatron-deepspeed")
    return Project(name=spec.name, hardware=load_system("dgx-a100"), workload=spec, mapping=mapping,
                   run=RunSettings(dtype="fp16", engine=engine))


def vtrain_mappings(quick: bool) -> list[tuple[str, int, int, int, int, int]]:
    """(model, gpus, tp, pp, mb, global batch) of every valid mapping of the vTrain input space."""
    out = []
    gbs = (32,) if quick else VTRAIN_GLOBAL_BATCHES
    for model, gpus, tp, pp, gb, mb in itertools.product(
        VTRAIN_MODELS, (2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8), gbs, VTRAIN_MICRO_BATCHES
    ):
        layers, _hidden, heads = VTRAIN_MODELS[model]
        if gpus % (tp * pp) or layers % pp or heads % tp:
            continue
        if gb % (mb * (gpus // (tp * pp))):
            continue
        out.append((model, gpus, tp, pp, mb, gb))
    return out


def run_vtrain(engine: str, quick: bool) -> None:
    """Every mapping of the vTrain space: iteration time and its breakdown, then the means by tp and mb."""
    print(f"{'model':>7} {'gpus':>4} {'tp':>2} {'pp':>2} {'dp':>2} {'mb':>2} {'gb':>3} {'iter ms':>8} "
          + " ".join(f"{c[:7]:>7}" for c in COLUMNS) + f" {'TFLOP/s':>7}")
    rows: list[tuple[int, int, float, dict[str, float]]] = []  # tp, mb, seconds, breakdown shares
    for model, gpus, tp, pp, mb, gb in vtrain_mappings(quick):
        res = simulate(vtrain_project(model, gpus, tp, pp, mb, gb, engine))
        t = res.iteration_time_s
        b = dict(res.time_breakdown_s)
        b["compute"] = b.get("compute", 0.0) + b.get("recompute", 0.0)
        share = {c: b.get(c, 0.0) / t for c in COLUMNS}
        tflops = res.model_flops_per_iteration / t / gpus / 1e12
        print(f"{model:>7} {gpus:>4} {tp:>2} {pp:>2} {gpus // (tp * pp):>2} {mb:>2} {gb:>3} {1e3 * t:>8.2f} "
              + " ".join(f"{100 * share[c]:>6.1f}%" for c in COLUMNS) + f" {tflops:>7.1f}")
        rows.append((tp, mb, t, share))
    vtrain_summary(rows)


def vtrain_summary(rows: list[tuple[int, int, float, dict[str, float]]]) -> None:
    """Mean iteration time and mean breakdown shares by tp and by micro-batch."""
    print(f"summary: {len(rows)} mappings; mean breakdown (% of iteration) by slice")
    print(f"{'slice':>6} {'n':>4} {'iter ms':>8} " + " ".join(f"{c[:7]:>7}" for c in COLUMNS))
    for label, idx in (("tp", 0), ("mb", 1)):
        for v in sorted({r[idx] for r in rows}):
            sel = [r for r in rows if r[idx] == v]
            t = sum(r[2] for r in sel) / len(sel)
            parts = " ".join(f"{100 * sum(r[3][c] for r in sel) / len(sel):>6.1f}%" for c in COLUMNS)
            print(f"{label + ' ' + str(v):>6} {len(sel):>4} {1e3 * t:>8.2f} {parts}")


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
    from tilewright.engine.plan.costed_op import as_costed
    from tilewright.engine.plan.launch import attention_scores, extra_launches

    st = plan.stages[0]
    m = plan.project.mapping
    ops = plan.workload.layer_ops(plan.workload.block_layers[0])
    scores = attention_scores(ops)
    fixed = busy = 0.0
    for backward in (False, True):
        for op in ops:
            t = op_time(as_costed(op, st.dev, scores.get(op.name, 0.0), (False, False)), st.dev, m.micro_batch, m.tp,
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
    ap.add_argument("--quick", action="store_true", help="one micro-batch size and pp 1 only (--vtrain: gb 32)")
    ap.add_argument("--vtrain", action="store_true", help="vTrain's single-node input space (seq 1024, recompute)")
    args = ap.parse_args()
    if args.vtrain:
        run_vtrain(args.engine, args.quick)
        return
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
