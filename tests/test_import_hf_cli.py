"""``tilewright import-hf --system``: the written project has a mapping that fits (issue 13)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.project_file import project_from_data
from tilewright.engine.ir.project import EngineKind
from tilewright.engine.plan.checks import check_project
from tilewright.engine.simulate import simulate

HF = Path(__file__).parent / "data" / "hf"
LLAMA_70B = {"_name_or_path": "meta-llama/Llama-2-70b-hf", "model_type": "llama", "hidden_size": 8192,
             "intermediate_size": 28672, "num_attention_heads": 64, "num_hidden_layers": 80,
             "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 4096}


def _import(tmp_path: Path, config: Path, *flags: str) -> tuple[int, dict | None]:
    out = tmp_path / "project.json"
    code = main(["import-hf", str(config), "-o", str(out), *flags])
    return code, json.loads(out.read_text()) if code == 0 else None


def _analytic(data: dict):
    project = project_from_data(data, "test")
    assert check_project(project) == []
    run = project.run.model_copy(update={"engine": EngineKind.analytic})
    return project, simulate(project.model_copy(update={"run": run}))


@pytest.mark.parametrize("system", ["dgx-h100", "dgx-a100"])
def test_llama_7b_fits_on_a_dgx(tmp_path: Path, system: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, data = _import(tmp_path, HF / "llama-2-7b" / "config.json", "--system", system)
    assert code == 0 and data is not None
    project, result = _analytic(data)
    assert project.mapping.devices > 1  # the old importer wrote one device, which ran out of memory
    assert result.oom is None
    err = capsys.readouterr().err
    assert "seq_len 4096" in err and f"tp {project.mapping.tp} pp {project.mapping.pp}" in err
    assert "peak memory" in project.description and "iteration" in project.description


def test_devices_and_seq_len_are_honoured(tmp_path: Path) -> None:
    code, data = _import(tmp_path, HF / "llama-2-7b", "--system", "dgx-h100", "--devices", "8",
                         "--seq-len", "1024", "--global-batch", "32")
    assert code == 0 and data is not None
    project, result = _analytic(data)
    assert project.workload.seq_len == 1024
    assert project.mapping.devices <= 8 and project.mapping.global_batch == 32
    assert result.oom is None


def test_growable_system_grows_by_whole_nodes(tmp_path: Path) -> None:
    config = tmp_path / "llama-70b" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(LLAMA_70B))
    code, data = _import(tmp_path, config, "--system", "dgx-h100")
    assert code == 0 and data is not None
    project, result = _analytic(data)
    assert project.mapping.devices > 8 and project.mapping.devices % 8 == 0
    assert "fewest whole nodes" in project.description
    assert result.oom is None


@pytest.mark.parametrize("system", ["wormhole-n150", "dgx-h100"])
def test_impossible_request_exits_2(tmp_path: Path, system: str, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA_70B))
    code, _ = _import(tmp_path, config, "--system", system, "--devices", "1")
    assert code == 2
    err = capsys.readouterr().err
    assert "no mapping" in err and "fits in memory on 1 device" in err and "--devices" in err
    assert not (tmp_path / "project.json").exists()


def test_devices_without_system_is_an_error(tmp_path: Path) -> None:
    assert _import(tmp_path, HF / "gpt2", "--devices", "8")[0] == 2


def test_encoder_decoder_is_refused_with_file_field_and_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = HF / "t5-small" / "config.json"
    assert _import(tmp_path, config)[0] == 2
    err = capsys.readouterr().err
    assert str(config) in err and "is_encoder_decoder" in err and "encoder-decoder" in err
    assert "Traceback" not in err and not (tmp_path / "project.json").exists()


def test_mixtral_labelled_mistral_imports_as_moe(tmp_path: Path) -> None:
    """The config that used to import as a dense 7 B model: num_local_experts decides, not model_type."""
    config = tmp_path / "mixtral" / "config.json"
    config.parent.mkdir()
    mixtral = json.loads((HF / "mixtral-8x7b" / "config.json").read_text())
    config.write_text(json.dumps(mixtral | {"model_type": "mistral"}))
    code, data = _import(tmp_path, config)
    assert code == 0 and data is not None
    assert data["moe"]["experts"] == 8 and data["moe"]["top_k"] == 2


def _count_graph_builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every operator graph a builder makes goes through ``WorkloadGraph.from_ops``: the names built."""
    from tilewright.engine.workloads.graph import WorkloadGraph

    built: list[str] = []
    original = WorkloadGraph.from_ops

    def counting(cls, name, *args, **kwargs):
        built.append(name)
        return original(name, *args, **kwargs)

    monkeypatch.setattr(WorkloadGraph, "from_ops", classmethod(counting))
    return built


@pytest.mark.parametrize(("config", "flags", "code"), [
    # a fit: the fusion check and the search (they built one graph each)
    ("llama-2-7b", ["--system", "dgx-h100", "--seq-len", "1024"], 0),
    # a growable system: a search per size it grows through (8 devices, then 16)
    ("llama-70b", ["--system", "dgx-h100"], 0),
    # no fit: the fusion check, the search and the message's parameter count
    ("llama-2-7b", ["--system", "wormhole-n150", "--devices", "1"], 2),
])
def test_import_hf_builds_the_model_graph_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str,
                                                flags: list[str], code: int) -> None:
    """The first stage's searches, the fusion check and the no-fit message share one graph (a MoE model's second
    stage too: ``test_the_second_stage_checks_candidates_on_the_searchs_graph``)."""
    path = HF / config
    if config == "llama-70b":
        path = tmp_path / config / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(LLAMA_70B))
    built = _count_graph_builds(monkeypatch)
    assert _import(tmp_path, path, *flags)[0] == code
    assert len(built) == 1, built


