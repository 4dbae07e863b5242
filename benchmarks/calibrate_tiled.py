"""Compare the engine's spatial GEMM model with Tenstorrent's measured GEMMs (tenstorrent_gemm.csv).

Every traced row (host-measured time of a GEMM replayed from a trace: device time plus the dispatch gap)
— Wormhole n150 on its 8×8 grid, Blackhole p150 on its 11×10 grid and on the 13×10 grid of older firmware,
bf16 / bfp8 / bfp4 at LoFi / HiFi2 / HiFi4 — runs through ``perf.spatial.gemm_on_grid`` with the
``wormhole-n150`` and ``blackhole-p150`` presets. The 13×10 rows use the p150 preset with only its grid
widened: the same constants (a held-out-style check). What follows the experiment, not the preset: where the
row's operands live (``in0/in1/out_storage``: DRAM, or already in L1 for the tuned small shapes) and the
split policy — ``runtime-default`` for ttnn's out-of-box rows, ``2d`` over the whole grid for the manually
tuned ones (the K-block depth then chosen by the model's cost, never from the measurement).
Error of a row = max(pred/meas, meas/pred) − 1.

Usage: python benchmarks/calibrate_tiled.py [--rows]
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections import defaultdict
from functools import cache
from pathlib import Path

from tilewright.engine.io.presets import load_system
from tilewright.engine.ir.hardware import Compute, Memory
from tilewright.engine.perf.spatial import GridChip, gemm_on_grid
from tilewright.engine.perf.spatial_chip import grid_chip

CSV = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "tiled" / "tenstorrent_gemm.csv"
PRESET = {"n150": "wormhole-n150", "p150": "blackhole-p150"}
FORMAT = {"BFLOAT16": "bf16", "BFLOAT8_B": "bfp8", "BFLOAT4_B": "bfp4"}
POLICY = {"out_of_box": "runtime-default", "manually_tuned": "2d"}


def rows(path: Path = CSV) -> list[dict[str, str]]:
    """The traced rows (what a model replayed from a trace sees per op)."""
    with open(path) as fh:
        return [r for r in csv.DictReader(fh) if r["use_trace"] == "True"]


def preset_device(name: str) -> tuple[Compute, Memory]:
    chip = load_system(name).children[0]
    assert chip.compute is not None and chip.compute.grid is not None, f"{name}: not a grid device"
    return chip.compute, chip.memories[0]


@cache
def chip_for(device: str, grid_x: int, grid_y: int) -> GridChip:
    """The preset's chip; a row measured on another compute grid gets that grid and nothing else."""
    compute, dram = preset_device(PRESET[device])
    grid = compute.grid
    assert grid is not None
    if (grid.cols, grid.rows) != (grid_x, grid_y):
        compute = compute.model_copy(update={"grid": grid.model_copy(update={"cols": grid_x, "rows": grid_y})})
    return grid_chip(compute, dram)


def machine(r: dict[str, str]) -> str:
    return f"{PRESET[r['device']]} {r['grid_x']}×{r['grid_y']}"


def predict(r: dict[str, str]):  # noqa: ANN201 - a perf.spatial_cost.GemmCost
    fmt = FORMAT[r["dtype"]]
    chip = chip_for(r["device"], int(r["grid_x"]), int(r["grid_y"]))
    in_dram = tuple(r[k] == "DRAM" for k in ("in0_storage", "in1_storage", "out_storage"))
    return gemm_on_grid(chip, int(r["m"]), int(r["k"]), int(r["n"]), fmt, fmt, fmt, r["math_fidelity"],
                        POLICY[r["config"]], None, in_dram)  # type: ignore[arg-type]


def measured(r: dict[str, str]) -> float:
    return float(r["inference_time_avg_ns"]) * 1e-9


def error(r: dict[str, str]) -> float:
    p, m = predict(r).seconds, measured(r)
    return max(p / m, m / p) - 1


def summary(label: str, errs: list[float]) -> str:
    return (f"  {label:<44} n={len(errs):4d}  median {100 * statistics.median(errs):5.1f} %  "
            f"max {1 + max(errs):4.2f}×")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", action="store_true", help="print every row")
    args = ap.parse_args()
    data = rows()
    groups: dict[str, list[float]] = defaultdict(list)
    configs: dict[str, list[float]] = defaultdict(list)
    every = []
    for r in data:
        e = error(r)
        every.append(e)
        groups[f"{machine(r)} {FORMAT[r['dtype']]} {r['math_fidelity']}"].append(e)
        configs[f"{machine(r)} {r['config']}"].append(e)
        if args.rows:
            c = predict(r)
            print(f"{machine(r):<22} {r['config'][:3]} {FORMAT[r['dtype']]:<4} {r['math_fidelity']:<5} "
                  f"{r['m']:>5} {r['k']:>5} {r['n']:>5}  meas {measured(r) * 1e6:9.1f} µs  pred "
                  f"{c.seconds * 1e6:9.1f} µs ({1 + e:4.2f}×)  {c.bound:<14} {c.split.describe()}")
    print("traced GEMMs, host time: engine (perf.spatial) vs tenstorrent_gemm.csv")
    for k in sorted(groups):
        print(summary(k, groups[k]))
    for k in sorted(configs):
        print(summary(k, configs[k]))
    print(summary("all traced rows", every))


if __name__ == "__main__":
    main()
