"""Mapping fields that can only be idle are refused by the project's checks (``plan.idle_fields``), naming the
field and why, exit 2 — whether they come from a flag, ``--set`` or a project file. Each is first shown
idle: the same run without it (through the engine, where no check stands in the way)."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.cli import main
from tilewright.engine.engines.analytic.engine import AnalyticEngine
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan.checks import check_project
from tilewright.engine.simulate import make_plan

LAYERS = 8
SPEC = GPTSpec(name="gpt", layers=LAYERS, hidden=512, heads=8, seq_len=256, vocab=4096)
BASE = ["run", "--system", "dgx-a100", "--model", "gpt", "--layers", str(LAYERS), "--hidden", "512", "--heads", "8",
        "--seq-len", "256", "--vocab", "4096", "--engine", "analytic", "--devices", "8", "--global-batch", "16",
        "--quiet", "--json"]


def _project(mode: str = "train", **mapping) -> Project:
    m = Mapping(**({"dp": 8, "micro_batch": 1, "global_batch": 16} | mapping))
    served = {"inference": {"prompt_tokens": 192, "output_tokens": 64}} if mode == "infer" else {}  # in the context
    return Project(name="idle", hardware=load_system("dgx-a100"), workload=SPEC, mapping=m,
                   run=RunSettings(dtype="bf16", engine="analytic", mode=mode, **served))


def _time(p: Project) -> tuple[float, float]:
    r = AnalyticEngine().run(make_plan(p))
    return r.iteration_time_s, r.peak_memory_bytes


def _paths(p: Project) -> list[str]:
    return [q.path for q in check_project(p)]


def test_recompute_layers_past_a_chunk_is_every_layer():
    """Megatron's block method re-runs the first N layers of each chunk: N past the chunk's layers is all."""
    every = _project(recompute="full")
    assert _time(_project(recompute="full", recompute_layers=LAYERS + 1)) == _time(every)
    assert "mapping.recompute_layers" in _paths(_project(recompute="full", recompute_layers=LAYERS + 1))
    assert _paths(_project(recompute="full", recompute_layers=LAYERS)) == []
    # pp 2: a chunk holds LAYERS / 2 layers
    staged = {"pp": 2, "dp": 4, "recompute": "full"}
    assert "mapping.recompute_layers" in _paths(_project(**staged, recompute_layers=LAYERS // 2 + 1))
    assert _paths(_project(**staged, recompute_layers=LAYERS // 2)) == []
    assert _time(_project(**staged, recompute_layers=LAYERS // 2 - 1)) != _time(_project(**staged))


def test_interleave_needs_a_pipeline():
    assert "mapping.interleave" in _paths(_project(interleave=2))
    assert _paths(_project(interleave=2, pp=2, dp=4)) == []


def test_a_kv_cache_level_in_training_keeps_its_latitude():
    """An inference project's KV-cache placement stays when it flips to training (a Cerebras serving preset run
    with --mode train), as training fields stay in inference: idle there, not refused."""
    assert _time(_project(memory_levels={"kv_cache": "hbm"})) == _time(_project())
    assert _paths(_project(memory_levels={"kv_cache": "hbm"})) == []


@pytest.mark.parametrize(("field", "value"), [("expert_imbalance", 2.0), ("overlap_ep_comm", True),
                                              ("ep_dispatcher", "deepep")])
def test_expert_fields_on_a_dense_model_are_refused(field, value):
    assert _time(_project(**{field: value})) == _time(_project())
    assert f"mapping.{field}" in _paths(_project(**{field: value}))


def test_training_fields_in_inference_keep_their_latitude():
    """A project flips between modes and keeps its mapping: only the flags are refused there (cli.idle_flags)."""
    assert _paths(_project("infer", dp=1, global_batch=1, recompute="full", recompute_layers=LAYERS + 1)) == []


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--recompute", "full", "--recompute-layers", str(LAYERS + 1)], "mapping.recompute_layers"),
        (["--interleave", "2"], "mapping.interleave"),
        (["--set", "mapping.recompute=full", "--set", f"mapping.recompute_layers={LAYERS + 1}"],
         "mapping.recompute_layers"),
        (["--set", "mapping.ep_dispatcher=deepep"], "mapping.ep_dispatcher"),
    ],
    ids=["flags", "interleave-flag", "set-recompute", "set-dispatcher"],
)
def test_the_command_line_refuses_them_by_field(capsys, args, field):
    assert main([*BASE, *args]) == 2
    err = capsys.readouterr().err
    assert f"{field}:" in err and "Traceback" not in err


def test_a_project_file_is_refused_naming_the_file(tmp_path, capsys):
    path = tmp_path / "idle.json"
    project = _project(interleave=2)
    path.write_text(json.dumps(project.model_dump(mode="json")))
    assert main(["run", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "idle.json" in err and "mapping.interleave:" in err


@pytest.mark.parametrize(("experts", "top_k"), [(8, 2), (64, 6)])
def test_expert_imbalance_past_every_rank_s_reach_is_refused(experts: int, top_k: int):
    """A rank can hold all top_k slots of a token only while it has top_k experts: ep · min(top_k, experts / ep) /
    top_k, at most experts / top_k over every ep. That much is accepted; anything above, for any ep, is not."""
    spec = GPTSpec.model_validate(SPEC.model_dump() | {"moe": {"experts": experts, "top_k": top_k, "expert_ffn": 256}})
    reach = max(ep * min(top_k, experts / ep) / top_k for ep in range(1, experts + 1) if experts % ep == 0)
    assert reach == experts / top_k

    def paths(imbalance: float) -> list[str]:
        p = Project(name="moe", hardware=load_system("dgx-a100"), workload=spec,
                    mapping=Mapping(dp=8, ep=8, global_batch=16, expert_imbalance=imbalance),
                    run=RunSettings(dtype="bf16", engine="analytic"))
        return _paths(p)

    assert "mapping.expert_imbalance" not in paths(reach)
    assert "mapping.expert_imbalance" in paths(reach * 1.01)
