"""Mapping fields that can only be idle are refused by the project's checks (``plan.idle_fields``), naming the
field and why, exit 2 — whether they come from a flag, ``--set`` or a project file. Each is first shown
idle: the same run without it (through the engine, where no check stands in the way)."""

from __future__ import annotations

import itertools
import json

import pytest
from tilewright.engine.cli import main
from tilewright.engine.engines.analytic.engine import AnalyticEngine
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan.checks import check_project
from tilewright.engine.plan.routing_imbalance import imbalance_bound, routing_floor
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


def _reach(experts: int, top_k: int, ep: int) -> float:
    """The busiest rank's largest load over the mean, counted: every token's top_k distinct experts, the most
    of them on one rank's experts / ep consecutive experts (all ranks alike), over the mean top_k / ep."""
    held = range(experts // ep)
    most = max(sum(e in held for e in slots) for slots in itertools.combinations(range(experts), top_k))
    return most / (top_k / ep)


@pytest.mark.parametrize(("experts", "top_k", "ep"), [(8, 2, 2), (8, 2, 4), (8, 2, 8), (16, 4, 2), (16, 4, 4),
                                                      (16, 4, 8), (12, 3, 3), (12, 3, 6), (6, 6, 2)])
def test_the_bound_is_what_a_rank_s_experts_can_receive(experts: int, top_k: int, ep: int):
    """``imbalance_bound`` against the count over every routing of one token (a token routes alike to all)."""
    assert imbalance_bound(experts, top_k, ep) == pytest.approx(_reach(experts, top_k, ep), rel=1e-12)
    assert imbalance_bound(experts, top_k, 1) == 1.0  # one rank holds every expert: it is the mean


@pytest.mark.parametrize(("experts", "top_k", "ep"), [(8, 2, 8), (16, 4, 2), (16, 4, 8), (12, 3, 6)])
def test_the_unset_default_never_passes_the_bound(experts: int, top_k: int, ep: int):
    """The routing floor (the unset field's value) stays within the same reach down to a token or less, where
    its normal limit alone would pass it."""
    reach = _reach(experts, top_k, ep)
    for tokens in (1e-3, 0.1, 1, 10, 1e3, 1e6):
        assert 1.0 <= routing_floor(experts, top_k, ep, tokens) <= reach * (1 + 1e-12)
    assert routing_floor(experts, top_k, ep, 1e-3) == pytest.approx(reach)  # capped there


def _moe(experts: int, top_k: int, imbalance: float | None, **mapping) -> Project:
    spec = GPTSpec.model_validate(SPEC.model_dump() | {"moe": {"experts": experts, "top_k": top_k, "expert_ffn": 256}})
    return Project(name="moe", hardware=load_system("dgx-a100"), workload=spec,
                   mapping=Mapping(**({"dp": 8, "global_batch": 16, "expert_imbalance": imbalance} | mapping)),
                   run=RunSettings(dtype="bf16", engine="analytic"))


@pytest.mark.parametrize(("experts", "top_k", "ep"), [(16, 4, 2), (16, 4, 4), (16, 4, 8), (8, 2, 8), (64, 6, 8)])
def test_expert_imbalance_past_the_run_s_reach_is_refused(experts: int, top_k: int, ep: int):
    """The run's own ep bounds the field: min(ep, experts / top_k). At ep 2 with 16 experts, top-4, a rank of 8
    experts takes at most all 4 slots of a token against a mean of 2: twice the mean, not the experts / top_k = 4
    that a larger ep would reach (accepted before). 64 experts, top-6, ep 8: a rank's 8 experts hold all 6 slots
    against a mean of 6/8 — 8, not 64/6."""
    reach = 8.0 if experts == 64 else _reach(experts, top_k, ep)
    assert reach == pytest.approx(min(ep, experts / top_k))
    assert "mapping.expert_imbalance" not in _paths(_moe(experts, top_k, reach, ep=ep))
    refused = [p for p in check_project(_moe(experts, top_k, reach * 1.01, ep=ep))
               if p.path == "mapping.expert_imbalance"]
    assert len(refused) == 1 and f"at most {reach:g}" in refused[0].reason and f"ep {ep}" in refused[0].reason


def test_expert_imbalance_at_ep_1_is_kept_and_idle():
    """At ep 1 one rank runs every expert: the field changes nothing (the plan runs 1), and like the other
    expert fields there it is kept, so a search or an Auto-map that raises ep finds it."""
    assert _time(_moe(8, 2, 3.0)) == _time(_moe(8, 2, 1.0))
    assert _paths(_moe(8, 2, 3.0)) == []
