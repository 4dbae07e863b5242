"""``tilewright serve``'s guards from a user-flow audit (audit 15): every flag's nonsense value is exit 2 naming
the flag, flags the simulation would not read are refused naming both flags, no SLO is never reported as met,
traces are read strictly, plurals agree with their numbers, speculative decoding's step gaps are labelled as
steps, and an expert-parallel project is refused rather than served as independent replicas."""

from __future__ import annotations

import csv

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.project_file import project_to_text
from tilewright.engine.ir import Project
from tilewright.engine.serving import ServingConfig, ServingSetupError, SpecDecoding
from tilewright.engine.serving.instances import build_instances

from tests.engine_cases import llama_inference
from tests.serving_files import serve_project_file, strict_json

_strict = strict_json


@pytest.fixture
def project_file(tmp_path):
    return serve_project_file(tmp_path)


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "ok.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,64,4\n0.1,32,4\n")
    return str(path)


def _serve(argv: list[str]) -> int:
    try:
        return main(["serve", *argv, "--quiet"])
    except SystemExit as exc:  # argparse's own refusals (a non-number) exit too
        return int(exc.code)


# ---- every flag's nonsense values: exit 2 naming the flag, never an internal error (exit 1) ----


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--seed", "-1"], "--seed"),  # numpy's default_rng raised a bare ValueError: "internal error", exit 1
        (["--seed", str(2**70)], "--seed"),
        (["--requests", "-3"], "--requests"),
        (["--rate", "0"], "--rate"),
        (["--rate", "-2"], "--rate"),
        (["--token-budget", "-5"], "--token-budget"),
        (["--chunk", "0"], "--chunk"),
        (["--prompt-tokens", "0"], "--prompt-tokens"),
        (["--output-tokens", "-1"], "--output-tokens"),
        (["--slo-ttft", "0"], "--slo-ttft"),
        (["--slo-tpot", "-0.1"], "--slo-tpot"),
        (["--spec-k", "0", "--spec-accept", "0.5"], "--spec-k"),
        (["--spec-k", "2", "--spec-accept", "-0.1"], "--spec-accept"),
        (["--spec-k", "2", "--spec-accept", "0.5", "--spec-draft-cost", "-1"], "--spec-draft-cost"),
        (["--disaggregate", "-4:12"], "--disaggregate"),  # argparse took it for an option: "expected one argument"
        (["--disaggregate", "0:2"], "--disaggregate"),
        (["--sweep-rates", ""], "--sweep-rates"),  # ran one rate silently
        (["--sweep-rates", "1,,2"], "--sweep-rates"),  # an empty item was dropped silently
        (["--sweep-rates", "-1,2"], "--sweep-rates"),
        (["--sweep-rates", "1,nan"], "--sweep-rates"),
    ],
)
def test_a_nonsense_flag_value_is_exit_2_naming_the_flag(project_file, capsys, argv, flag):
    assert _serve([project_file, *argv]) == 2
    err = capsys.readouterr().err
    assert f"command line: {flag}:" in err
    assert "internal error" not in err and "expected one argument" not in err and "Traceback" not in err


def test_a_negative_disaggregation_is_named_by_its_own_check(project_file, capsys):
    assert _serve([project_file, "--disaggregate", "-4:12"]) == 2
    assert "-4:12: each group needs at least one device" in capsys.readouterr().err


@pytest.mark.parametrize("budget", [2048, 64])
def test_a_verify_step_past_the_budget_names_the_budget_and_its_flag(project_file, capsys, budget):
    k = budget  # a verify step is k + 1 tokens: one past the budget
    assert _serve([project_file, "--spec-k", str(k), "--spec-accept", "0.5", "--token-budget", str(budget)]) == 2
    err = capsys.readouterr().err
    assert f"{k + 1:,} tokens exceeds the token budget of {budget:,} tokens" in err and "--token-budget" in err


# ---- flags serve would not read: refused naming both flags ----


@pytest.mark.parametrize(
    "flag, value",
    [("--rate", "5"), ("--requests", "3"), ("--seed", "4"), ("--prompt-tokens", "100"), ("--output-tokens", "7")],
)
def test_a_flag_a_trace_replaces_is_refused_naming_both(project_file, trace_file, capsys, flag, value):
    assert _serve([project_file, "--trace", trace_file, flag, value]) == 2
    err = capsys.readouterr().err
    assert f"command line: {flag}: not with --trace {trace_file}" in err


def test_the_draft_cost_without_speculation_is_refused(project_file, capsys):
    assert _serve([project_file, "--spec-draft-cost", "0.2"]) == 2
    assert "--spec-draft-cost: needs --spec-k" in capsys.readouterr().err


def test_a_rate_beside_a_rate_sweep_is_refused(project_file, capsys):
    assert _serve([project_file, "--rate", "2", "--sweep-rates", "1,2"]) == 2
    assert "--rate: not with --sweep-rates" in capsys.readouterr().err


