"""The public Megatron-LM timings (benchmarks/data/public_megatron_logs.csv) parse and each builds a valid project.

Data checks only, not accuracy: the comparison itself is benchmarks/calibrate_public_megatron_logs.py. A row
that cannot be rebuilt as the run it reports (wrong GPU count, a layout Megatron would refuse, an unknown GPU)
would make that comparison silently wrong, so those are what these tests catch.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
from calibrate_public_megatron_logs import CSV, padded_vocab, project_for, rows  # noqa: E402
from tilewright.engine.ir import Project  # noqa: E402
from tilewright.engine.simulate import make_plan  # noqa: E402

REQUIRED_TEXT = ("id", "source_url", "gpu", "precision", "recompute", "attention", "megatron_variant",
                 "measured_how", "caveats", "vocab_note")


@pytest.fixture(scope="module")
def data() -> list[dict]:
    assert CSV.is_file(), f"reference data missing: {CSV}"
    return rows()


def test_every_line_has_every_column():
    with CSV.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        lines = list(reader)
    assert lines, "no data rows"
    assert len(set(header)) == len(header)
    for line in lines:
        assert len(line) == len(header), f"{line[0]}: {len(line)} fields, header has {len(header)}"


def test_rows_are_complete_and_unique(data):
    ids = [r["id"] for r in data]
    assert len(ids) == len(set(ids))
    for r in data:
        for k in REQUIRED_TEXT:
            assert r[k].strip(), f"{r['id']}: {k} is empty"
        assert r["source_url"].startswith("https://github.com/"), r["id"]
        assert r["measured_ms"] > 0, r["id"]
        assert r["precision"] in ("fp16", "bf16"), r["id"]
        assert r["recompute"] in ("none", "full", "selective"), r["id"]
        assert r["attention"] in ("unfused", "flash"), r["id"]


def test_layouts_are_single_node_runs_megatron_accepts(data):
    for r in data:
        assert r["tp"] * r["pp"] * r["dp"] == r["gpus"] <= 8, f"{r['id']}: not one node of {r['gpus']} GPUs"
        assert r["heads"] % r["tp"] == 0 and r["kv_heads"] % r["tp"] == 0, r["id"]
        assert r["layers"] % (r["pp"] * r["interleave"]) == 0, r["id"]
        assert r["gbs"] % (r["mb"] * r["dp"]) == 0, f"{r['id']}: global batch not whole micro-batches per rank"
        if r["interleave"] > 1:
            assert (r["gbs"] // (r["mb"] * r["dp"])) % r["pp"] == 0, f"{r['id']}: interleaving needs m % pp == 0"


def test_padded_vocabulary_follows_megatron():
    # 50257 (GPT-2 BPE) padded to multiples of 128, 256 and 512, worked by hand; 131072 is already one
    assert padded_vocab(50257, 1) == 50304
    assert padded_vocab(50257, 2) == 50432
    assert padded_vocab(50257, 4) == 50688
    assert padded_vocab(131072, 4) == 131072


def test_every_row_builds_a_valid_project(data):
    for r in data:
        p = project_for(r)
        again = Project.model_validate(p.model_dump(mode="json"))
        assert again.mapping.tp == r["tp"] and again.mapping.pp == r["pp"] and again.mapping.dp == r["dp"]
        assert again.mapping.micro_batch == r["mb"] and again.mapping.global_batch == r["gbs"]
        assert again.workload.seq_len == r["seq"] and again.workload.layers == r["layers"]
        assert again.run.dtype == r["precision"]
        plan = make_plan(p)
        assert len(plan.stages) == r["pp"], r["id"]


def test_the_megatron_core_pairs_are_one_test_on_two_hosts(data):
    """Each ``ci-mcore-<gpu>-<layout>`` and ``ci-te-<gpu>-<layout>`` row has its twin on the other DGX: the same
    Megatron-Core CI test (one directory, ``golden_values_dev.json`` or ``golden_values_dev_dgx_a100.json`` beside
    ``golden_values_dev_dgx_h100.json``), so every column but the
    GPU, the source file and the measurement is the same, and each is predicted on its own host's preset."""
    from calibrate_public_megatron_logs import pair_key, system_for

    pairs: dict[str, dict[str, dict]] = {}
    for r in data:
        if (key := pair_key(r)) is not None:
            pairs.setdefault(key, {})[r["gpu"][:4]] = r
    assert len(pairs) >= 3
    differ = {"id", "source_url", "gpu", "measured_ms", "measured_how", "caveats"}
    for key, by_gpu in pairs.items():
        assert set(by_gpu) == {"A100", "H100"}, key
        a, h = by_gpu["A100"], by_gpu["H100"]
        assert {k for k in a if a[k] != h[k]} <= differ, key
        # one test directory, two golden files
        assert a["source_url"].rsplit("/", 1)[0].split("/")[-1] == h["source_url"].rsplit("/", 1)[0].split("/")[-1]
        assert a["source_url"].endswith(("/golden_values_dev.json", "/golden_values_dev_dgx_a100.json"))
        assert h["source_url"].endswith("/golden_values_dev_dgx_h100.json")
        assert system_for(a["gpu"]) == "dgx-a100" and system_for(h["gpu"]) == "dgx-h100"
        assert project_for(h).hardware.name != project_for(a).hardware.name


def test_layer_passes_follow_the_1f1b_critical_path(data):
    """A stage of pp runs m micro-batches plus (pp - 1) / v of fill and drain over its layers / pp layers; worked
    by hand for a row of each shape (m = gbs / (mb x dp))."""
    from calibrate_public_megatron_logs import gap_per_layer_pass, layer_passes

    by_id = {r["id"]: r for r in data}
    assert layer_passes(by_id["ci-nightly-tp4-pp1"]) == 4 * 12  # m = 32 / (4 x 2), no pipeline
    assert layer_passes(by_id["ci-nightly-tp1-pp4"]) == (4 + 3) * 3  # m = 32 / (4 x 2), 3 layers a stage
    assert layer_passes(by_id["ci-2023-tp1-pp2"]) == (2 + 1) * 6  # m = 32 / (4 x 4)
    assert layer_passes(by_id["ci-7b-tp1-pp4-vp"]) == pytest.approx((4 + 3 / 8) * 8)  # interleaved 8 chunks
    r = by_id["ci-mcore-h100-tp4-pp1"]
    measured = r["measured_ms"] / 1e3
    assert gap_per_layer_pass(r, measured) == 0.0
    assert gap_per_layer_pass(r, measured - 0.048) == pytest.approx(0.048 / 48)  # too fast: a positive gap


def test_the_pairs_table_prints_each_test_once(data, capsys):
    from calibrate_public_megatron_logs import pair_key, pairs

    results = [(r, -0.5, {}) for r in data]  # every prediction half the measurement
    pairs(results)
    out = capsys.readouterr().out
    keys = {pair_key(r) for r in data} - {None}
    for key in keys:
        line = next(x for x in out.splitlines() if x.startswith(key + " "))
        fields = line.split()
        # measured and predicted ratios are equal when both hosts are off by the same factor
        assert fields[5] == fields[6]
