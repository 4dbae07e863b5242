"""Strict JSON in and out: duplicate keys, NaN/Infinity and wrongly typed numbers are refused with the file
and the reason; nothing Tilewright prints carries NaN or Infinity."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.json_file import dumps_strict
from tilewright.engine.io.presets import preset_path

PRESET = preset_path("projects", "hypar-vgg-a")


def _write(tmp_path, text: str):
    path = tmp_path / "p.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("edit", "reason"), [
    (lambda t: t.replace("{", '{"name": "twice", ', 1), "given twice"),
    (lambda t: t.replace('"global_batch": 128', '"global_batch": NaN'), "NaN is not a JSON number"),
    (lambda t: t.replace('"global_batch": 128', '"global_batch": Infinity'), "Infinity is not a JSON number"),
    (lambda t: t.replace('"global_batch": 128', '"global_batch": true'), "mapping.global_batch"),
    (lambda t: t.replace('"global_batch": 128', '"global_batch": "128"'), "mapping.global_batch"),
])
def test_bad_json_exits_2_naming_file_and_reason(tmp_path, capsys, edit, reason):
    text = PRESET.read_text()
    assert '"global_batch": 128' in text
    path = _write(tmp_path, edit(text))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and reason in err


def test_output_never_carries_nan_or_infinity():
    text = dumps_strict({"a": float("nan"), "b": [1.0, float("inf")], "c": {"d": -float("inf")}})
    assert json.loads(text) == {"a": None, "b": [1.0, None], "c": {"d": None}}


def test_a_project_file_without_hardware_is_refused_not_run_on_a_default(tmp_path, capsys):
    data = json.loads(PRESET.read_text())
    del data["hardware"]
    path = _write(tmp_path, json.dumps(data))
    assert main(["run", str(path)]) == 2
    assert "hardware: missing" in capsys.readouterr().err
    assert main(["run", str(path), "--system", "hypar-array-16", "--json"]) == 0  # said explicitly: fine


@pytest.mark.parametrize("part", ["mapping", "run"])
def test_a_part_that_is_not_an_object_exits_2(tmp_path, capsys, part):
    data = json.loads(PRESET.read_text())
    data[part] = [1, 2]
    path = _write(tmp_path, json.dumps(data))
    assert main(["run", str(path)]) == 2
    assert f"{part}: must be a JSON object" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--trace", "--csv"])
def test_an_output_path_equal_to_the_project_is_refused(tmp_path, capsys, flag):
    path = _write(tmp_path, PRESET.read_text())
    before = path.read_bytes()
    assert main(["run", str(path), flag, str(path)]) == 2
    assert "is the project file itself" in capsys.readouterr().err
    assert path.read_bytes() == before


def test_output_paths_that_cannot_work_exit_2_before_the_run(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(["run", "hypar-vgg-a", "--trace", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert main(["run", "hypar-vgg-a", "--csv", str(afile)]) == 2
    assert "is a file" in capsys.readouterr().err


def test_an_os_error_on_a_users_path_is_exit_2_naming_it(tmp_path, capsys, monkeypatch):
    import tilewright.engine.results.chrome_trace as trace

    def full(*_a, **_k):
        raise OSError(28, "No space left on device", str(tmp_path / "t.json"))

    monkeypatch.setattr(trace, "write_chrome_trace", full)
    assert main(["run", "hypar-vgg-a", "--trace", str(tmp_path / "t.json")]) == 2
    err = capsys.readouterr().err
    assert "t.json" in err and "No space left on device" in err and "internal error" not in err


@pytest.mark.parametrize(("text", "reason"), [
    # the quote that opens the string is on line 2, column 8 ('  "a": "xyz')
    ('{\n  "a": "xyz', "not valid JSON: Unterminated string starting at line 2, column 8"),
    # a raw tab inside a string: line 1, column 9 (after '{"a": "x')
    ('{"a": "x\ty"}', "not valid JSON: Invalid control character at line 1, column 9"),
])
def test_a_parse_error_says_where_in_one_phrase(tmp_path, capsys, text, reason):
    """The parser's own message may end in "at"; the line and column follow it once ("starting at at line"
    was printed)."""
    path = _write(tmp_path, text)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"{path}: {reason}"