def test_a_trace_alone_and_the_defaults_still_run(project_file, trace_file, capsys):
    assert _serve([project_file, "--trace", trace_file, "--json"]) == 0
    assert len(_strict(capsys.readouterr().out)["records"]) == 2
    assert _serve([project_file, "--requests", "3", "--spec-k", "2", "--spec-accept", "0.5", "--json"]) == 0
    settings = _strict(capsys.readouterr().out)["settings"]
    assert settings["seed"] == 0 and settings["rate"] == 1.0 and settings["spec"]["draft_cost"] == 0.05


# ---- no SLO given: nothing is met ----


def test_without_an_slo_nothing_is_reported_met(project_file, tmp_path, capsys):
    out_csv = tmp_path / "r.csv"
    assert _serve([project_file, "--requests", "6", "--rate", "20", "--json", "--csv", str(out_csv)]) == 0
    out = _strict(capsys.readouterr().out)
    g = out["metrics"]["goodput"]
    assert g["slo_ttft_s"] is None and g["slo_tpot_s"] is None
    assert g["meets_target"] is None and g["fraction_meeting_slo"] is None and g["requests_per_s"] is None
    assert all(r["meets_slo"] is None for r in out["records"])
    with out_csv.open(newline="") as fh:
        assert {row["meets_slo"] for row in csv.DictReader(fh)} == {""}
    assert _serve([project_file, "--requests", "6", "--rate", "20"]) == 0
    text = capsys.readouterr().out
    assert "no SLO given" in text and "goodput (" not in text


def test_with_an_slo_the_met_fraction_is_counted_from_the_records(project_file, capsys):
    assert _serve([project_file, "--requests", "8", "--rate", "50", "--slo-ttft", "0.05", "--json"]) == 0
    out = _strict(capsys.readouterr().out)
    records = out["records"]
    met = [r["ttft_s"] <= 0.05 for r in records]
    assert [r["meets_slo"] for r in records] == met
    g = out["metrics"]["goodput"]
    assert g["fraction_meeting_slo"] == pytest.approx(sum(met) / len(met))
    assert g["meets_target"] == (sum(met) / len(met) >= g["target_fraction"])


def test_a_rate_sweep_without_an_slo_is_the_measured_curve_only(project_file, capsys):
    assert _serve([project_file, "--requests", "5", "--sweep-rates", "1,50", "--json"]) == 0
    out = _strict(capsys.readouterr().out)
    assert out["best_rate_requests_per_s"] is None
    assert [row["meets_slo"] for row in out["rates"]] == [None, None]
    assert all(row["ttft_s"]["p50"] > 0 for row in out["rates"])  # the curve is still measured
    assert _serve([project_file, "--requests", "5", "--sweep-rates", "1,50"]) == 0
    text = capsys.readouterr().out
    assert "no SLO given" in text and "highest rate meeting" not in text and "%" not in text.split("\n")[2]


def test_a_rate_sweep_with_an_slo_names_its_best_rate(project_file, capsys):
    assert _serve([project_file, "--requests", "5", "--sweep-rates", "1,2", "--slo-ttft", "100", "--json"]) == 0
    out = _strict(capsys.readouterr().out)
    assert out["best_rate_requests_per_s"] == 2 and all(row["meets_slo"] for row in out["rates"])


# ---- plurals ----


