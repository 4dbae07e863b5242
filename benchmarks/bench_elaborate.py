"""Elaboration speed: ``python benchmarks/bench_elaborate.py``.

Targets: the 64 x 64-tile wafer in well under a second (< 0.3 s) and a 384-node DGX-A100 cluster
(3,072 GPUs) in < 0.5 s. Prints the best of a few runs, plus the cost of a first batch of routes, so a
regression in either the build or the lazy routing shows up.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tilewright.engine.hardware import elaborate  # noqa: E402
from tilewright.engine.ir.hardware import Component  # noqa: E402

PRESETS = ROOT / "presets" / "systems"


def load(name: str) -> Component:
    return Component.model_validate_json((PRESETS / f"{name}.json").read_text())


def best_of(fn, repeat: int = 5) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    cases = [
        ("wafer-64x64", None, 0.3),
        ("dgx-a100", 3072, 0.5),
        ("palm-wafer", None, None),
        ("tpu-v4-torus", None, None),
    ]
    for name, needed, target in cases:
        comp = load(name)
        secs, hg = best_of(lambda comp=comp, needed=needed: elaborate(comp, needed))
        s = hg.summary()
        n = len(hg.devices)
        t = time.perf_counter()
        for i in range(0, n, max(1, n // 256)):
            hg.device_route(0, i)
        route_ms = (time.perf_counter() - t) * 1e3
        verdict = "" if target is None else ("  OK" if secs < target else f"  SLOW (target {target} s)")
        print(
            f"{name:14s} devices={n:5d} links={s['links']:6d} nodes={s['nodes']:6d}  "
            f"elaborate {secs * 1e3:7.1f} ms   first 256 routes {route_ms:6.1f} ms{verdict}"
        )


if __name__ == "__main__":
    main()
