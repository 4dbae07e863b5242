"""What a first-time user met on the command line: errors that name the option at fault (with the command's
own usage), counts that agree with their nouns, every note reachable from --json and --csv, training's
``--attention``, and import-hf's projects training with the fused attention modern GPU frameworks run."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from tilewright.engine.cli import main
from tilewright.engine.cli.import_hf import fused_attention_runs
from tilewright.engine.errors import EXIT_BAD_INPUT
from tilewright.engine.io import load_project
from tilewright.engine.io.presets import load_system
from tilewright.engine.io.project_file import project_from_data
from tilewright.engine.simulate import simulate

HF = Path(__file__).parent / "data" / "hf"
GPT_FLAGS = ["--system", "dgx-a100", "--model", "gpt", "--layers", "2", "--hidden", "512", "--heads", "8",
             "--seq-len", "256", "--vocab", "4096", "--tp", "2", "--dp", "1", "--global-batch", "2", "--quiet"]
FLASH = ["attention", "softmax"]


def _main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's errors exit from inside parse_args
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


# -- errors name the option and the reason, exit 2 -------------------------------------------------------------
def test_unknown_flag_shows_the_subcommands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _main(["run", "x.json", "--bogus"], capsys)
    assert code == 2
    assert err.startswith("usage: tilewright run ")  # the command's usage, not the top level's list of commands
    assert "--bogus" in err and "--trace FILE" in err


def test_output_below_a_file_names_the_flag_and_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    for flag in ("--trace", "--csv"):
        target = str(afile / "t.json") if flag == "--trace" else str(afile / "sub")
        code, _, err = _main(["run", *GPT_FLAGS, flag, target], capsys)
        assert code == EXIT_BAD_INPUT
        assert flag in err and str(afile) in err and "is a file" in err
        assert "File exists" not in err


@pytest.mark.parametrize("value", ["1e400", "-1e400", "NaN", "Infinity"])
def test_set_value_out_of_range_blames_the_set_option(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _main(["run", *GPT_FLAGS, "--set", f"mapping.global_batch={value}"], capsys)
    assert code == EXIT_BAD_INPUT
    assert "--set mapping.global_batch" in err and value in err
    assert "not JSON data" not in err


@pytest.mark.parametrize("name", ["wormhole-n150", "dgx-a100"])
def test_validate_counts_agree_with_their_nouns(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    devices = load_system(name).device_count()
    code, out, err = _main(["validate", f"presets/systems/{name}.json"], capsys)
    assert code == 0, err
    assert out.rstrip().endswith(f"— {devices} device" + ("s" if devices != 1 else ""))


# -- notes: as many as the text says, in --json and --csv --------------------------------------------------------
def test_every_note_is_in_the_json_and_the_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = "presets/projects/chiplet-bert-large.json"
    notes = simulate(load_project(project)).notes
    assert len(notes) > 4  # the text prints four and points to the rest
    code, text, _ = _main(["run", project, "--quiet"], capsys)
    assert code == 0
    assert f"… and {len(notes) - 4} more" in text and '--json, key "notes"' in text
    code, out, _ = _main(["run", project, "--quiet", "--json", "--csv", str(tmp_path / "csv")], capsys)
    assert code == 0
    assert json.loads(out)["notes"] == notes
    with open(tmp_path / "csv" / "metrics.csv", encoding="utf-8") as f:
        rows = {r["metric"]: r["value"] for r in csv.DictReader(f)}
    assert [rows[f"notes.{i}"] for i in range(len(notes))] == notes


# -- attention: training takes --attention as the fusion chain ----------------------------------------------------
# long enough sequences that the s² scores cost more than the kernels' launches
LONG = [*GPT_FLAGS, "--hidden", "1024", "--heads", "16", "--seq-len", "2048", "--global-batch", "4",
        "--micro-batch", "2"]


def test_attention_flag_sets_training_fusion(capsys: pytest.CaptureFixture[str]) -> None:
    times = {}
    for kind in ("fused", "materialised"):
        code, out, err = _main(["run", *LONG, "--attention", kind, "--json"], capsys)
        assert code == 0, err
        times[kind] = json.loads(out)["iteration_time_s"]
    code, out, _ = _main(["run", *LONG, "--set", f"mapping.fusion={json.dumps([FLASH])}", "--json"], capsys)
    assert json.loads(out)["iteration_time_s"] == times["fused"]  # the same as the mapping's fusion chain
    code, out, _ = _main(["run", *LONG, "--json"], capsys)
    assert json.loads(out)["iteration_time_s"] == times["materialised"]  # training's default is unfused
    assert times["fused"] < times["materialised"]  # no s² scores through memory


def test_attention_flag_keeps_other_fusion_chains(tmp_path: Path) -> None:
    from tilewright.engine.cli.run import attention_fusion

    chains = [["residual1", "norm2"], FLASH]
    assert attention_fusion(chains, fused=False) == [["residual1", "norm2"]]
    assert attention_fusion([["residual1", "norm2"]], fused=True) == chains
    assert attention_fusion(chains, fused=True) == chains  # never twice


# -- import-hf: fused attention where the devices have a DRAM of their own ----------------------------------------
def test_import_hf_trains_with_fused_attention_on_gpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.json"
    code, _, err = _main(["import-hf", str(HF / "llama-2-7b"), "--system", "dgx-h100", "--seq-len", "1024",
                          "-o", str(out)], capsys)
    assert code == 0, err
    data = json.loads(out.read_text())
    assert data["mapping"]["fusion"] == [FLASH]
    assert "fused (flash) attention" in data["description"]
    project = project_from_data(data, "test")
    fused = simulate(project)
    unfused = simulate(project.model_copy(update={"mapping": project.mapping.model_copy(update={"fusion": []})}))
    assert fused.iteration_time_s < unfused.iteration_time_s


@pytest.mark.parametrize(("system", "fused"), [("dgx-h100", True), ("dgx-a100", True), ("tpu-v4-torus", True),
                                               ("wormhole-n150", True), ("palm-wafer", False),
                                               ("chiplet-mesh", False)])
def test_import_hf_fuses_where_the_presets_do(system: str, fused: bool) -> None:
    """SRAM-only tiles keep the unfused default their presets (Simba, PALM) use; the rest fuse."""
    from tilewright.engine.workloads import build_workload, import_hf_config

    spec = import_hf_config(json.loads((HF / "llama-2-7b" / "config.json").read_text()), seq_len=512)
    assert fused_attention_runs(load_system(system), build_workload(spec)) is fused
    tiles = [c for _, c in load_system(system).walk() if c.compute is not None]
    assert fused != all(m.kind.value == "sram" for m in tiles[0].memories)
