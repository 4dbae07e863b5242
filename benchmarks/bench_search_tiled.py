"""Search speed on tiled multi-chip presets (issue 10): whole-process wall time of `tilewright search`,
where every op of every candidate is costed with its spatial split over a chip's cores.

- Llama-2 7B on a Blackhole Galaxy (32 chips of 11 x 10 cores), global batch 64, top 3 re-simulated on
  the event engine                                                           target < 5 s (interactive)
- GPT 1.7B on a Wormhole T3000 (8 chips of 8 x 8 cores), global batch 32, top 3 re-simulated
                                                                             target < 5 s
- both again ranking only (no re-simulation)                                  reported
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GALAXY = ["--system", "blackhole-galaxy", "--model", "llama2-7b", "--devices", "32", "--global-batch", "64"]
T3000 = ["--system", "wormhole-t3000", "--model", "gpt-1.7b", "--devices", "8", "--global-batch", "32"]
CASES = [
    ("Llama-2 7B, Galaxy, top 3", 5.0, [*GALAXY, "--top", "3"]),
    ("GPT 1.7B, T3000, top 3", 5.0, [*T3000, "--top", "3"]),
    ("Llama-2 7B, Galaxy, ranking", None, [*GALAXY, "--no-simulate"]),
    ("GPT 1.7B, T3000, ranking", None, [*T3000, "--no-simulate"]),
]


def whole_process(args: list[str]) -> tuple[float, dict]:
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "tilewright.engine.cli", "search", *args, "--json", "--quiet"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return wall, json.loads(proc.stdout)


def main() -> None:
    print(f"{'case':<30} {'wall s':>7} {'target':>7} {'search s':>8} {'evaluated':>10} {'timed':>6}  best  verdict")
    failed = False
    for name, target, args in CASES:
        wall, data = whole_process(args)
        best = data["candidates"][0]
        label = f"tp{best['tp']} pp{best['pp']} dp{best['dp']} mb{best['micro_batch']} v{best['interleave']}"
        event = best.get("event_iteration_time_s")
        times = f"{best['iteration_time_s']:.3f} s" + (f" / event {event:.3f} s" if event else "")
        verdict = "-" if target is None else ("ok" if wall < target else "SLOW")
        failed |= verdict == "SLOW"
        print(
            f"{name:<30} {wall:7.1f} {target or '-':>7} {data['search_time_s']:8.1f} {data['evaluated']:>10,} "
            f"{data['timed']:>6}  {label} ({times}, {len(best.get('spatial_splits', []))} split rows)  {verdict}"
        )
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
