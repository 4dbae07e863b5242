"""Cancel in the studio stops the engine and frees what it built: a real run of a large preset is
cancelled while it simulates; the worker ends within a bound, and once the studio's own collection has
run (``studio.gc_guard``: a full pass after the last job ends — no ``gc.collect()`` of the test's) the
memory the run took is back. A first run, cancelled the same way, fills the session's bounded caches
(the engine's plan memo, Qt's signature cache) first, so what is measured is the run itself."""

from __future__ import annotations

import gc
import os
import time
import tracemalloc

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from tilewright.engine.io import load_project  # noqa: E402
from tilewright.studio import gc_guard  # noqa: E402
from tilewright.studio.workers import PLANNING  # noqa: E402

PALM = "presets/projects/palm-wafer-t18b.json"  # ~1.5 s of event simulation, 50–100k slices
STOP_WITHIN_S = 10.0  # tracemalloc slows the engine several times; a run that did not stop takes minutes
CANCEL_AT = 0.5  # of the engine's progress: well into the event simulation
GROWN_AT_LEAST = 4 * 2**20  # the run must have built something worth freeing before the cancel
LEFT_AT_MOST = 0.05  # of what the run had grown to


def _current() -> int:
    return tracemalloc.get_traced_memory()[0]


def _full_passes() -> int:
    return sum(1 for generation, _ in gc_guard._COLLECTOR.pauses if generation == 2)


def _run_and_cancel(w, qtbot) -> tuple[int, int]:  # noqa: ANN001
    """Start a run, cancel it mid-simulation; (bytes it had grown by, bytes left after the studio's full
    collection), from the traced memory before it started."""
    before = _current()
    simulating = []

    def on_progress(fraction: float, text: str) -> None:
        if text != PLANNING and fraction > CANCEL_AT:
            simulating.append(fraction)

    w.runner.progress.connect(on_progress)
    assert w.run_simulation()
    job = w.runner.job
    qtbot.waitUntil(lambda: bool(simulating), timeout=120_000)
    w.runner.progress.disconnect(on_progress)
    grown = _current() - before
    full_passes = _full_passes()
    cancelled_at = time.monotonic()
    w.cancel_run()
    qtbot.waitUntil(lambda: job.ended_at is not None, timeout=int(STOP_WITHIN_S * 1000))
    assert job.ended_at - cancelled_at < STOP_WITHIN_S  # the engine polled the flag and stopped
    assert w.runner.last_result is None and w.runner.last_record is None
    qtbot.waitUntil(lambda: _full_passes() > full_passes, timeout=10_000)  # the studio's own collection
    return grown, _current() - before


def test_cancel_stops_the_engine_and_frees_its_memory(make_window, qtbot):
    w = make_window(load_project(PALM), size=(1200, 800), persist=False)
    qtbot.waitUntil(lambda: w.status.is_checked, timeout=60_000)
    gc.collect()
    tracemalloc.start()
    try:
        _run_and_cancel(w, qtbot)  # fills the bounded caches
        grown, left = _run_and_cancel(w, qtbot)
    finally:
        tracemalloc.stop()
    print(f"the run grew {grown / 2**20:.1f} MiB; {left / 2**20:.2f} MiB left after cancel")
    assert grown > GROWN_AT_LEAST, f"the run had only grown {grown / 2**20:.1f} MiB"
    assert left < LEFT_AT_MOST * grown, f"{left / 2**20:.1f} MiB of {grown / 2**20:.1f} MiB still held"
