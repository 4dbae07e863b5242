"""Run a small grid sweep over project fields from Python and print its Pareto front.

    python examples/sweep.py [OUT.csv] [--workers N]

A sweep spec is what `tilewright sweep SPEC.json` reads (presets/sweeps/ has one), built here as a dict:
a base project, the fields to vary, fixed overrides and the objectives. Points run on a process pool and
each finished row is appended to the CSV at once, so running the same sweep again resumes it.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from tilewright.engine.io import project_to_data
from tilewright.engine.io.presets import load_project_preset
from tilewright.engine.search.sweep.run import run_sweep, sweep_text
from tilewright.engine.search.sweep.spec import SweepSpec

SPEC = {
    "base": "megatron-18b-dgx-a100",
    "method": "grid",  # or "random" / "lhs" with "samples": N
    "set": {"run.engine": "analytic"},  # applied to every point
    "parameters": [
        {"path": "mapping.pp", "values": [1, 2]},
        {"path": "mapping.dp", "values": [8, 16]},
    ],
    "objectives": [{"metric": "samples_per_s", "sense": "max"}, {"metric": "power_w", "sense": "min"}],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", help="the results CSV (default: a temporary folder)")
    parser.add_argument("--workers", type=int, default=2, help="points run at once")
    args = parser.parse_args()
    out = args.out or str(Path(tempfile.mkdtemp()) / "sweep.csv")

    spec = SweepSpec.model_validate(SPEC)  # a bad spec is refused here with the field and the reason
    base = project_to_data(load_project_preset(spec.base))  # the base project's plain data
    result = run_sweep(spec, base, spec.base, out, workers=args.workers)
    print(sweep_text(result, spec))
    print(f"{result.ran} points run, {result.skipped} already in {out}; {len(result.pareto)} on the Pareto front:")
    for row in result.pareto:
        print(f"  pp {row['mapping.pp']:g} dp {row['mapping.dp']:g}: {row['samples_per_s']:.2f} samples/s, "
              f"{row['power_w']:,.0f} W")


if __name__ == "__main__":
    main()
