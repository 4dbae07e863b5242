"""Gantt speed with a synthetic 1,000,000-slice timeline (issue: studio results). Prints seconds for:

- preparing the chart data (worker thread after a run: sorting, per-slice columns)
- showing it (GUI thread: rows, legend, first level-of-detail pass)
- a level-of-detail pass at several zooms, and when every row is in view (the worst case)
- painting the widget, and a hover lookup

Targets: every GUI-thread step well under 100 ms, so zoom and pan stay interactive.
Run: ``QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/bench_gantt.py [slices]``
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def timed(label: str, fn, repeat: int = 3):  # noqa: ANN001, ANN201
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    print(f"{label:<48} {best:8.4f} s")
    return out


def main() -> None:
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    from tilewright.studio.model.gantt_data import GanttData
    from tilewright.studio.ui.results.gantt import GanttView
    from tilewright.studio.ui.results.synthetic import synthetic_timeline
    from tilewright.studio.ui.results.time_cursor import TimeCursor

    slices = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    timeline = timed(f"synthetic timeline ({slices:,} slices)", lambda: synthetic_timeline(slices), 1)
    data = timed("GanttData (worker thread)", lambda: GanttData(timeline))
    view = GanttView(TimeCursor())
    view.resize(1600, 450)
    view.show()
    app.processEvents()
    timed("set_data (GUI: rows, legend, first pass)", lambda: view.set_data(data))
    print(f"{'  bars drawn for the opening view':<48} {view.bar_count():8d}")
    span = data.span
    for fraction in (1.0, 0.1, 0.01, 0.001):
        view.viewbox.setXRange(0.3 * span, 0.3 * span + fraction * span, padding=0)
        timed(f"level of detail, {fraction:g} of the run in view", view.refresh_bars)
        print(f"{'  bars drawn':<48} {view.bar_count():8d}")
    view.viewbox.setRange(xRange=(0, span), yRange=(-0.5, len(data.rows) - 0.5), padding=0)
    timed("level of detail, every row in view (worst)", view.refresh_bars)
    print(f"{'  bars drawn':<48} {view.bar_count():8d}")
    timed("paint the widget (grab)", lambda: view.grab())
    view.fit()
    timed("hover lookup (1,000 points)", lambda: [view.text_at(span * i / 1000, 1 + i % 20) for i in range(1000)], 1)
    view.release()


if __name__ == "__main__":
    main()
