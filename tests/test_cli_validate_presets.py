"""`tilewright validate` takes a preset's name as `run` and `studio` do (the README: "a project may be a file,
a preset's name as `tilewright presets` lists it, or `-`"); it used to answer "gpt3-dgx-a100: file not found"."""

from __future__ import annotations

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import presets_dir


@pytest.mark.parametrize(("name", "folder", "what"), [
    ("gpt3-dgx-a100", "projects", "valid project 'gpt3-dgx-a100'"),
    ("dgx-a100", "systems", "valid system 'dgx-a100'"),
    ("llama2-7b", "models", "valid model 'llama2-7b'"),
])
def test_a_presets_name_is_validated_from_its_file(capsys, name, folder, what):
    assert main(["validate", name]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{presets_dir() / folder / name}.json: {what}")


def test_an_unknown_name_or_file_exits_2_saying_which(capsys, tmp_path):
    assert main(["validate", "no-such-preset"]) == 2
    assert "no-such-preset: no project preset of that name (known: " in capsys.readouterr().err
    missing = tmp_path / "missing.json"
    assert main(["validate", str(missing)]) == 2
    assert capsys.readouterr().err.strip() == f"{missing}: file not found"
    assert main(["validate", "--kind", "system", "gpt3-dgx-a100"]) == 2  # a project's name, not a system's
    assert "gpt3-dgx-a100: no system preset of that name" in capsys.readouterr().err
