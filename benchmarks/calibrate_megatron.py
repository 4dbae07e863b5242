"""Compare the dgx-a100 preset with Megatron-LM's measured weak scaling (SC'21 Table 1).

Micro-batch 1, no interleaving, full recomputation, as in the usual reproduction (reference README).
Measured iteration time t = F / aggregate FLOP/s with F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)).
Usage: python benchmarks/calibrate_megatron.py [--engine event|analytic]
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.simulate import simulate

CSV = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "megatron_sc21_table1.csv"


def rows(path: Path = CSV) -> list[dict[str, float]]:
    with open(path) as fh:
        return [{k: float(v) for k, v in r.items()} for r in csv.DictReader(fh)]


def measured_time(r: dict[str, float], s: int = 2048, v: int = 51200) -> float:
    layers, h, b = r["layers"], r["hidden"], r["global_batch"]
    flops = 96 * b * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))
    return flops / (r["aggregate_pflops"] * 1e15)


def project_for(r: dict[str, float], engine: str = "event") -> Project:
    tp, pp, gpus = int(r["tp"]), int(r["pp"]), int(r["gpus"])
    spec = GPTSpec(name=f"gpt-{r['params_billion']}b", layers=int(r["layers"]), hidden=int(r["hidden"]),
                   heads=int(r["heads"]), seq_len=2048, vocab=51200)
    mapping = Mapping(tp=tp, pp=pp, dp=gpus // (tp * pp), micro_batch=1, global_batch=int(r["global_batch"]),
                      recompute="full")
    return Project(name=spec.name, hardware=load_system("dgx-a100"), workload=spec, mapping=mapping,
                   run=RunSettings(dtype="fp16", engine=engine))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="event", choices=["event", "analytic"])
    args = ap.parse_args()
    errors = []
    print(f"{'model':>12} {'gpus':>5} {'measured s':>11} {'predicted s':>12} {'error':>7} {'wall s':>7}")
    for r in rows():
        t0 = time.perf_counter()
        res = simulate(project_for(r, args.engine))
        wall = time.perf_counter() - t0
        meas = measured_time(r)
        err = res.iteration_time_s / meas - 1
        errors.append(abs(err))
        print(f"{r['params_billion']:>11}B {int(r['gpus']):>5} {meas:>11.3f} {res.iteration_time_s:>12.3f} "
              f"{100 * err:>+6.1f}% {wall:>7.2f}")
    print(f"mean |error| = {100 * sum(errors) / len(errors):.1f} %  (target ≤ 10 %)")


if __name__ == "__main__":
    main()
