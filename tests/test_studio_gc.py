"""The cyclic garbage collector never runs on a worker thread, yet collects what jobs leave behind:
automatic collection is off while a job runs, the GUI thread collects young garbage meanwhile and
everything once the last job ended (nothing stays frozen out of its reach)."""

from __future__ import annotations

import gc
import os
import threading
import weakref

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from tilewright.studio import gc_guard  # noqa: E402
from tilewright.studio.workers import Job, start  # noqa: E402


class Cyclic:
    """Refers to itself, so only the cyclic collector can free it; says on which thread it was freed."""

    freed_on: list[str] = []

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        Cyclic.freed_on.append(threading.current_thread().name)


def _run(qtbot, fn) -> Job:
    job = Job(lambda **_protocol: fn())  # a job's function takes progress= and cancel=; these ignore them
    with qtbot.waitSignal(job.signals.finished, timeout=10_000):
        start(job)
    return job


def test_collection_is_off_during_a_job_and_on_again_after(qtbot):
    seen: dict[str, bool] = {}
    _run(qtbot, lambda: seen.update(enabled=gc.isenabled()))
    assert seen["enabled"] is False
    qtbot.waitUntil(gc.isenabled, timeout=2000)  # the full pass ran and switched it back on


def test_cyclic_garbage_made_by_a_job_is_collected_after_it_ends(qtbot):
    refs: list[weakref.ref] = []

    def make_garbage() -> None:
        refs.extend(weakref.ref(Cyclic()) for _ in range(50))  # unreachable the moment each is made

    _run(qtbot, lambda: None)  # the first job ever freezes the start-up heap, once
    qtbot.waitUntil(gc.isenabled, timeout=2000)
    frozen = gc.get_freeze_count()
    Cyclic.freed_on = []
    _run(qtbot, make_garbage)
    qtbot.waitUntil(lambda: all(r() is None for r in refs), timeout=2000)
    assert Cyclic.freed_on and set(Cyclic.freed_on) == {threading.main_thread().name}
    qtbot.waitUntil(gc.isenabled, timeout=2000)
    assert gc.get_freeze_count() <= frozen  # jobs freeze nothing more (frozen garbage is never collected)


def test_young_garbage_is_collected_on_the_gui_thread_while_a_long_job_runs(qtbot):
    release = threading.Event()
    refs: list[weakref.ref] = []
    made = threading.Event()

    def long_job() -> None:
        refs.extend(weakref.ref(Cyclic()) for _ in range(2 * gc.get_threshold()[0]))  # enough to be due
        made.set()
        release.wait(10)

    Cyclic.freed_on = []
    job = Job(lambda **_protocol: long_job())
    start(job)
    try:
        qtbot.waitUntil(made.is_set, timeout=5000)
        qtbot.waitUntil(lambda: all(r() is None for r in refs), timeout=3 * gc_guard.TICK_MS + 2000)
        assert job.ended_at is None and not gc.isenabled()  # the job still runs, automatic collection off
        assert set(Cyclic.freed_on) == {threading.main_thread().name}
        assert any(generation < 2 for generation, _s in gc_guard.pauses())
    finally:
        release.set()
    qtbot.waitUntil(lambda: job.ended_at is not None, timeout=5000)
    qtbot.waitUntil(gc.isenabled, timeout=2000)


def test_the_full_pass_waits_for_a_quiet_turn_of_the_event_loop(qtbot, monkeypatch):
    """A check that fires late (something ran meanwhile) waits again; one on time, or the last allowed
    wait, collects."""
    import time

    collector = gc_guard._Collector()
    passes: list[int] = []
    monkeypatch.setattr(collector, "collect_full", lambda: passes.append(1))
    due = gc_guard.QUIET_MS / 1000

    collector._tries, collector._asked = 0, time.perf_counter() - due - 0.040  # a 40 ms turn delayed it
    collector._quiet_check()
    assert passes == [] and collector._tries == 1 and collector.quiet.isActive()
    collector.quiet.stop()

    collector._tries, collector._asked = gc_guard.QUIET_TRIES, time.perf_counter() - due - 0.040
    collector._quiet_check()
    assert passes == [1]  # waited long enough: it runs anyway

    collector._tries, collector._asked = 0, time.perf_counter() - due
    collector._quiet_check()
    assert passes == [1, 1]  # on time: the loop was idle

    collector.busy()  # a job starting meanwhile cancels the wait
    assert not collector.quiet.isActive() and not collector.full.isActive()
    collector.tick.stop()
