"""Selective recomputation that changes nothing: the attention core runs in a fused (flash) kernel, which stores no
scores and recomputes them in its own backward, so selective recomputation of the core is the run without
recomputation (``perf.recompute.changes_nothing``). ``search`` listed both as separate rows with the same time and
memory (tpu-v4-llama2-7b; gpt-7.5b with --cp 2, whose context ring is such a kernel); it lists one, and says why.
``run`` says so too."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.cli import main

# the audit's case: its rows #1 and #2 were one run (4.130 s, 33.3 GiB)
GPT_CP = ["--system", "dgx-a100", "--model", "gpt-7.5b", "--devices", "64", "--global-batch", "512", "--cp", "1,2"]


def _run(capsys, *argv: str) -> dict:
    assert main(["run", *argv, "--engine", "analytic", "--json", "--quiet"]) == 0
    return json.loads(capsys.readouterr().out)


def _search(capsys, *argv: str) -> dict:
    assert main(["search", *argv, "--no-simulate", "--json", "--quiet"]) == 0
    return json.loads(capsys.readouterr().out)


def _mapping(c: dict) -> tuple:
    """A candidate's whole mapping, its figures left out: two equal keys are one run listed twice."""
    figures = {"iteration_time_s", "samples_per_s", "peak_memory_bytes", "spatial_splits"}
    return tuple(sorted((k, json.dumps(v)) for k, v in c.items() if k not in figures and not k.startswith("event_")))


def test_run_on_a_fused_attention_says_selective_changes_nothing(capsys):
    """The engine prices selective and none alike there (same time, same memory); only selective gets the note.
    Unfused, selective re-runs the core: slower, less memory, no note."""
    sel = _run(capsys, "tpu-v4-llama2-7b", "--recompute", "selective")
    none = _run(capsys, "tpu-v4-llama2-7b", "--recompute", "none")
    assert sel["iteration_time_s"] == pytest.approx(none["iteration_time_s"], rel=1e-12)
    assert sel["peak_memory_bytes"] == pytest.approx(none["peak_memory_bytes"], rel=1e-12)
    assert any("selective recomputation changes nothing" in n for n in sel["notes"])
    assert not any("changes nothing" in n for n in none["notes"])
    unfused = ["tpu-v4-llama2-7b", "--set", "mapping.fusion=[]"]
    sel = _run(capsys, *unfused, "--recompute", "selective")
    none = _run(capsys, *unfused, "--recompute", "none")
    assert sel["iteration_time_s"] > none["iteration_time_s"] and sel["peak_memory_bytes"] < none["peak_memory_bytes"]
    assert not any("changes nothing" in n for n in sel["notes"])


def test_search_lists_no_selective_twin_of_a_fused_candidate(capsys):
    data = _search(capsys, "tpu-v4-llama2-7b", "--list", "12")
    rows = data["candidates"]
    assert len(rows) == 12
    assert not any(c["recompute"] == "selective" and c["recompute_modules"] is None for c in rows)
    keys = [_mapping(c) for c in rows]
    assert len(set(keys)) == len(keys)
    assert any("selective recomputation (core_attn) not listed" in n for n in data["notes"])


def test_search_lists_no_selective_twin_under_the_context_ring(capsys):
    """cp 2: every attention core runs in the ring's blockwise kernel (``plan.context.flash_fused``), so the
    second stage's context-parallel variants of selective seeds are their none twins."""
    data = _search(capsys, *GPT_CP, "--list", "6")
    rows = data["candidates"]
    ring = [c for c in rows if c["cp"] == 2]
    assert ring
    assert not any(c["recompute"] == "selective" and c["recompute_modules"] is None for c in rows)
    keys = [_mapping(c) for c in rows]
    assert len(set(keys)) == len(keys)
    # and the twin is the same run: the run of the listed none candidate with selective matches it
    best = ring[0]
    flags = ["--tp", str(best["tp"]), "--pp", str(best["pp"]), "--dp", str(best["dp"]), "--cp", "2",
             "--micro-batch", str(best["micro_batch"]), "--zero", str(best["zero"])]
    if best["sequence_parallel"]:
        flags.append("--sequence-parallel")
    base = [a for a in GPT_CP if a not in ("--cp", "1,2")]
    none = _run(capsys, *base, *flags, "--recompute", "none")
    sel = _run(capsys, *base, *flags, "--recompute", "selective")
    assert sel["iteration_time_s"] == pytest.approx(none["iteration_time_s"], rel=1e-12)
    assert sel["peak_memory_bytes"] == pytest.approx(none["peak_memory_bytes"], rel=1e-12)
