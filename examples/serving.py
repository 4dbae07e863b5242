"""Serve a stream of requests on a project's devices (continuous batching), then find the highest arrival
rate that still meets a latency SLO — the Python side of `tilewright serve`.

    python examples/serving.py [PRESET] [--requests N] [--rate R]

``simulate_serving(project, ServingConfig(...))`` replays seeded Poisson arrivals (or a trace from
``load_trace``) through the scheduler; an iteration costs what `tilewright run` charges for the same passes.
``sweep_rates`` runs one simulation per rate with the same seed and cost tables.
"""

from __future__ import annotations

import argparse

from tilewright.engine.io.presets import load_project_preset
from tilewright.engine.serving import ServingConfig, simulate_serving, sweep_rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("preset", nargs="?", default="llama2-70b-h100-inference")
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--rate", type=float, default=4.0, help="requests per second")
    args = parser.parse_args()

    project = load_project_preset(args.preset)  # an inference project: its model, devices and mapping
    config = ServingConfig(
        rate=args.rate, count=args.requests, seed=0,
        prompt_tokens=1024, output_tokens=128,  # every request's lengths (default: the project's)
        max_batch=64, token_budget=2048, chunk=512,  # the scheduler: sequences, tokens and prompt chunk per iteration
        slo_ttft_s=1.0, slo_tpot_s=0.05,  # the SLO goodput counts against
    )
    result = simulate_serving(project, config)
    print(result.summary_text())  # the report `tilewright serve` prints
    m = result.metrics()
    print(f"TTFT p50 {m['ttft_s']['p50'] * 1e3:.0f} ms, TPOT p50 {m['tpot_s']['p50'] * 1e3:.1f} ms, "
          f"{m['throughput_output_tokens_per_s']:,.0f} output tokens/s")

    sweep = sweep_rates(project, config, [2.0, 8.0, 16.0, 32.0])
    for rate, point in zip(sweep.rates, sweep.results, strict=True):
        fraction = point.goodput_fraction()
        print(f"  {rate:4.1f} requests/s: goodput {100 * fraction:.0f} % of requests meet the SLO")
    print(f"best rate meeting the SLO: {sweep.best_rate} requests/s")


if __name__ == "__main__":
    main()
