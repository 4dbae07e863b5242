"""Simulate a preset project from Python and read its metrics, as `tilewright run PRESET --json` does.

    python examples/simulate_preset.py [PRESET] [--engine analytic|event] [--trace trace.json]

A project is a pydantic model (``tilewright.engine.ir.project.Project``); ``simulate`` plans it and runs the
engine its ``run.engine`` names. Everything here is Qt-free and offline.
"""

from __future__ import annotations

import argparse

from tilewright.engine.io import project_from_data, project_to_data
from tilewright.engine.io.overrides import apply_overrides
from tilewright.engine.io.presets import list_presets, load_project_preset
from tilewright.engine.results.chrome_trace import write_chrome_trace
from tilewright.engine.simulate import simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("preset", nargs="?", default="gpt3-dgx-a100", choices=list_presets("projects"))
    parser.add_argument("--engine", choices=["analytic", "event"], default="analytic",
                        help="analytic: no contention, a fraction of the time; event: the full simulation")
    parser.add_argument("--trace", metavar="FILE.json", help="also write a Chrome/Perfetto trace")
    args = parser.parse_args()

    project = load_project_preset(args.preset)  # a preset's name, or a path to a project file
    # Change a field as `--set run.engine=...` does: on the project's data, validated like a file.
    data = project_to_data(project)
    apply_overrides(data, "run.engine", args.engine, "simulate_preset.py")
    project = project_from_data(data, "simulate_preset.py")

    result = simulate(project)  # also takes progress=(fraction, text) and cancel=() callbacks (engine.jobs)
    m = result.metrics_json()
    print(f"{project.name}: {result.devices} devices, {result.mode} on the {result.engine} engine")
    print(f"  iteration time   {m['iteration_time_s'] * 1e3:10.2f} ms")
    print(f"  throughput       {m['samples_per_s']:10.2f} samples/s, {m['tokens_per_s']:,.0f} tokens/s")
    print(f"  MFU              {100 * m['mfu']:10.1f} %")
    print(f"  peak memory      {m['peak_memory_bytes'] / 2**30:10.2f} GiB per device")
    if result.mode == "infer":
        print(f"  TTFT             {m['ttft_s'] * 1e3:10.2f} ms")
    if "energy_j" in m:  # from the hardware's pJ/byte and pJ/bit figures; a part without one counts 0
        parts = ", ".join(f"{k} {v:.1f} J" for k, v in m["energy_breakdown_j"].items() if v)
        print(f"  energy           {m['energy_j']:10.2f} J per iteration ({parts})")
    if result.oom is not None:
        print(f"  OUT OF MEMORY on {result.oom.device}")
    if args.trace:
        write_chrome_trace(result, args.trace)  # whole nanoseconds: Perfetto imports every slice
        print(f"  trace written to {args.trace}")


if __name__ == "__main__":
    main()
