"""``tilewright serve``: flags, strict JSON, CSV records, a rate sweep, and bad input as exit status 2."""

from __future__ import annotations

import csv
import re

import pytest
from tilewright.engine.cli import main

from tests.serving_files import serve_project_file, strict_json

_strict = strict_json


@pytest.fixture
def project_file(tmp_path):
    return serve_project_file(tmp_path)


def test_json_is_strict_and_has_percentiles_goodput_kv_and_records(project_file, capsys):
    code = main(
        [
            "serve",
            project_file,
            "--rate",
            "50",
            "--requests",
            "40",
            "--slo-ttft",
            "0.5",
            "--slo-tpot",
            "0.01",
            "--json",
            "--quiet",
        ]
    )
    assert code == 0
    out = _strict(capsys.readouterr().out)
    m = out["metrics"]
    assert m["requests"] == 40 and len(out["records"]) == 40
    assert m["ttft_s"]["p50"] <= m["ttft_s"]["p90"] <= m["ttft_s"]["p99"]
    assert 0.0 <= m["goodput"]["fraction_meeting_slo"] <= 1.0
    assert m["throughput_output_tokens_per_s"] > 0
    assert out["kv_occupancy"]["serve"]


def test_one_token_answers_have_no_tpot_and_json_stays_strict(project_file, capsys):
    assert main(["serve", project_file, "--requests", "5", "--output-tokens", "1", "--json", "--quiet"]) == 0
    out = _strict(capsys.readouterr().out)
    assert out["metrics"]["tpot_s"]["count"] == 0 and out["metrics"]["tpot_s"]["p50"] is None


def test_csv_has_one_row_per_request(project_file, tmp_path, capsys):
    path = tmp_path / "records.csv"
    assert main(["serve", project_file, "--requests", "12", "--csv", str(path), "--quiet"]) == 0
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 12 and {"ttft_s", "tpot_s", "e2e_s", "preemptions"} <= set(rows[0])
    assert "TTFT" in capsys.readouterr().out


def test_rate_sweep_reports_the_highest_rate_meeting_the_slo(project_file, capsys):
    code = main(
        [
            "serve",
            project_file,
            "--requests",
            "60",
            "--sweep-rates",
            "10:30:10",
            "--slo-ttft",
            "10",
            "--json",
            "--quiet",
        ]
    )
    assert code == 0
    out = _strict(capsys.readouterr().out)
    assert [r["rate_requests_per_s"] for r in out["rates"]] == [10.0, 20.0, 30.0]
    assert out["best_rate_requests_per_s"] == 30.0  # a 10 s TTFT target is met everywhere


def test_disaggregation_and_speculation_flags_run(project_file, capsys):
    assert (
        main(
            [
                "serve",
                project_file,
                "--requests",
                "10",
                "--disaggregate",
                "1:1",
                "--spec-k",
                "3",
                "--spec-accept",
                "0.7",
                "--json",
                "--quiet",
            ]
        )
        == 0
    )
    out = _strict(capsys.readouterr().out)
    assert set(out["kv_occupancy"]) == {"prefill", "decode"}
    assert all(r["transfer_s"] > 0 for r in out["records"])


BAD_TRACES = {
    "bad.json": ('[{"arrival_s": 0, "prompt_tokens": 10}]', "requests[0].output_tokens"),
    "neg.json": ('{"requests": [{"arrival_s": -1, "prompt_tokens": 10, "output_tokens": 2}]}', "arrival_s"),
    "word.json": ('[{"arrival_s": "soon", "prompt_tokens": 10, "output_tokens": 2}]', "arrival_s"),
    "broken.json": ('[{"arrival_s": 0,', "not valid JSON"),
    "zero.csv": ("arrival_s,prompt_tokens,output_tokens\n0,0,5\n", "row 2.prompt_tokens"),
    "nocol.csv": ("arrival_s,prompt_tokens\n0,5\n", "output_tokens"),
    "half.json": ('[{"arrival_s": 0, "prompt_tokens": 10.5, "output_tokens": 2}]', "whole number"),
    "empty.json": ("[]", "no requests"),
}