@pytest.mark.parametrize("rate, unit", [("1", "request/s"), ("2", "requests/s"), ("0.5", "requests/s")])
def test_a_rate_is_written_with_its_noun_agreeing(project_file, capsys, rate, unit):
    assert _serve([project_file, "--requests", "3", "--rate", rate]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(f"Poisson arrivals at {rate} {unit}")


def test_a_sweeps_best_rate_of_one_is_singular(project_file, capsys):
    assert _serve([project_file, "--requests", "3", "--sweep-rates", "1", "--slo-ttft", "100"]) == 0
    text = capsys.readouterr().out
    assert "(≥ 90% of requests): 1 request/s" in text and "1 requests/s" not in text


# ---- speculative decoding: the gap between steps is labelled as such ----


def test_speculative_step_gaps_are_labelled_steps_not_tokens(project_file, capsys):
    assert _serve([project_file, "--requests", "6", "--spec-k", "3", "--spec-accept", "0.6"]) == 0
    text = capsys.readouterr().out
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ")}
    assert "TBT" not in rows and "step" in rows
    tokens = SpecDecoding(3, 0.6).tokens_per_step
    assert "time between verify steps" in rows["step"] and f"{tokens:.4g}" in rows["step"]
    assert _serve([project_file, "--requests", "6"]) == 0
    rows = {line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    assert "TBT" in rows and "step" not in rows


# ---- traces are read strictly ----


BAD_TRACES = {
    "string.json": ('[{"arrival_s": "0", "prompt_tokens": 10, "output_tokens": 2}]', "requests[0].arrival_s",
                    "string"),
    "stringtokens.json": ('[{"arrival_s": 0, "prompt_tokens": "10", "output_tokens": 2}]',
                          "requests[0].prompt_tokens", "string"),
    "floattokens.json": ('[{"arrival_s": 0, "prompt_tokens": 10.0, "output_tokens": 2}]',
                         "requests[0].prompt_tokens", "whole number"),
    "extra.json": ('[{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 2, "extra": 1}]',
                   "requests[0].extra", "unknown field"),
    "twoarrivals.json": ('[{"arrival_s": 0, "arrival": 1, "prompt_tokens": 10, "output_tokens": 2}]',
                         "requests[0].arrival", "second arrival"),
    "wrapped.json": ('{"requests": [], "note": 1}', "note", "unknown key"),
    "empty.json": ("", "empty JSON file", ""),
    "extracell.csv": ("arrival_s,prompt_tokens,output_tokens\n0,10,2\n1,10,2,9\n", "row 3", "4 cells"),
    "shortrow.csv": ("arrival_s,prompt_tokens,output_tokens\n0,10\n", "row 2", "2 cells"),
    "column.csv": ("arrival_s,prompt_tokens,output_tokens,user\n0,10,2,a\n", "row 1.user", "unknown field"),
    "twice.csv": ("arrival_s,prompt_tokens,prompt_tokens\n0,10,2\n", "row 1.prompt_tokens", "twice"),
    "empty.csv": ("\n", "empty CSV", ""),
}


@pytest.mark.parametrize("name", list(BAD_TRACES))
def test_a_loose_trace_is_refused_naming_file_record_and_field(project_file, tmp_path, capsys, name):
    text, where, why = BAD_TRACES[name]
    path = tmp_path / name
    path.write_text(text)
    assert _serve([project_file, "--trace", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{path}: ") and where in err and why in err and "Traceback" not in err


def test_csv_cells_are_text_and_its_blank_lines_are_skipped(project_file, tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s, prompt_tokens ,output_tokens\n0, 10 ,2\n\n0.5,20,3\n")
    assert _serve([project_file, "--trace", str(path), "--json"]) == 0
    records = _strict(capsys.readouterr().out)["records"]
    assert [(r["arrival_s"], r["prompt_tokens"], r["output_tokens"]) for r in records] == [(0, 10, 2), (0.5, 20, 3)]


# ---- expert parallelism ----


def _moe_project(ep: int) -> Project:
    """A small mixture-of-experts inference project with ``ep`` expert ranks over its dp replicas."""
    data = llama_inference().model_dump(mode="json")
    data["workload"]["moe"] = {"experts": 4, "top_k": 2, "expert_ffn": 1408}
    data["mapping"] |= {"tp": 1, "dp": 2, "global_batch": 2, "ep": ep}
    return Project.model_validate(data)


def test_expert_parallel_serving_runs_and_is_refused_disaggregated_with_what_to_do(tmp_path, capsys):
    """Expert parallelism is served with data-parallel attention (``plan.served_experts``), each rank a replica;
    --disaggregate re-cuts the devices by tensor parallelism and refuses it, naming the way out."""
    path = tmp_path / "moe.json"
    path.write_text(project_to_text(_moe_project(2)))
    assert _serve([str(path), "--requests", "2", "--json"]) == 0
    assert "ep 2: data-parallel attention" in " ".join(_strict(capsys.readouterr().out)["notes"])
    assert _serve([str(path), "--requests", "2", "--disaggregate", "1:1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{path}: mapping.ep: 2:") and "--set mapping.ep=1" in err
    with pytest.raises(ServingSetupError) as exc:
        build_instances(_moe_project(2), ServingConfig().token_budget, (1, 1))
    assert exc.value.setting == "mapping.ep"
    assert _serve([str(path), "--requests", "2", "--disaggregate", "1:1", "--set", "mapping.ep=1"]) == 0


# ---- TPOT as README defines it is what `run` reports ----


def test_readme_tpot_is_what_run_reports_under_sequential_prefill(project_file, capsys):
    from pathlib import Path

    argv = ["run", project_file, "--batch", "3", "--prefill", "sequential", "--engine", "analytic", "--json"]
    assert main(argv) == 0
    m = _strict(capsys.readouterr().out)
    steps = 16 - 1  # the fixture's output_tokens
    assert m["ttft_s"] < m["prefill_s"]  # sequential: the first sequence's first token, before the batch's last
    assert m["tpot_s"] == pytest.approx((m["e2e_s"] - m["prefill_s"]) / steps)
    assert m["tpot_s"] != pytest.approx((m["e2e_s"] - m["ttft_s"]) / steps)
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert "`tpot_s` ((e2e − prefill_s)/(output_tokens − 1)" in readme
    assert "(e2e − TTFT)/(output_tokens − 1); null" not in readme
