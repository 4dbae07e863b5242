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


def test_a_large_batch_prefilled_one_sequence_at_a_time_is_refused_from_the_ir(tmp_path, capsys):
    """Fuzz seed 2024, mutant 961: batch 32 -> 32,000 on a runtime that prefills sequence by sequence
    took the event engine 70 s and 6.9 GiB (a pass per sequence); the estimate counts those passes now."""
    data = json.loads(preset_path("projects", "blackhole-galaxy-llama3-70b-inference").read_text())
    data["run"]["inference"]["batch"] = 32000
    path = tmp_path / "mutant.json"
    path.write_text(json.dumps(data))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: run.inference.batch: 2,560,000 sequence-layers" in err
    data["run"]["inference"]["prefill"] = "batched"  # one pass per micro-batch: within the limits
    path.write_text(json.dumps(data))
    assert main(["validate", str(path)]) == 0


def test_memory_ports_past_the_limit_are_refused_before_elaboration(tmp_path, capsys):
    """Fuzz seed 11, mutant 300: a die's DRAM with ports_per_edge 20,000 (800,000 ports on the wafer) ran
    27 s in 3.1 GiB while `validate` passed it; the estimate counts memory ports now."""
    data = json.loads(preset_path("projects", "palm-wafer-t18b").read_text())
    data["hardware"]["children"][0]["memories"][0]["ports_per_edge"] = 20000
    path = tmp_path / "mutant.json"
    path.write_text(json.dumps(data))
    assert main(["validate", str(path)]) == 2
    assert f"{path}: hardware: 800,000 memory ports to elaborate" in capsys.readouterr().err
    assert main(["run", str(path), "--engine", "analytic"]) == 2
