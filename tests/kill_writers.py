"""A process that writes one output over and over, for tests/test_kill_during_writes.py to kill -9 at
random moments. Not collected (no ``test_`` prefix); run as ``python -m tests.kill_writers KIND FOLDER``.

It writes two versions, A and B, of one output with the product's own writer: first each once as a
reference (``FOLDER/ref-A…``, ``FOLDER/ref-B…``), then the target (``FOLDER/target…``) as A, then creates
``FOLDER/ready`` and alternates B, A, B… on the target until killed (or, with ``--once``, writes B once
and exits: the "next save" that must clean up after a killed one).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

Writer = Callable[[Any, Path], Any]
SUFFIX = {"project": ".json", "trace": ".json", "csv": "", "studio-png": ".png", "studio-trace": ".json"}


def _results() -> tuple[Any, Any]:
    """Two different runs, large enough that writing one takes a while (traces of 7–9 MB)."""
    from tilewright.engine.simulate import simulate

    from tests.engine_cases import dgx, small_wafer

    a, b = simulate(small_wafer(global_batch=32)), simulate(dgx(tp=4, pp=2, dp=1, global_batch=64))
    a.wall_time_s = b.wall_time_s = 0.0  # the one figure that differs between two processes
    return a, b


def _projects() -> tuple[Any, Any]:
    """Two versions of a project, a few MB each (a long description stands in for a big design)."""
    from tilewright.engine.io import load_project

    base = load_project("presets/projects/palm-wafer-t18b.json")
    return (
        base.model_copy(update={"description": "A" * 4_000_000}),
        base.model_copy(update={"description": "B" * 3_000_000}),
    )


def _images() -> tuple[Any, Any]:
    """Two noisy images whose PNGs are a few MB (noise does not compress), as the studio's image exports
    (plots, the canvas) hand them to ``exporting.write_image``."""
    import numpy as np
    from PySide6.QtGui import QImage

    images = []
    for seed in (1, 2):
        pixels = np.random.default_rng(seed).integers(0, 256, size=(1200, 1600, 4), dtype=np.uint8)
        images.append(QImage(pixels.tobytes(), 1600, 1200, 1600 * 4, QImage.Format.Format_ARGB32).copy())
    return images[0], images[1]


def payloads_and_writer(kind: str) -> tuple[Any, Any, Writer]:
    if kind == "project":
        from tilewright.engine.io import save_project

        return (*_projects(), save_project)
    if kind == "trace":
        from tilewright.engine.results.chrome_trace import write_chrome_trace

        return (*_results(), write_chrome_trace)
    if kind == "csv":
        from tilewright.engine.results.csv_export import write_csv

        return (*_results(), write_csv)
    if kind == "studio-trace":
        from tilewright.studio.exporting import write_trace

        return (*_results(), write_trace)
    if kind == "studio-png":
        from tilewright.studio.exporting import write_image

        return (*_images(), write_image)
    raise SystemExit(f"unknown kind {kind!r}")


def main(argv: list[str]) -> int:
    kind, folder = argv[0], Path(argv[1])
    a, b, write = payloads_and_writer(kind)
    target = folder / f"target{SUFFIX[kind]}"
    if "--once" in argv:
        write(b, target)
        return 0
    write(a, folder / f"ref-A{SUFFIX[kind]}")
    write(b, folder / f"ref-B{SUFFIX[kind]}")
    write(a, target)
    (folder / "ready").write_text(str(os.getpid()))
    while True:
        write(b, target)
        write(a, target)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
