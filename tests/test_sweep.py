"""Sweeps: spec validation, sampling, CSV streaming, resume, executors, Pareto front."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from tilewright.engine.cli import main
from tilewright.engine.errors import InputError
from tilewright.engine.io import save_project
from tilewright.engine.search.sweep import executors as sweep_mod
from tilewright.engine.search.sweep.run import load_spec, run_sweep
from tilewright.engine.search.sweep.spec import SweepSpec, point_key, points

from tests.factories import small_project

GPU_MEM = "hardware.children.0.children.0.memories.0.bandwidth_bytes_per_s"


def _spec_file(tmp_path: Path, **spec) -> Path:
    project = tmp_path / "base.json"
    save_project(small_project(), project)
    data = {"base": "base.json", "set": {"run.engine": "analytic"}} | spec
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(data))
    return path


def _rows(path: Path) -> list[dict]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_grid_is_the_cartesian_product():
    spec = SweepSpec(base="x", parameters=[
        {"path": "mapping.micro_batch", "values": [1, 2]},
        {"path": GPU_MEM, "min": 1e12, "max": 4e12, "steps": 3, "log": True},
    ])
    pts = points(spec)
    assert len(pts) == 6
    assert [p[GPU_MEM] for p in pts[:3]] == pytest.approx([1e12, 2e12, 4e12])
    assert {p["mapping.micro_batch"] for p in pts} == {1, 2}


def test_latin_hypercube_puts_one_sample_in_each_slice():
    n = 10
    spec = SweepSpec(base="x", method="lhs", samples=n, seed=3, parameters=[
        {"path": "a", "min": 0, "max": 1}, {"path": "b", "min": 10, "max": 20},
    ])
    pts = points(spec)
    for path, lo, hi in (("a", 0, 1), ("b", 10, 20)):
        slices = sorted(int((p[path] - lo) / (hi - lo) * n) for p in pts)
        assert slices == list(range(n))
    assert points(spec) == pts  # the seed makes it reproducible


def test_random_integer_and_discrete_values_stay_in_range():
    spec = SweepSpec(base="x", method="random", samples=50, seed=1, parameters=[
        {"path": "a", "min": 1, "max": 8, "integer": True}, {"path": "b", "values": ["none", "full"]},
    ])
    pts = points(spec)
    assert all(isinstance(p["a"], int) and 1 <= p["a"] <= 8 for p in pts)
    assert {p["b"] for p in pts} == {"none", "full"}


def test_point_key_ignores_order_and_separates_values():
    assert point_key({"a": 1, "b": 2}) == point_key({"b": 2, "a": 1})
    assert point_key({"a": 1}) != point_key({"a": 2})


@pytest.mark.parametrize(
    "spec, where",
    [
        ({"parameters": [{"path": "mapping.tp"}]}, "parameters.0"),
        ({"parameters": [{"path": "mapping.tp", "values": [1], "min": 1, "max": 2}]}, "parameters.0"),
        ({"parameters": [{"path": "a", "min": 2, "max": 1, "steps": 2}]}, "parameters.0"),
        ({"method": "lhs", "parameters": [{"path": "a", "min": 0, "max": 1}]}, "samples"),
        ({"parameters": [{"path": "a", "min": 0, "max": 1}]}, "steps"),
        ({"parameters": []}, "parameters"),
        ({"methd": "grid", "parameters": [{"path": "a", "values": [1]}]}, "methd"),
    ],
)
def test_malformed_specs_name_the_field(tmp_path: Path, capsys, spec: dict, where: str):
    path = _spec_file(tmp_path, **spec)
    with pytest.raises(InputError) as err:
        load_spec(str(path))
    assert where in str(err.value) and str(path) in str(err.value)
    assert main(["sweep", str(path), "--quiet"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_sweep_streams_rows_with_metrics_and_costs(tmp_path: Path):
    path = _spec_file(tmp_path, parameters=[{"path": "mapping.micro_batch", "values": [1, 2]},
                                            {"path": "mapping.tp", "values": [2, 3]}])
    spec, base, source = load_spec(str(path))
    out = tmp_path / "r.csv"
    result = run_sweep(spec, base, source, str(out), workers=1)
    rows = _rows(out)
    assert result.ran == len(rows) == 4
    by_tp = {r["mapping.tp"]: r for r in rows}
    assert by_tp["3"]["status"] == "invalid" and "does not divide heads" in by_tp["3"]["error"]
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == 2
    for r in ok:
        assert float(r["iteration_time_s"]) > 0
        assert float(r["power_w"]) == 16 * 400  # factories: 2 nodes × 8 GPUs of 400 W, nothing else
        assert float(r["area_mm2"]) == 16 * 826
        assert r["key"] == point_key({"mapping.micro_batch": int(r["mapping.micro_batch"]), "mapping.tp": 2})


def test_interrupted_sweep_resumes_without_redoing_points(tmp_path: Path, monkeypatch):
    path = _spec_file(tmp_path, parameters=[{"path": "mapping.micro_batch", "values": [1, 2, 4]},
                                            {"path": "mapping.recompute", "values": ["none", "full"]}])
    spec, base, source = load_spec(str(path))
    out = tmp_path / "r.csv"
    real = sweep_mod.run_point
    calls: list[dict] = []

    def flaky(b, overrides, s, **kw):
        if len(calls) == 2:
            raise KeyboardInterrupt  # the user pressed Ctrl-C during the third point
        calls.append(overrides)
        return real(b, overrides, s, **kw)

    monkeypatch.setattr(sweep_mod, "run_point", flaky)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, base, source, str(out), workers=1)
    assert len(_rows(out)) == 2  # both finished points reached the disk

    counted: list[dict] = []
    monkeypatch.setattr(sweep_mod, "run_point", lambda b, o, s, **kw: counted.append(o) or real(b, o, s, **kw))
    result = run_sweep(spec, base, source, str(out), workers=1)
    assert (result.skipped, result.ran) == (2, 4)
    assert all(o not in calls for o in counted)
    rows = _rows(out)
    assert len(rows) == 6 and len({r["key"] for r in rows}) == 6
    again = run_sweep(spec, base, source, str(out), workers=1)
    assert again.ran == 0 and again.skipped == 6


def test_process_pool_gives_the_same_rows(tmp_path: Path):
    path = _spec_file(tmp_path, parameters=[{"path": "mapping.micro_batch", "values": [1, 2, 4]}])
    spec, base, source = load_spec(str(path))
    serial, pooled = tmp_path / "a.csv", tmp_path / "b.csv"
    run_sweep(spec, base, source, str(serial), workers=1)
    run_sweep(spec, base, source, str(pooled), workers=2)
    key = lambda r: r["key"]  # noqa: E731
    a, b = sorted(_rows(serial), key=key), sorted(_rows(pooled), key=key)
    assert [r["iteration_time_s"] for r in a] == [r["iteration_time_s"] for r in b]


def test_pareto_front_of_a_sweep_is_non_dominated(tmp_path: Path):
    path = _spec_file(
        tmp_path,
        parameters=[{"path": "mapping.micro_batch", "values": [1, 2, 4]},
                    {"path": GPU_MEM, "min": 5e11, "max": 4e12, "steps": 3, "log": True}],
        objectives=[{"metric": "iteration_time_s"}, {"metric": "peak_memory_bytes"}],
    )
    spec, base, source = load_spec(str(path))
    result = run_sweep(spec, base, source, str(tmp_path / "r.csv"), workers=1)
    ok = [r for r in _rows(tmp_path / "r.csv") if r["status"] == "ok"]
    front = {r["key"] for r in result.pareto}
    assert front
    vals = {r["key"]: np.array([float(r["iteration_time_s"]), float(r["peak_memory_bytes"])]) for r in ok}
    for k, v in vals.items():
        beaten = any(np.all(w <= v) and np.any(w < v) for w in vals.values())
        assert beaten == (k not in front)


def test_another_sweeps_csv_is_not_appended_to(tmp_path: Path):
    path = _spec_file(tmp_path, parameters=[{"path": "mapping.micro_batch", "values": [1]}])
    out = tmp_path / "r.csv"
    out.write_text("a,b\n1,2\n")
    spec, base, source = load_spec(str(path))
    with pytest.raises(InputError, match="another sweep"):
        run_sweep(spec, base, source, str(out), workers=1)


def test_ray_executor_without_ray_says_how_to_install(tmp_path: Path, capsys, monkeypatch):
    """Ray is in the test extra, so its absence is simulated: a None in sys.modules fails the import."""
    monkeypatch.setitem(sys.modules, "ray", None)
    path = _spec_file(tmp_path, parameters=[{"path": "mapping.micro_batch", "values": [1]}])
    out = tmp_path / "r.csv"
    assert main(["sweep", str(path), "--executor", "ray", "--out", str(out), "--quiet"]) == 2
    assert "tilewright[ray]" in capsys.readouterr().err
    assert not out.exists()  # said before any CSV is started


def test_ray_address_needs_the_ray_executor(tmp_path: Path, capsys):
    path = _spec_file(tmp_path, parameters=[{"path": "mapping.micro_batch", "values": [1]}])
    out = tmp_path / "r.csv"
    assert main(["sweep", str(path), "--ray-address", "127.0.0.1:6379", "--out", str(out), "--quiet"]) == 2
    assert "--executor ray" in capsys.readouterr().err and not out.exists()


def test_cli_json(tmp_path: Path, capsys):
    path = _spec_file(tmp_path, parameters=[{"path": "mapping.micro_batch", "values": [1, 2]}])
    assert main(["sweep", str(path), "--workers", "1", "--json", "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["points"] == 2 and data["ran"] == 2 and data["csv"].endswith("spec.csv")
    assert data["pareto"]


def test_a_disk_full_mid_row_resumes_to_the_uninterrupted_result(tmp_path: Path, monkeypatch):
    """A write cut short leaves half a row; the next run drops it and re-runs that point, so the CSV ends
    up with exactly the rows of an uninterrupted sweep (no glued rows, no lost points)."""
    path = _spec_file(tmp_path, parameters=[{"path": "mapping.micro_batch", "values": [1, 2, 4]},
                                            {"path": "mapping.recompute", "values": ["none", "full"]}])
    spec, base, source = load_spec(str(path))
    clean = tmp_path / "clean.csv"
    run_sweep(spec, base, source, str(clean), workers=1)

    out = tmp_path / "r.csv"
    import os as os_mod

    real_write = os_mod.write
    writes: list[int] = []

    def full_disk(fd, data):
        writes.append(len(data))
        if len(writes) == 4:  # header, two rows, then the disk fills half-way through the third row
            real_write(fd, data[: len(data) // 2])
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os_mod, "write", full_disk)
    with pytest.raises(InputError, match="No space left on device"):
        run_sweep(spec, base, source, str(out), workers=1)
    monkeypatch.setattr(os_mod, "write", real_write)
    assert not out.read_bytes().endswith(b"\n")  # the half row is there
    result = run_sweep(spec, base, source, str(out), workers=1)
    assert (result.skipped, result.ran) == (2, 4)

    def comparable(p: Path) -> list[dict]:
        return sorted(({k: v for k, v in r.items() if k != "wall_time_s"} for r in _rows(p)),
                      key=lambda r: r["key"])

    assert comparable(out) == comparable(clean)


def test_a_multi_line_error_stays_one_csv_line(tmp_path: Path):
    from tilewright.engine.search.sweep.run import RowAppender

    out = tmp_path / "r.csv"
    with RowAppender(out, ["key", "error"]) as rows:
        rows.header()
        rows.append({"key": "a", "error": "first line\nsecond line"})
    assert out.read_text().count("\n") == 2
    assert _rows(out)[0]["error"] == "first line | second line"
