"""Search the tp × pp × dp × micro-batch × recompute mappings of a model on a system, from Python.

    python examples/parallelism_search.py [--devices N] [--global-batch B] [--top K]

The same search as `tilewright search`: every legal mapping is ranked by the fast (analytic) estimator,
and the best ``top`` are re-simulated on the event engine. ``progress(fraction, text)`` and ``cancel()`` are
the job protocol (``tilewright.engine.jobs``) the command line's progress bar and the studio both use.
"""

from __future__ import annotations

import argparse

from tilewright.engine.io.presets import load_project_preset
from tilewright.engine.search.parallel.report import search_text
from tilewright.engine.search.parallel.search import search


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="megatron-18b-dgx-a100", help="a training project: its model and system")
    parser.add_argument("--devices", type=int, default=64, help="GPUs available (the search may use fewer)")
    parser.add_argument("--global-batch", type=int, default=128)
    parser.add_argument("--top", type=int, default=1, help="re-simulate the best K on the event engine (0: none)")
    args = parser.parse_args()

    project = load_project_preset(args.preset)  # its mapping is ignored: the search chooses one
    result = search(project, args.devices, args.global_batch, top=args.top, keep=5, resimulate=args.top > 0)
    print(search_text(result))  # the table `tilewright search` prints
    if not result.ranked:
        raise SystemExit("no mapping fits in memory")
    best = result.ranked[0]
    c = best.candidate
    print(f"best: tp {c.tp} × pp {c.pp} × dp {c.dp} on {c.devices} devices, micro-batch {c.micro_batch}, "
          f"recompute {c.recompute.value}: {best.iteration_time_s:.3f} s per iteration (estimated)")
    if best.event is not None:  # the event engine's verdict on the same mapping
        print(f"      re-simulated: {best.event.iteration_time_s:.3f} s, MFU {100 * best.event.mfu:.1f} %")


if __name__ == "__main__":
    main()
