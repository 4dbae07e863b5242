"""Sweep specs and results from a user-flow audit (audit 15): an objective naming no recorded metric and a
fractional range over a whole-number field are refused up front by ``validate`` and ``sweep``; the rated
power is labelled as rated with the simulated power beside it; ``--json`` keeps the CSV's types."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io import save_project
from tilewright.engine.search.sweep.point import COST_FIELDS, METRICS, build_point_project, hardware_totals
from tilewright.engine.simulate import simulate

from tests.factories import small_project

GPU_MEM = "hardware.children.0.children.0.memories.0.bandwidth_bytes_per_s"


def _spec_file(tmp_path: Path, **spec) -> Path:
    save_project(small_project(), tmp_path / "base.json")
    data = {"base": "base.json", "set": {"run.engine": "analytic"}} | spec
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(data))
    return path


ONE_PARAMETER = [{"path": "mapping.micro_batch", "values": [1, 2]}]


def test_an_objective_naming_no_metric_is_refused_listing_the_metrics(tmp_path: Path, capsys):
    path = _spec_file(tmp_path, parameters=ONE_PARAMETER, objectives=[{"metric": "nonsense", "sense": "max"}])
    for argv in (["validate", str(path)], ["sweep", str(path), "--quiet", "--workers", "1"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "objectives.0.metric" in err and "'nonsense'" in err
        assert all(name in err for name in (*METRICS, *COST_FIELDS, "mapping.micro_batch"))
    assert not (tmp_path / "spec.csv").exists()  # refused before any point ran


@pytest.mark.parametrize("metric", ["average_power_w", "power_w", "mapping.micro_batch"])
def test_a_recorded_metric_or_a_swept_path_is_an_objective(tmp_path: Path, capsys, metric):
    path = _spec_file(tmp_path, parameters=ONE_PARAMETER, objectives=[{"metric": metric, "sense": "min"}])
    assert main(["validate", str(path)]) == 0
    assert "valid sweep — 2 grid points over 1 parameter of" in capsys.readouterr().out


def test_a_fractional_range_over_a_whole_number_field_is_refused_up_front(tmp_path: Path, capsys):
    ranged = {"path": "mapping.micro_batch", "min": 1, "max": 4}
    path = _spec_file(tmp_path, method="lhs", samples=3, parameters=[ranged])
    for argv in (["validate", str(path)], ["sweep", str(path), "--quiet", "--workers", "1"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "parameters.0.integer" in err and "mapping.micro_batch" in err and '"integer": true' in err
    assert not (tmp_path / "spec.csv").exists()
    # the same range with "integer": true, and a range over a real-valued field, are valid
    path = _spec_file(tmp_path, method="lhs", samples=3, parameters=[ranged | {"integer": True}])
    assert main(["validate", str(path)]) == 0
    path = _spec_file(tmp_path, method="lhs", samples=3, parameters=[{"path": GPU_MEM, "min": 1e12, "max": 3e12}])
    assert main(["validate", str(path)]) == 0


def test_the_rated_power_is_labelled_and_the_simulated_power_is_beside_it(tmp_path: Path, capsys):
    objectives = [{"metric": "iteration_time_s", "sense": "min"}, {"metric": "power_w", "sense": "min"}]
    path = _spec_file(tmp_path, parameters=ONE_PARAMETER, objectives=objectives)
    assert main(["sweep", str(path), "--workers", "1", "--json", "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "rated" in data["columns"]["power_w"] and "simulated" in data["columns"]["average_power_w"]
    base = json.loads((tmp_path / "base.json").read_text())
    for row in data["pareto"]:
        point = {"run.engine": "analytic", "mapping.micro_batch": row["mapping.micro_batch"]}
        project = build_point_project(base, point, "test")
        assert row["power_w"] == pytest.approx(hardware_totals(project)["power_w"])
        assert row["average_power_w"] == pytest.approx(simulate(project).metrics_json()["average_power_w"])
        assert row["average_power_w"] != pytest.approx(row["power_w"])
    assert main(["sweep", str(path), "--workers", "1", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "min rated power (power_w)" in text and "simulated power (average_power_w)=" in text


def test_sweep_json_keeps_the_csv_types(tmp_path: Path, capsys):
    path = _spec_file(tmp_path, parameters=ONE_PARAMETER + [{"path": "mapping.recompute", "values": ["full"]}],
                      objectives=[{"metric": "iteration_time_s", "sense": "min"}])
    assert main(["sweep", str(path), "--workers", "1", "--json", "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["pareto"]
    for row in data["pareto"]:
        assert type(row["mapping.micro_batch"]) is int and type(row["devices"]) is int  # noqa: E721
        assert row["mapping.recompute"] == "full"
        assert row["ttft_s"] is None and row["tpot_s"] is None  # a training run has neither: null, not ""
        assert isinstance(row["iteration_time_s"], float)


def test_a_single_pareto_point_is_singular(tmp_path: Path, capsys):
    path = _spec_file(tmp_path, parameters=[{"path": "mapping.micro_batch", "values": [1]}],
                      objectives=[{"metric": "iteration_time_s", "sense": "min"}])
    assert main(["sweep", str(path), "--workers", "1", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "sweep: 1 point," in text and "(min iteration_time_s): 1 point" in text and "1 points" not in text