def test_a_model_past_the_layer_limit_is_refused_before_its_graph_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The budget is checked on the spec: building a graph of more layers than a search may walk took a minute
    before the refusal."""
    from tilewright.engine.plan.budget import MAX_LAYERS

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_layer": MAX_LAYERS + 1, "n_head": 4,
                                  "vocab_size": 100, "n_positions": 128}))
    built = _count_graph_builds(monkeypatch)
    assert _import(tmp_path, config, "--system", "dgx-h100")[0] == 2
    assert f"layers (limit {MAX_LAYERS:,})" in capsys.readouterr().err
    assert built == []


def test_the_second_stage_checks_candidates_on_the_searchs_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exact evaluator of the search's second stage checks each candidate on the planner's model graph
    instead of building one per candidate (161 builds for a Mixtral import before)."""
    from tilewright.engine.io.presets import load_system
    from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
    from tilewright.engine.search.parallel.candidate import Candidate
    from tilewright.engine.search.parallel.extended import Planner, exact_evaluator
    from tilewright.engine.workloads import build_workload

    spec = GPTSpec(name="moe", layers=2, hidden=1024, heads=16, seq_len=1024, vocab=32000,
                   moe={"experts": 8, "top_k": 2, "expert_ffn": 2048})
    p = Project(name="moe", hardware=load_system("dgx-a100"), workload=spec,
                mapping=Mapping(dp=8, micro_batch=1, global_batch=16), run=RunSettings(dtype="bf16"))
    evaluate = exact_evaluator(p, 16, Planner(build_workload(spec)))
    built = _count_graph_builds(monkeypatch)
    times = [evaluate(Candidate(tp=1, pp=1, dp=8, micro_batch=1, ep=ep)) for ep in (1, 2, 4, 8)]
    assert all(t is not None for t in times)
    assert built == []


def test_output_below_a_file_or_at_a_folder_is_refused_before_the_mapping_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``-o afile/p.json`` cannot be written; it used to fail only after the whole mapping search, as
    "afile/p.json: File exists" naming neither the flag nor the reason. Now it exits 2 first, naming -o."""
    import tilewright.engine.cli.import_hf as import_hf

    def no_search(*args: object, **kwargs: object) -> dict:
        raise AssertionError("the mapping search ran for an output that cannot be written")

    monkeypatch.setattr(import_hf, "_project_around", no_search)
    blocker = tmp_path / "afile"
    blocker.write_text("keep")
    code = main(["import-hf", str(HF / "gpt2"), "--system", "dgx-h100", "-o", str(blocker / "p.json")])
    err = capsys.readouterr().err
    assert code == 2 and "-o" in err and "not a folder" in err and "Traceback" not in err
    assert blocker.read_text() == "keep"
    assert main(["import-hf", str(HF / "gpt2"), "--system", "dgx-h100", "-o", str(tmp_path)]) == 2  # a folder
    assert "-o: " in capsys.readouterr().err


def test_what_the_import_approximates_is_said_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The spec's comment lists what it approximates or leaves out (Gemma-2's soft-capping here); a user of the
    command never opens it, so the same notes go to stderr beside the chosen seq_len."""
    out = tmp_path / "gemma2.json"
    assert main(["import-hf", str(HF / "gemma-2-9b"), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    comment = json.loads(out.read_text())["comment"]
    assert "soft-capping" in comment
    (line,) = [x for x in err.splitlines() if x.startswith("import-hf: notes: ")]
    assert "soft-capping" in line and line.removeprefix("import-hf: notes: ") in comment


def test_the_mapping_search_is_announced_and_followed_into_a_pipe(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A DeepSeek-V3 on 1,024 H100s searched for minutes with nothing on stderr when it was not a terminal: the
    search is announced (model, devices, system) and followed by progress lines at a modest rate, whatever
    stderr is (captured here: not a terminal); ``--quiet`` leaves only the result's lines."""
    code, data = _import(tmp_path, HF / "llama-2-7b", "--system", "dgx-h100", "--seq-len", "1024")
    assert code == 0 and data is not None
    err = capsys.readouterr().err.splitlines()
    start = [x for x in err if x.startswith("import-hf: searching the mappings of 'meta-llama/Llama-2-7b-hf' on 8 "
                                            "devices of dgx-h100")]
    progress = [x for x in err if x.startswith("[") and "search" in x]
    assert len(start) == 1 and progress, err
    assert err.index(start[0]) < err.index(progress[0])
    assert progress[-1].startswith("[100%")
    code, quiet = _import(tmp_path, HF / "llama-2-7b", "--system", "dgx-h100", "--seq-len", "1024", "--quiet")
    assert code == 0 and quiet == data
    err = capsys.readouterr().err
    assert "searching" not in err and not any(x.startswith("[") for x in err.splitlines())
