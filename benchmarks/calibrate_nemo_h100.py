"""Check the dgx-h100 preset against NVIDIA's published Megatron-Core pre-training throughput on DGX-H100.

The rows, their sources and what the comparison assumes are documented beside the code that holds them:

- ``nemo_h100_published``: the published measurements (NeMo containers, Megatron-LM pull requests), their
  sources and the distinct configurations they make;
- ``nemo_h100_recipes``: each row's recipe (Megatron-Bridge's and Megatron-LM's settings, with sources);
- ``nemo_h100_models``: the model specs, their model-card parameter counts and Megatron's uneven layouts;
- ``nemo_h100_run``: how a row maps onto a project (and the gaps where it cannot) and runs;
- ``nemo_h100_diagnostics``: the ``--whatif`` and ``--detail`` views.

DGX-H100: 8 H100 SXM per node on NVLink4/NVSwitch, 8 × 400 Gb/s InfiniBand per node. These are measurements
to *check* the model against, never to fit a constant to: nothing here feeds back into a preset.

Model FLOPs: NVIDIA's "Model TFLOP/s/GPU" counts causal attention (Llama-3 8B at s 8192: 51.5 GFLOP per
token = 6·N + 6·l·s·h), so tokens/s per GPU is the quantity compared; ``nv_tflops`` re-expresses our
tokens/s in NVIDIA's FLOPs per token (their TFLOP/s over their tokens/s), ``our_tflops`` is our own count.

Usage: python benchmarks/calibrate_nemo_h100.py [--engine analytic|event] [--only SUBSTRING] [--whatif | --detail]
  --only    rows whose label or release contains it (e.g. "MLM" for the Megatron-LM recipes)
  --whatif  attention-costing proxies per row (WHATIF); --detail  per-op times of one block per row
"""

from __future__ import annotations

import argparse

from nemo_h100_diagnostics import detail, whatif
from nemo_h100_published import rows
from nemo_h100_run import CLEAN, CLEAN_MOE, evaluate, summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="analytic", choices=["analytic", "event"])
    ap.add_argument("--only", default="", help="run only rows whose label or release contains this")
    ap.add_argument("--whatif", action="store_true", help="attention-costing variants (WHATIF) per row")
    ap.add_argument("--detail", action="store_true", help="per-op times of one block of each selected row")
    args = ap.parse_args()
    selected = [row for row in rows() if args.only in row.label or args.only in row.pub.release]
    if args.whatif:
        return whatif(selected)
    if args.detail:
        for row in selected:
            detail(row)
        return None
    outcomes = []
    print(f"{'row':40} {'rel':>9} {'meas tok/s':>10} {'pred':>8} {'error':>7} {'NV TF':>6} {'ourTF':>6} "
          f"{'wall':>5}  breakdown (s per iteration)")
    for row in selected:
        o = evaluate(row, args.engine)
        outcomes.append(o)
        p = row.pub
        rel = p.release + ("+" if row.others else "")
        parts = ", ".join(f"{k} {v:.2f}" for k, v in o.breakdown.items() if v > 0.005)
        print(f"{row.label:40} {rel:>9} {p.tokens_per_gpu:>10.0f} {o.tokens_per_gpu:>8.0f} {100 * o.error:>+6.1f}% "
              f"{o.nv_tflops:>6.0f} {o.our_tflops:>6.0f} {o.wall_s:>5.1f}  {parts}{'  OOM' if o.oom else ''}")
        for other in row.others:
            err = o.tokens_per_gpu / other.tokens_per_gpu - 1
            print(f"{'':40} {other.release:>9} {other.tokens_per_gpu:>10.0f} {'':>8} {100 * err:>+6.1f}%")
        for gap in row.gaps:
            print(f"{'':46}gap: {gap}")
    if outcomes:
        s = summary(outcomes)
        print("mean |error| of tokens/s/GPU: " + ", ".join(f"{k} {100 * v:.1f} % (n={n})" for k, v, n in (
            (k, s[k], sum(1 for o in outcomes if k == "all" or k == ("moe" if o.row.moe else "dense")
                          or k == o.row.pub.precision or (k == CLEAN and not o.row.pub.regression)
                          or (k == CLEAN_MOE and o.row.moe and not o.row.pub.regression)))
            for k in ("all", "dense", "moe", "bf16", "fp8", CLEAN, CLEAN_MOE) if k in s)))


if __name__ == "__main__":
    main()