@pytest.mark.parametrize("name", list(BAD_TRACES))
def test_a_bad_trace_file_is_exit_2_naming_file_field_and_reason(project_file, tmp_path, capsys, name):
    text, expected = BAD_TRACES[name]
    path = tmp_path / name
    path.write_text(text)
    assert main(["serve", project_file, "--trace", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and expected in err and "Traceback" not in err


def test_a_trace_replays_its_requests(project_file, tmp_path, capsys):
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0.5,64,4\n0.0,200,8\n2,17,1\n")
    assert main(["serve", project_file, "--trace", str(path), "--json", "--quiet"]) == 0
    records = _strict(capsys.readouterr().out)["records"]
    assert [(r["arrival_s"], r["prompt_tokens"], r["output_tokens"]) for r in records] == [
        (0.5, 64, 4),
        (0.0, 200, 8),
        (2.0, 17, 1),
    ]


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--requests", "100000000"], "limit"),
        (["--disaggregate", "1:3"], "--disaggregate"),
        (["--disaggregate", "x"], "P:D"),
        (["--spec-k", "3"], "give both"),
        (["--spec-k", "3", "--spec-accept", "1.5"], "--spec-accept"),
        (["--sweep-rates", "5:1:1"], "--sweep-rates"),
        (["--max-batch", "0"], "--max-batch"),
        (["--requests", "1", "--prompt-tokens", "30000000", "--set", "workload.seq_len=40000000"], "KV cache"),
        (["--requests", "1", "--prompt-tokens", "30000000"], "past the model's context"),
        (["--rate", "inf"], "--rate"),
        (["--rate", "1e-12"], "--rate"),  # arrivals spread past where float seconds resolve an iteration
        (["--slo-ttft", "inf"], "--slo-ttft"),  # would be written as null: no target, silently
        (["--spec-k", "2", "--spec-accept", "0.5", "--spec-draft-cost", "inf"], "--spec-draft-cost"),
        (["--spec-k", "2", "--spec-accept", "0.5", "--spec-draft-cost", "nan"], "--spec-draft-cost"),
        (["--set", "mapping.tp=3"], "mapping.tp"),  # what `tilewright run` refuses, serve refuses too
        (["--set", "mapping.dp=4", "--set", "mapping.global_batch=4", "--disaggregate", "1:3"], "decode group"),
    ],
)
def test_bad_settings_are_exit_2_with_the_reason(project_file, capsys, argv, expected):
    try:
        code = main(["serve", project_file, "--quiet", *argv])
    except SystemExit as exc:  # argparse refuses a non-finite number itself (``cli.common.finite_float``)
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err


def test_an_encoder_cannot_be_served(capsys):
    assert main(["serve", "chiplet-bert-large", "--requests", "3", "--quiet"]) == 2
    assert "decoder" in capsys.readouterr().err


def test_a_far_future_arrival_in_a_trace_is_refused(project_file, tmp_path, capsys):
    path = tmp_path / "far.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,8,2\n1e300,8,2\n")
    assert main(["serve", project_file, "--trace", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "row 3.arrival_s" in err


@pytest.mark.parametrize("where", ["folder", "no folder", "the trace", "the project"])
def test_a_records_file_that_cannot_work_is_refused_before_simulating(project_file, tmp_path, capsys, where):
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,8,2\n")
    before = trace.read_text(), open(project_file).read()
    out = {
        "folder": str(tmp_path),
        "no folder": str(tmp_path / "missing" / "r.csv"),
        "the trace": str(trace),
        "the project": project_file,
    }[where]
    assert main(["serve", project_file, "--trace", str(trace), "--csv", out, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--csv" in err and "Traceback" not in err
    assert (trace.read_text(), open(project_file).read()) == before


def test_disaggregated_summary_and_json_report_the_kv_transfer(project_file, capsys):
    assert main(["serve", project_file, "--requests", "6", "--disaggregate", "1:1", "--json", "--quiet"]) == 0
    out = _strict(capsys.readouterr().out)
    moved = [r["transfer_s"] for r in out["records"]]
    kv = out["metrics"]["kv_transfer_s"]
    assert kv["count"] == 6 and kv["mean"] == pytest.approx(sum(moved) / 6)
    assert main(["serve", project_file, "--requests", "6", "--disaggregate", "1:1", "--quiet"]) == 0
    assert "KV transfer" in capsys.readouterr().out
    assert main(["serve", project_file, "--requests", "6", "--json", "--quiet"]) == 0
    assert _strict(capsys.readouterr().out)["metrics"]["kv_transfer_s"]["count"] == 0


def test_a_huge_rate_range_is_refused_before_its_list_is_built():
    """1:1e9:1 would build a billion rates (tens of GB) before any limit was checked."""
    from tilewright.engine.cli.serve import parse_rates
    from tilewright.engine.errors import InputError

    with pytest.raises(InputError, match="1,000,000,000 rates"):
        parse_rates("1:1000000000:1")
    assert parse_rates("1:3:1") == [1.0, 2.0, 3.0]


def test_serve_names_the_project_first(project_file, capsys):
    assert main(["serve", project_file, "--requests", "5", "--quiet"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == "infer — serve, 2 devices, 5 requests, Poisson arrivals at 1 request/s"
    assert main(["serve", project_file, "--requests", "5", "--sweep-rates", "1,2", "--quiet"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("infer — serve, 2 devices, 5 requests per rate")


def test_the_report_writes_shares_as_run_does(project_file, capsys):
    """Goodput and KV shares read "37.5 %" (a space before the sign, as run's MFU), pages and tokens are
    counted nouns: the same numbers as the JSON, in the report's style."""
    args = ["serve", project_file, "--rate", "50", "--requests", "40", "--slo-ttft", "0.5", "--slo-tpot", "0.01"]
    assert main([*args, "--json", "--quiet"]) == 0
    m = _strict(capsys.readouterr().out)["metrics"]
    assert main([*args, "--quiet"]) == 0
    text = capsys.readouterr().out
    share = f"{100 * m['goodput']['fraction_meeting_slo']:.1f} % of requests"
    assert share in text
    kv = m["kv"]["serve"]
    peak, mean = (f"{100 * kv[k]:.1f} %" for k in ("peak_fraction", "mean_fraction"))
    assert f"pages of {kv['page_tokens']:,} tokens, peak {peak}, mean {mean} in use" in text
    assert re.search(r"\d%", text) is None  # no "100.0%" left anywhere in the report
