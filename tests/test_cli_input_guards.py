"""An output path that is one of the command's inputs is refused before anything is written (the input
stays byte for byte), and a mapping search over absurd sizes is refused at once with its numbers."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import preset_path


def _same_after(path, code_of):
    before = path.read_bytes()
    code = code_of()
    assert path.read_bytes() == before
    return code


def test_a_sweeps_out_equal_to_its_base_project_is_refused(tmp_path, capsys):
    base = tmp_path / "base.json"  # one line, no final newline: what json.dump writes
    base.write_text(json.dumps(json.loads(preset_path("projects", "hypar-vgg-a").read_text())))
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"base": str(base), "method": "grid", "set": {"run.engine": "analytic"},
                                "parameters": [{"path": "mapping.global_batch", "values": [128, 256]}]}))
    assert _same_after(base, lambda: main(["sweep", str(spec), "--out", str(base), "--quiet"])) == 2
    assert "--out" in capsys.readouterr().err


def test_a_run_trace_over_its_system_file_is_refused(tmp_path, capsys):
    system = tmp_path / "sys.json"
    shutil.copy(preset_path("systems", "hypar-array-16"), system)
    args = ["run", "--system", str(system), "--model", "vgg-a", "--global-batch", "16", "--engine", "analytic",
            "--trace", str(system)]
    assert _same_after(system, lambda: main(args)) == 2
    assert "--trace" in capsys.readouterr().err


def test_import_hf_output_over_its_config_is_refused(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
                                  "vocab_size": 100, "n_positions": 128}))
    assert _same_after(config, lambda: main(["import-hf", str(tmp_path), "-o", str(config)])) == 2
    assert "-o" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["search", "--system", "dgx-a100", "--model", "gpt3-175b", "--devices", "1000000000", "--global-batch", "64"],
    ["search", "--system", "dgx-a100", "--model", "gpt", "--layers", "10000000", "--hidden", "1024", "--heads",
     "16", "--devices", "8", "--global-batch", "8"],
])
def test_a_search_past_the_limits_is_refused_at_once(capsys, argv):
    start = time.monotonic()
    assert main([*argv, "--quiet"]) == 2
    assert time.monotonic() - start < 10
    assert "limit" in capsys.readouterr().err


def test_import_hf_onto_a_billion_devices_is_refused_at_once(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
                                  "vocab_size": 100, "n_positions": 128}))
    start = time.monotonic()
    assert main(["import-hf", str(config), "--system", "dgx-h100", "--devices", "1000000000"]) == 2
    assert time.monotonic() - start < 10
    assert "--devices: 1,000,000,000 devices" in capsys.readouterr().err


@pytest.mark.parametrize("content", [b'{"name": "one-line project"}', b"notes without a final newline",
                                     b"key,status\nabc,ok"])
def test_a_sweep_out_holding_another_file_is_left_whole(tmp_path, capsys, content):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"base": "hypar-vgg-a", "method": "grid", "set": {"run.engine": "analytic"},
                                "parameters": [{"path": "mapping.global_batch", "values": [128]}]}))
    out = tmp_path / "notes.txt"
    out.write_bytes(content)
    assert main(["sweep", str(spec), "--out", str(out), "--quiet"]) == 2
    assert out.read_bytes() == content
    assert f"{out}: --out: holds something other than this sweep's results" in capsys.readouterr().err


def test_a_sweep_killed_while_writing_its_header_still_resumes(tmp_path, capsys):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"base": "hypar-vgg-a", "method": "grid", "set": {"run.engine": "analytic"},
                                "parameters": [{"path": "mapping.global_batch", "values": [128]}]}))
    out = tmp_path / "spec.csv"
    out.write_bytes(b"key,stat")  # the header line cut short
    assert main(["sweep", str(spec), "--quiet"]) == 0
    assert out.read_text().splitlines()[0].startswith("key,status,")
    assert len(out.read_text().splitlines()) == 2
