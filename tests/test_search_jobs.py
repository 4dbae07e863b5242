"""The job protocol (``engine.jobs``) in every exploration: ``progress(fraction, text)`` climbs from 0 to 1,
``cancel()`` stops the work with ``Cancelled``, and a cancelled sweep stops its workers and can be resumed."""

from __future__ import annotations

import csv
import json
import multiprocessing
import time
from pathlib import Path

import pytest
from tilewright.engine.io import save_project
from tilewright.engine.io.presets import load_project_preset
from tilewright.engine.ir import Project, RunSettings
from tilewright.engine.ir.workload import BertSpec
from tilewright.engine.jobs import Cancelled
from tilewright.engine.search.hardware.search import search_hardware
from tilewright.engine.search.multilevel.map import multilevel_map
from tilewright.engine.search.parallel.search import search
from tilewright.engine.search.sweep import executors
from tilewright.engine.search.sweep.run import load_spec, run_sweep
from tilewright.engine.workloads import build_workload

from tests.factories import cluster, small_gpt, small_project


class Recorder:
    """A progress callback that keeps what it was told, and a cancel that fires on a condition."""

    def __init__(self, stop_when: str | None = None) -> None:
        self.calls: list[tuple[float, str]] = []
        self.stop_when = stop_when

    def __call__(self, fraction: float, text: str = "") -> None:
        self.calls.append((fraction, text))

    def cancel(self) -> bool:
        return self.stop_when is not None and any(self.stop_when in t for _, t in self.calls)

    def assert_climbs_to_one(self) -> None:
        fractions = [f for f, _ in self.calls]
        assert fractions and all(0.0 <= f <= 1.0 for f in fractions)
        assert fractions == sorted(fractions)
        assert fractions[-1] == pytest.approx(1.0)


def _search_project() -> Project:
    return Project(name="t", hardware=cluster(nodes=2), workload=small_gpt(), run=RunSettings(dtype="bf16"))


def test_parallelism_search_reports_fractions_and_keeps_its_texts():
    rec = Recorder()
    search(_search_project(), 16, 32, top=2, progress=rec)
    rec.assert_climbs_to_one()
    texts = [t for _, t in rec.calls if t]
    assert texts[0].startswith("search: ") and "candidates in the space" in texts[0]
    assert sum("event engine" in t for t in texts) >= 2  # one share of the bar per re-simulation


def test_parallelism_search_stops_when_cancelled():
    rec = Recorder(stop_when="candidates in the space")
    with pytest.raises(Cancelled):
        search(_search_project(), 16, 32, top=2, progress=rec, cancel=rec.cancel)
    assert not any("event engine" in t for _, t in rec.calls)


def test_hardware_search_reports_and_cancels():
    workload = build_workload(BertSpec(name="bert-tiny", layers=2, hidden=128, heads=2, seq_len=64, vocab=512))
    rec = Recorder()
    search_hardware(workload, area_mm2=400, power_w=250, pp=2, progress=rec)
    rec.assert_climbs_to_one()
    assert [t for _, t in rec.calls if t][0].startswith("hw-search: stage 0")
    stop = Recorder(stop_when="stage 0")
    with pytest.raises(Cancelled):
        search_hardware(workload, area_mm2=400, power_w=250, pp=2, progress=stop, cancel=stop.cancel)
    assert not any("stage 1" in t for _, t in stop.calls)


def test_multilevel_map_reports_phases_and_cancels():
    project = load_project_preset("tpu-v4-llama2-7b")
    rec = Recorder()
    multilevel_map(project, progress=rec)
    rec.assert_climbs_to_one()
    assert any("MILP" in t for _, t in rec.calls) and any("analytic engine" in t for _, t in rec.calls)
    stop = Recorder(stop_when="MILP")
    with pytest.raises(Cancelled):
        multilevel_map(project, progress=stop, cancel=stop.cancel)
    assert not any("analytic engine" in t for _, t in stop.calls)


def _sweep(tmp_path: Path, values: list[int]) -> tuple:
    save_project(small_project(), tmp_path / "base.json")
    spec = {"base": "base.json", "set": {"run.engine": "analytic"},
            "parameters": [{"path": "mapping.micro_batch", "values": values}]}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    return load_spec(str(tmp_path / "spec.json"))


def _rows(path: Path) -> list[dict]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_sweep_in_this_process_stops_between_points_and_resumes(tmp_path: Path):
    spec, base, source = _sweep(tmp_path, [1, 2, 4])
    out = tmp_path / "r.csv"
    rec = Recorder(stop_when="sweep: 1/")
    with pytest.raises(Cancelled):
        run_sweep(spec, base, source, str(out), workers=1, progress=rec, cancel=rec.cancel)
    assert len(_rows(out)) == 1
    again = Recorder()
    result = run_sweep(spec, base, source, str(out), workers=1, progress=again)
    assert (result.skipped, result.ran) == (1, 2)
    again.assert_climbs_to_one()


def _slow_unless_first(base, overrides, source, **kw):
    """Micro-batch 1 runs; the other points would take a minute (a cancel must not wait for them)."""
    if overrides["mapping.micro_batch"] != 1:
        time.sleep(60)
    return REAL_RUN_POINT(base, overrides, source, **kw)


REAL_RUN_POINT = executors.run_point


def test_cancelled_pool_sweep_kills_its_workers_and_leaves_a_resumable_csv(tmp_path: Path, monkeypatch):
    spec, base, source = _sweep(tmp_path, [1, 2, 4])
    out = tmp_path / "r.csv"
    monkeypatch.setattr(executors, "run_point", _slow_unless_first)  # inherited by the forked workers
    rec = Recorder(stop_when="sweep: 1/")
    start = time.monotonic()
    with pytest.raises(Cancelled):
        run_sweep(spec, base, source, str(out), workers=2, progress=rec, cancel=rec.cancel)
    assert time.monotonic() - start < 30  # the sleeping workers were killed, not waited for
    assert multiprocessing.active_children() == []
    assert [r["mapping.micro_batch"] for r in _rows(out)] == ["1"]
    monkeypatch.setattr(executors, "run_point", REAL_RUN_POINT)
    result = run_sweep(spec, base, source, str(out), workers=2)
    assert (result.skipped, result.ran) == (1, 2)
    assert sorted(r["mapping.micro_batch"] for r in _rows(out)) == ["1", "2", "4"]


def test_pool_workers_die_with_a_sweep_killed_outright(tmp_path):
    """kill -9 of the sweep cannot stop its pool; its workers notice the orphaning and exit."""
    import signal
    import subprocess
    import sys
    import textwrap
    import time

    script = textwrap.dedent(
        """
        import os, sys, time
        from concurrent.futures import ProcessPoolExecutor
        from tilewright.engine.search.sweep import executors

        def slow(base, overrides, source):
            time.sleep(60)

        if __name__ == "__main__":
            pool = ProcessPoolExecutor(2, initializer=executors._pool_init,
                                       initargs=({}, {}, "x", slow, os.getpid()))
            futs = [pool.submit(executors._pool_task, ("k", {})) for _ in range(2)]
            time.sleep(1.5)
            print(" ".join(str(p) for p in pool._processes), flush=True)
            time.sleep(60)
        """
    )
    path = tmp_path / "sweep_like.py"
    path.write_text(script)
    proc = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, text=True)
    workers = [int(p) for p in proc.stdout.readline().split()]
    assert len(workers) == 2
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 15
    alive = workers
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [p for p in alive if _running(p)]
    assert not alive, f"workers still running: {alive}"


def _running(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by init) counts as gone
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
