"""Compare the engine's collective costs with Tenstorrent's measured CCLs (tenstorrent_ccl.csv).

Every all-gather, reduce-scatter and all-reduce row — Wormhole LoudBox (2, 4 chips on a line, 8 on the ring)
and the 8-chip axis of a Blackhole Galaxy — runs through ``perf.collectives.collective`` on the
``wormhole-t3000`` and ``blackhole-galaxy`` presets: the same decomposition both engines time, from the
presets' link bandwidths, framing and per-operation costs (each sourced in the preset). The group is the
first n chips of the first row (the 8-chip axis on the Galaxy; all 8 chips for the LoudBox ring) and the
algorithm the row's topology ("line" or "ring"). One setting follows the experiment rather than the preset:
the number of Ethernet links per direction the CCL report's runs used (its ``links_per_direction_implied``:
1 on the LoudBox, 2 on the Galaxy axis; CCL_bandwidth.md), where the Galaxy preset carries the 4 / 3 that
tt-transformers uses. Error of a row = max(pred/meas, meas/pred) - 1.

Usage: python benchmarks/calibrate_ccl.py [--rows]
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections import defaultdict
from functools import cache
from pathlib import Path

from tilewright.engine.hardware import HardwareGraph, elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir.hardware import Component
from tilewright.engine.perf.collectives import collective

CSV = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "tiled" / "tenstorrent_ccl.csv"
PRESET = {"wormhole_b0": "wormhole-t3000", "blackhole": "blackhole-galaxy"}
OPS = {"all_gather": "all-gather", "reduce_scatter": "reduce-scatter", "all_reduce": "all-reduce"}


def rows(path: Path = CSV) -> list[dict[str, str]]:
    with open(path) as fh:
        return [r for r in csv.DictReader(fh) if r["op"] in OPS]


@cache
def machine(preset: str, links: int) -> HardwareGraph:
    """The preset with ``links`` Ethernet links per neighbour pair on every axis, elaborated."""
    data = load_system(preset).model_dump(mode="json")
    ic = data["interconnect"]
    if ic.get("axis_links"):
        ic["axis_links"] = [links] * len(ic["axis_links"])
    else:
        ic["links"] = links
    return elaborate(Component.model_validate(data))


def group_for(hw: HardwareGraph, n: int) -> list[int]:
    """The first ``n`` chips of the first row; the whole machine when the row is shorter."""
    row = sorted((d for d in hw.devices if d.coord is not None and d.coord[0] == 0), key=lambda d: d.coord)
    if n > len(row):
        return [d.index for d in hw.devices][:n]
    return [d.index for d in row[:n]]


def predict(r: dict[str, str]) -> tuple[float, str, float, str]:
    """(predicted seconds of the row's algorithm, its name, seconds of the engine's own choice, its name)."""
    hw = machine(PRESET[r["arch"]], int(r["links_per_direction_implied"] or 1))
    group = group_for(hw, int(r["n_devices"]))
    kind, size = OPS[r["op"]], float(r["size_bytes"])
    forced = collective(hw, kind, group, size, algorithm=r["topology"])  # type: ignore[arg-type]
    auto = collective(hw, kind, group, size)  # type: ignore[arg-type]
    return forced.time(hw), forced.algorithm, auto.time(hw), auto.algorithm


def error(pred: float, meas: float) -> float:
    return max(pred / meas, meas / pred) - 1


def evaluate() -> list[dict]:
    out = []
    for r in rows():
        pred, alg, auto, auto_alg = predict(r)
        meas = float(r["kernel_time_us"]) * 1e-6
        out.append({"row": r, "pred": pred, "meas": meas, "err": error(pred, meas), "algorithm": alg,
                    "auto": auto, "auto_algorithm": auto_alg})
    return out


def summary(results: list[dict]) -> dict[str, tuple[int, float, float]]:
    """Per machine/op and overall: (rows, median error, max error)."""
    groups: dict[str, list[float]] = defaultdict(list)
    for x in results:
        r = x["row"]
        groups[f"{PRESET[r['arch']]} {r['op']}"].append(x["err"])
        groups["all"].append(x["err"])
    return {k: (len(v), statistics.median(v), max(v)) for k, v in groups.items()}


def by_topology(results: list[dict]) -> dict[str, tuple[int, float, float]]:
    """Per machine, device count and topology, all ops together: (rows, median error, max error)."""
    groups: dict[str, list[float]] = defaultdict(list)
    for x in results:
        r = x["row"]
        groups[f"{PRESET[r['arch']]} {r['n_devices']}-chip {r['topology']}"].append(x["err"])
    return {k: (len(v), statistics.median(v), max(v)) for k, v in sorted(groups.items())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", action="store_true", help="print every row")
    args = ap.parse_args()
    results = evaluate()
    if args.rows:
        print(f"{'preset':>16} {'op':>15} {'n':>2} {'topo':>5} {'bytes':>12} {'meas us':>11} {'pred us':>11} "
              f"{'err':>6}  engine's choice")
        for x in results:
            r = x["row"]
            print(f"{PRESET[r['arch']]:>16} {r['op']:>15} {r['n_devices']:>2} {r['topology']:>5} "
                  f"{int(r['size_bytes']):>12} {x['meas'] * 1e6:>11.2f} {x['pred'] * 1e6:>11.2f} "
                  f"{100 * x['err']:>5.1f}%  {x['auto_algorithm']} {x['auto'] * 1e6:.2f} us")
    print(f"{'machine op':>32} {'rows':>5} {'median':>7} {'max':>6}")
    for k, (n, med, mx) in sorted(summary(results).items(), key=lambda kv: kv[0] == "all"):
        print(f"{k:>32} {n:>5} {100 * med:>6.1f}% {1 + mx:>5.2f}x")
    print(f"{'machine topology':>32} {'rows':>5} {'median':>7} {'max':>6}")
    for k, (n, med, mx) in by_topology(results).items():
        print(f"{k:>32} {n:>5} {100 * med:>6.1f}% {1 + mx:>5.2f}x")
    print("targets: median ≤ 20 %, max < 2x")


if __name__ == "__main__":
    main()
