"""`run --csv DIR` refuses a folder holding other files before the run (exit 2, naming a file it holds),
not after a long simulation; a folder holding only an earlier export is still replaced."""

from __future__ import annotations

import pytest
from tilewright.engine import simulate as simulate_module
from tilewright.engine.cli import main

GPT_FLAGS = (
    "--system dgx-a100 --model gpt --layers 2 --hidden 256 --heads 4 --seq-len 128 --vocab 1024 --global-batch 4"
).split()


def test_a_csv_folder_with_other_files_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
    calls = []
    monkeypatch.setattr(simulate_module, "simulate", lambda *a, **k: calls.append(a) or pytest.fail("simulated"))
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    assert main(["run", *GPT_FLAGS, "--csv", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "notes.txt" in err and str(folder) in err and "Traceback" not in err
    assert calls == []
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]


def test_a_csv_folder_holding_an_earlier_export_is_replaced(tmp_path, capsys):
    folder = tmp_path / "csv"
    assert main(["run", *GPT_FLAGS, "--csv", str(folder)]) == 0
    (folder / "links.csv").unlink()  # an earlier export, whatever it held, is replaced whole
    assert main(["run", *GPT_FLAGS, "--csv", str(folder)]) == 0
    assert sorted(p.name for p in folder.iterdir()) == ["links.csv", "memory.csv", "metrics.csv", "timeline.csv"]
    capsys.readouterr()
