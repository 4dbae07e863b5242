"""The `tilewright run` contract that acceptance scripts depend on."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections import defaultdict

import pytest
from tilewright.engine.cli import main

GPT_FLAGS = ["--system", "dgx-a100", "--model", "gpt", "--layers", "8", "--hidden", "1024", "--heads", "16",
             "--seq-len", "512", "--vocab", "8192"]
KEYS = {"iteration_time_s", "samples_per_s", "tokens_per_s", "model_flops_per_iteration", "mfu", "hfu",
        "devices", "peak_memory_bytes", "memory_breakdown_bytes", "time_breakdown_s", "events", "wall_time_s"}


def _run(args, capsys):
    code = main(["run", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_has_exactly_one_object_with_the_contract_keys(capsys):
    code, out, _ = _run([*GPT_FLAGS, "--tp", "2", "--pp", "2", "--dp", "2", "--global-batch", "16", "--json"], capsys)
    assert code == 0
    data = json.loads(out)  # exactly one JSON document on stdout
    assert KEYS <= data.keys()
    assert set(data["memory_breakdown_bytes"]) == {"weights", "gradients", "optimizer", "activations", "kv_cache",
                                                  "workspace"}
    assert set(data["time_breakdown_s"]) == {"compute", "recompute", "tp_comm", "ep_comm", "cp_comm", "pp_comm",
                                            "dp_comm", "bubble", "optimizer", "memory_stall", "host_wait"}
    assert data["devices"] == 8
    assert data["tokens_per_s"] == pytest.approx(data["samples_per_s"] * 512)


def test_devices_flag_sets_data_parallelism(capsys):
    code, out, _ = _run([*GPT_FLAGS, "--tp", "2", "--devices", "16", "--global-batch", "16", "--json"], capsys)
    assert code == 0 and json.loads(out)["devices"] == 16


def test_flags_override_project_file(capsys):
    code, out, _ = _run(["presets/projects/megatron-18b-dgx-a100.json", "--dp", "4", "--global-batch", "64",
                         "--engine", "analytic", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["devices"] == 32 and data["engine"] == "analytic"


@pytest.mark.parametrize("flag, value", [("--seq-len", "1024"), ("--hidden", "3072"), ("--kv-heads", "8")])
def test_model_dim_flags_edit_a_project_model(capsys, flag, value):
    """Each dimension or block-variant flag reaches the project's own model, not only --layers: --seq-len,
    --hidden, --kv-heads … used to be dropped without a word when a project file was given."""
    base = ["presets/projects/megatron-18b-dgx-a100.json", "--engine", "analytic", "--json"]
    code_a, a, _ = _run(base, capsys)
    code_b, b, _ = _run([*base, flag, value], capsys)
    assert code_a == code_b == 0
    assert json.loads(b)["model_flops_per_iteration"] < json.loads(a)["model_flops_per_iteration"]


def test_set_overrides_any_field(capsys):
    base = [*GPT_FLAGS, "--tp", "2", "--dp", "2", "--global-batch", "8", "--json"]
    _, a, _ = _run(base, capsys)
    _, b, _ = _run([*base, "--set", "workload.layers=16"], capsys)
    assert json.loads(b)["model_flops_per_iteration"] > 1.9 * json.loads(a)["model_flops_per_iteration"]


def test_out_of_memory_exits_3_and_still_prints(capsys):
    code, out, _ = _run(["--system", "dgx-a100", "--model", "gpt3-175b", "--tp", "1", "--pp", "1", "--dp", "1",
                         "--global-batch", "1", "--json"], capsys)
    data = json.loads(out)
    assert code == 3 and data["oom"]["need_bytes"] > data["oom"]["capacity_bytes"]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--model", "gpt", "--layers", "4"], "--model gpt: needs --hidden, --heads"),
        ([*GPT_FLAGS, "--tp", "3"], "mapping.tp: 3 does not divide heads (16)"),
        ([*GPT_FLAGS, "--set", "mapping.nope=1"], "mapping.nope"),
        (["--system", "no-such-system", "--model", "gpt-1.7b"], "no system preset"),
    ],
)
def test_bad_input_exits_2_with_reason(capsys, args, message):
    code, _out, err = _run(args, capsys)
    assert code == 2 and message in err and "Traceback" not in err


def test_inference_reports_ttft_and_tpot(capsys):
    code, out, _ = _run(["--system", "dgx-a100", "--model", "llama2-7b", "--tp", "2", "--mode", "infer", "--json"],
                        capsys)
    data = json.loads(out)
    assert code == 0 and data["ttft_s"] > data["tpot_s"] > 0


def test_trace_follows_perfetto_rules(tmp_path, capsys):
    trace = tmp_path / "t.json"
    code, _, _ = _run([*GPT_FLAGS, "--tp", "2", "--pp", "2", "--dp", "2", "--global-batch", "16",
                       "--trace", str(trace)], capsys)
    assert code == 0
    events = json.loads(trace.read_text())["traceEvents"]
    named_pids = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    named_tids = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    lanes = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["ts"] >= 0
            assert e["pid"] in named_pids and (e["pid"], e["tid"]) in named_tids
            lanes[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    assert lanes
    for spans in lanes.values():  # strictly nested: on one lane slices never partially overlap
        spans.sort()
        stack: list[float] = []
        for start, end in spans:
            while stack and stack[-1] <= start + 1e-6:
                stack.pop()
            assert not stack or end <= stack[-1] + 1e-6
            stack.append(end)
    assert any(e["ph"] == "C" for e in events)


def test_csv_export_is_readable(tmp_path, capsys):
    code, _, _ = _run([*GPT_FLAGS, "--tp", "2", "--dp", "2", "--global-batch", "8", "--csv", str(tmp_path)], capsys)
    assert code == 0
    metrics = {row["metric"]: row for row in csv.DictReader(open(tmp_path / "metrics.csv"))}
    assert metrics["iteration_time_s"]["unit"] == "s"
    rows = list(csv.DictReader(open(tmp_path / "timeline.csv")))
    assert rows and float(rows[0]["duration_s"]) >= 0


def test_console_script_runs_a_preset():
    proc = subprocess.run([sys.executable, "-m", "tilewright.engine.cli", "run", "presets/projects/hypar-vgg-a.json",
                           "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["devices"] == 16


def test_a_preset_name_runs_like_its_file(capsys, tmp_path, monkeypatch):
    """`tilewright presets` lists names; `run NAME` from any directory runs that preset's file."""
    monkeypatch.chdir(tmp_path)
    code, by_name, _ = _run(["hypar-vgg-a", "--engine", "analytic", "--json"], capsys)
    assert code == 0
    from tilewright.engine.io.presets import preset_path

    code, by_file, _ = _run([str(preset_path("projects", "hypar-vgg-a")), "--engine", "analytic", "--json"], capsys)
    assert code == 0
    a, b = json.loads(by_name), json.loads(by_file)
    assert a["iteration_time_s"] == b["iteration_time_s"] > 0
