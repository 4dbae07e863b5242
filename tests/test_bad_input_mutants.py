"""Mutants the fuzz corpus found exiting 1: each now exits 2 naming the field."""

from __future__ import annotations

import json

from tilewright.engine.cli import main
from tilewright.engine.io.presets import preset_path


def _run(tmp_path, capsys, name: str, edit) -> tuple[int, str]:
    data = json.loads(preset_path("projects", name).read_text())
    edit(data)
    path = tmp_path / "mutant.json"
    path.write_text(json.dumps(data))
    code = main(["run", str(path), "--engine", "analytic"])
    return code, capsys.readouterr().err


def test_tp_axes_not_a_pair(tmp_path, capsys):
    code, err = _run(
        tmp_path,
        capsys,
        "blackhole-galaxy-llama3-70b-inference",
        lambda d: d["mapping"].__setitem__("tp_axes", 1000000000),
    )
    assert code == 2 and "mapping.tp_axes" in err


def test_a_grown_system_without_an_interconnect(tmp_path, capsys):
    code, err = _run(tmp_path, capsys, "gpt3-dgx-a100", lambda d: d["hardware"].pop("interconnect"))
    assert code == 2 and "hardware" in err and "interconnect" in err
