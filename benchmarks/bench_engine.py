"""Engine speed targets (issue: engine). Whole-process wall time of `tilewright run`, event engine:

- GPT-3 175B on 64 A100s (tp 8, pp 8, 64 micro-batches, interleave 3)          target < 1 s
- 1T GPT on 3,072 A100s (tp 8, pp 64, dp 6, global batch 3,072)                 target < 3 s
- PALM wafer: T-18B on palm-wafer, pp 20, tp 16, 21 micro-batches of 51, fp16,
  full recompute, full link and DRAM-port contention                            target < 2 s
- 64 x 64-tile wafer: GPT-3 175B, tp 16, pp 64, dp 4 (issue 10's speed bar)     target < 6 s
and the analytic engine's in-process evaluations per second (target ≥ 1,000).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = [
    ("GPT-3 175B, 64 A100", 1.0,
     ["--system", "dgx-a100", "--model", "gpt3-175b", "--tp", "8", "--pp", "8", "--dp", "1",
      "--global-batch", "64", "--interleave", "3"]),
    ("1T GPT, 3,072 A100", 3.0,
     ["--system", "dgx-a100", "--model", "gpt-1008b", "--tp", "8", "--pp", "64", "--dp", "6",
      "--global-batch", "3072"]),
    ("PALM wafer T-18B", 2.0,
     ["--system", "palm-wafer", "--model", "t-18b", "--tp", "16", "--pp", "20", "--dp", "1",
      "--micro-batch", "51", "--global-batch", "1071", "--dtype", "fp16", "--recompute", "full"]),
    ("64x64 wafer GPT-3", 6.0,
     ["--system", "wafer-64x64", "--model", "gpt3-175b", "--tp", "16", "--pp", "64", "--dp", "4"]),
]


def whole_process(args: list[str]) -> tuple[float, dict]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tilewright.engine.cli", "run", *args, "--json"], cwd=ROOT,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 3):
        raise SystemExit(proc.stderr)
    return wall, json.loads(proc.stdout)


def analytic_rate() -> float:
    from tilewright.engine.engines.analytic.engine import AnalyticEngine
    from tilewright.engine.io.presets import load_project_preset
    from tilewright.engine.simulate import make_plan

    plan = make_plan(load_project_preset("megatron-18b-dgx-a100"))
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < 2.0:
        AnalyticEngine(timeline=False).run(plan)  # what search evaluates: no Gantt slices
        n += 1
    return n / (time.perf_counter() - start)


def main() -> None:
    print(f"{'case':<22} {'wall s':>7} {'target':>7} {'events':>8} {'events/s':>10} {'sim s':>7}  verdict")
    for name, target, args in CASES:
        wall, data = whole_process(args)
        rate = data["events"] / data["wall_time_s"] if data["wall_time_s"] else 0.0
        verdict = "ok" if wall < target else "SLOW"
        print(f"{name:<22} {wall:>7.2f} {target:>7.1f} {data['events']:>8} {rate:>10.0f} "
              f"{data['iteration_time_s']:>7.2f}  {verdict}")
    rate = analytic_rate()
    print(f"analytic engine (plan reused): {rate:.0f} evaluations/s (target ≥ 1000) "
          f"{'ok' if rate >= 1000 else 'SLOW'}")


if __name__ == "__main__":
    main()
