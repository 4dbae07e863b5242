"""Tiny files that ask for huge runs are refused from the IR alone, fast, with their numbers (exit 2)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import list_presets, load_project_preset, preset_path
from tilewright.engine.plan import budget
from tilewright.engine.plan.budget import estimate


def _tile(component: dict) -> dict | None:
    if component.get("kind") == "tile":
        return component
    return next((t for c in component.get("children", []) if (t := _tile(c))), None)


def _huge(tmp_path, preset: str, edit) -> str:
    data = json.loads(preset_path("projects", preset).read_text())
    edit(data)
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(data))
    return str(path)


CASES = {
    "10^6 tiles per die": ("palm-wafer-t18b", lambda d: _tile(d["hardware"]).update(rows=1000, cols=1000),
                           "devices to elaborate"),
    "10^7 layers": ("gpt3-dgx-a100", lambda d: d["workload"].update(layers=10**7), "layers"),
    "global batch 8·10^6": ("gpt3-dgx-a100", lambda d: d["mapping"].update(global_batch=8 * 10**6),
                            "pipeline steps"),
    "10^6 output tokens": ("llama2-70b-h100-inference",
                           lambda d: d["run"]["inference"].update(output_tokens=10**6), "pipeline steps"),
    "a 2^30-wide layer": ("gpt3-dgx-a100", lambda d: d["workload"].update(hidden=2**30, heads=1), "past any model"),
    # 129 steps of an 8,000-layer model: few steps, few layers each, but every step's pass is costed layer by
    # layer (it took a minute on the 32-chip Galaxy)
    "10^6 layer-steps": ("wormhole-galaxy-llama3-70b-inference", lambda d: d["workload"].update(layers=8000),
                         "layer-steps"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("command", ["run", "validate"])
def test_huge_runs_are_refused_in_a_subprocess_quickly_and_small(tmp_path, case, command):
    preset, edit, reason = CASES[case]
    path = _huge(tmp_path, preset, edit)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tilewright.engine.cli", command, path],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert path in proc.stderr and reason in proc.stderr
    assert time.perf_counter() - start < 30  # generous: it takes well under a second; a hang takes minutes
    usage = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
    assert usage < 2 * 1024 * 1024


def test_every_preset_is_within_the_limits():
    for name in list_presets("projects"):
        assert not estimate(load_project_preset(name)).problems(), name


def test_allow_large_lifts_the_limit(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(budget, "MAX_STEPS", 2)  # the small preset (3 steps) is "too large" now
    assert main(["run", "hypar-vgg-a", "--engine", "analytic", "--json"]) == 2
    assert "pipeline steps" in capsys.readouterr().err
    assert main(["run", "hypar-vgg-a", "--engine", "analytic", "--json", "--allow-large"]) == 0


def test_the_studio_layout_says_why_instead_of_elaborating(tmp_path):
    from tilewright.engine.io import load_project
    from tilewright.studio.mapping import stage_layout

    path = _huge(tmp_path, *CASES["10^6 tiles per die"][:2])
    layout = stage_layout(load_project(path))
    assert layout.stages == 0 and "devices to elaborate" in layout.problem


@pytest.mark.parametrize("size", ["100000x100000", "9000x100", "abc", "1" * 40 + "x200"])
def test_absurd_window_sizes_are_refused(size):
    from tilewright.engine.errors import InputError
    from tilewright.studio.app import parse_size

    with pytest.raises(InputError, match="--size"):
        parse_size(size)
