"""Search speed targets (issue 5). Whole-process wall time of `tilewright search`:

- 530B GPT (gpt-529.6b) on 5,128 A100s, global batch 2,520, top 3 re-simulated on the event engine
                                                                              target < 30 s (Calculon: 3 min 43 s)
- the same without re-simulation (ranking only)                              reported
and, for each, evaluations per second: candidates whose memory was assessed over the search time,
and candidates timed (the rest were rejected by memory or by the bound).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE = ["--system", "dgx-a100", "--model", "gpt-529.6b", "--devices", "5128", "--global-batch", "2520"]
CASES = [
    ("530B, 5,128 A100, top 3", 30.0, [*BASE, "--top", "3"]),
    ("530B, ranking only", None, [*BASE, "--no-simulate"]),
]


def whole_process(args: list[str]) -> tuple[float, dict]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tilewright.engine.cli", "search", *args, "--json", "--quiet"],
                          cwd=ROOT,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return wall, json.loads(proc.stdout)


def main() -> None:
    print(f"{'case':<26} {'wall s':>7} {'target':>7} {'search s':>8} {'evaluated':>10} {'eval/s':>9} "
          f"{'timed':>6}  best (iteration s, fast / event)  verdict")
    failed = False
    for name, target, args in CASES:
        wall, data = whole_process(args)
        rate = data["evaluated"] / data["search_time_s"] if data["search_time_s"] else 0.0
        best = data["candidates"][0]
        event = best.get("event_iteration_time_s")
        label = f"tp{best['tp']} pp{best['pp']} dp{best['dp']} mb{best['micro_batch']} v{best['interleave']}"
        label += " ovl-grad" if best.get("overlap_grad_reduce") else ""
        times = f"{best['iteration_time_s']:.2f}" + (f" / {event:.2f}" if event else "")
        verdict = "-" if target is None else ("ok" if wall < target else "SLOW")
        failed |= verdict == "SLOW"
        print(f"{name:<26} {wall:7.1f} {target or '-':>7} {data['search_time_s']:8.1f} {data['evaluated']:>10,} "
              f"{rate:9,.0f} {data['timed']:>6}  {label} ({times})  {verdict}")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
