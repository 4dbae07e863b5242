"""Corrupted and inconsistent files: exit 2, one clear line naming file, JSON path and reason, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io import project_to_data

from tests.factories import small_project

Edit = Callable[[dict], object]


def _set(path: str, value) -> Edit:
    def edit(d: dict) -> None:
        keys = path.split(".")
        node = d
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        node[keys[-1]] = value

    return edit


CASES: list[tuple[str, Edit, str, str]] = [
    ("wrong-type", _set("mapping.tp", "eight"), "mapping.tp", "integer"),
    (
        "negative-bandwidth",
        _set("hardware.children.0.interconnect.link_bandwidth_bytes_per_s", -5),
        "hardware.children.0.interconnect.link_bandwidth_bytes_per_s",
        "greater than 0",
    ),
    (
        "negative-capacity",
        _set("hardware.children.0.children.0.memories.0.capacity_bytes", -1),
        "hardware.children.0.children.0.memories.0.capacity_bytes",
        "greater than 0",
    ),
    ("tp-heads", lambda d: d["mapping"].update(tp=3, dp=1), "mapping.tp", "3 does not divide heads (8)"),
    ("too-many-devices", lambda d: d["mapping"].update(dp=64, global_batch=64), "mapping", "the hardware has 16"),
    ("batch", _set("mapping.global_batch", 15), "mapping.global_batch", "not a multiple"),
    ("pp-layers", lambda d: d["mapping"].update(pp=8, dp=1), "mapping.pp", "exceeds the model's layers"),
    ("unknown-field", _set("mapping.tpp", 2), "mapping.tpp", "unknown field"),
    ("unknown-version", _set("schema_version", 99), "schema_version", "newer than this Tilewright"),
    ("unknown-model", _set("workload.kind", "rnn"), "workload", "kind"),
    ("unknown-topology", _set("hardware.interconnect.topology", "hypercube"), "hardware.interconnect.topology", "mesh"),
    (
        "bad-edge-list",
        _set(
            "hardware.children.0.interconnect",
            {"topology": "edges", "link_bandwidth_bytes_per_s": 1e9, "edge_list": [[0, 9]]},
        ),
        "hardware.children.0.interconnect.edge_list",
        "joins no existing pair",
    ),
    ("missing-hardware", lambda d: d.pop("hardware"), "hardware", "required field is missing"),
    (
        "memory-level",
        _set("mapping.memory_levels", {"weights": "l3"}),
        "mapping.memory_levels.weights",
        "no memory named 'l3'",
    ),
]


def _write(tmp_path: Path, name: str, edit: Edit | None) -> Path:
    data = project_to_data(small_project())
    if edit:
        edit(data)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def _validate(path: Path, capsys) -> tuple[int, str]:
    code = main(["validate", str(path)])
    captured = capsys.readouterr()
    return code, captured.err


def test_valid_project_passes(tmp_path, capsys):
    code = main(["validate", str(_write(tmp_path, "ok", None))])
    assert code == 0
    assert "valid project" in capsys.readouterr().out


@pytest.mark.parametrize("name,edit,where,reason", CASES, ids=[c[0] for c in CASES])
def test_corrupted_file(tmp_path, capsys, name, edit, where, reason):
    path = _write(tmp_path, name, edit)
    code, err = _validate(path, capsys)
    assert code == 2
    assert "Traceback" not in err
    first = err.strip().splitlines()[0]
    assert first.startswith(f"{path}: {where}"), err
    assert reason in err


@pytest.mark.parametrize(
    "content,reason",
    [("", "file is empty"), ('{"name": "x", "hardware": {', "not valid JSON"), ("[1, 2]", "JSON object")],
    ids=["empty", "truncated", "not-an-object"],
)
def test_unreadable_file(tmp_path, capsys, content, reason):
    path = tmp_path / "broken.json"
    path.write_text(content)
    code, err = _validate(path, capsys)
    assert code == 2 and reason in err and str(path) in err


def test_truncated_real_file_names_line(tmp_path, capsys):
    good = _write(tmp_path, "good", None).read_text()
    path = tmp_path / "truncated.json"
    path.write_text(good[: len(good) // 2])
    code, err = _validate(path, capsys)
    assert code == 2 and "line" in err and "column" in err


def test_missing_file(tmp_path, capsys):
    code, err = _validate(tmp_path / "nope.json", capsys)
    assert code == 2 and "file not found" in err


def test_subprocess_has_no_traceback(tmp_path):
    path = _write(tmp_path, "neg", CASES[1][1])
    proc = subprocess.run(
        [sys.executable, "-m", "tilewright.engine.cli", "validate", str(path)],
        capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "link_bandwidth_bytes_per_s" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2
