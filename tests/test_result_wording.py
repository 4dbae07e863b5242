"""The words around the numbers: a power summed over some energy parts says which; an inference batch's energy
is the batch's, with one request's share beside it; host energy is an upper bound; a CNN has samples, not
tokens; a format without units of its own says whose peak it runs at; the search table names every option its
rows differ in and keeps its columns; the Timeline says which categories it draws no colour for."""

from __future__ import annotations

import dataclasses
import re

import pytest
from tilewright.engine.io import load_project
from tilewright.engine.ir.common import DType
from tilewright.engine.results.result import ENERGY_PARTS, counts_only
from tilewright.engine.simulate import simulate

from tests.engine_cases import dgx, llama_inference
from tests.test_energy import energetic


def _line(text: str, head: str) -> str:
    return next(s for s in text.splitlines() if s.strip().startswith(head))


# -- energy ------------------------------------------------------------------------------------------------------
def test_power_of_partly_priced_hardware_names_the_parts_it_counts() -> None:
    result = simulate(load_project("presets/projects/tpu-v4-llama2-7b.json"))
    parts = result.metrics_json()["energy_breakdown_j"]
    unknown = [k for k in ENERGY_PARTS if parts[k] is None]
    assert "compute" in unknown and "static" in unknown  # the case the reviewer met
    power = _line(result.summary_text(), "average power")
    assert "only" in power and "not known" in power
    for part in unknown:
        assert part in power.split("only;")[1]
    priced = [k for k in ENERGY_PARTS if parts[k]]
    for part in priced:
        assert part.lower() in power.split("only;")[0].lower()


def test_fully_priced_power_is_unqualified() -> None:
    result = simulate(energetic(dgx()))
    assert all(v is not None for v in result.energy.by_part.values())
    assert counts_only(result.metrics_json()["energy_breakdown_j"]) == ""
    assert "only" not in _line(result.summary_text(), "average power")


def test_inference_energy_is_the_batchs_with_a_per_request_share() -> None:
    project = energetic(llama_inference())
    batch = project.run.inference.batch
    result = simulate(project)
    m = result.metrics_json()
    total = sum(v for k, v in result.energy.by_part.items() if v is not None and k != "host")  # hosts: a bound
    assert m["energy_j"] == pytest.approx(total)
    assert m["energy_per_request_j"] == pytest.approx(total / batch)
    tokens = batch * project.run.inference.output_tokens
    assert m["energy_per_token_j"] == pytest.approx(total / tokens)  # per output token, the batch's tokens
    line = _line(result.summary_text(), "energy  ")
    assert f"per batch of {batch} requests" in line and "J/output token" in line
    assert "J per request" in line and "J per request," not in line.split("(")[0]


def test_host_energy_is_said_to_be_an_upper_bound() -> None:
    result = simulate(energetic(dgx()))
    if not result.energy.by_part.get("host"):
        pytest.fail("the DGX preset has a host power: this test needs one")
    text = result.summary_text()
    assert "host ≤" in _line(text, "energy by part")
    assert "upper bound" in text


# -- units that apply ----------------------------------------------------------------------------------------------
def test_a_cnn_reports_samples_not_tokens() -> None:
    result = simulate(load_project("presets/projects/hypar-vgg-a.json"))
    m = result.metrics_json()
    assert "tokens_per_s" not in m and "energy_per_token_j" not in m
    assert m["samples_per_s"] == pytest.approx(result.samples_per_iteration / result.iteration_time_s)
    assert "token" not in _line(result.summary_text(), "throughput")


def test_a_transformer_still_reports_tokens() -> None:
    result = simulate(dgx())
    m = result.metrics_json()
    assert m["tokens_per_s"] == pytest.approx(m["samples_per_s"] * result.tokens_per_sample)
    assert "tokens/s" in _line(result.summary_text(), "throughput")


# -- a format without units of its own -------------------------------------------------------------------------------
def test_fp16_on_an_int8_design_says_whose_peak_it_runs_at() -> None:
    project = load_project("presets/projects/chiplet-bert-large.json")
    compute = project.hardware.device_template()
    assert project.run.dtype is DType.fp16 and DType.fp16 not in compute.peak_flops
    result = simulate(project)
    used = compute.runs_as(DType.fp16)
    note = next(n for n in result.notes if n.startswith("fp16 "))
    assert used.value in note and f"{compute.peak_flops[used] / 1e12:.4g} TFLOP/s" in note
    assert result.peak_flops_per_device == compute.peak_flops[used]


def test_a_format_with_its_own_units_has_no_such_note() -> None:
    result = simulate(dgx())  # bf16 on A100s
    assert not any("has no peak of its own" in n for n in result.notes)
    compute = dgx().hardware.device_template()
    assert compute.fallback_note(DType.bf16) is None
    missing = next(d for d in DType if d not in compute.peak_flops and d not in (DType.bfp8, DType.bfp4))
    assert compute.fallback_note(missing) is not None


# -- the search table ------------------------------------------------------------------------------------------------
def test_search_table_names_every_option_and_keeps_its_columns() -> None:
    from tilewright.engine.ir import Project, RunSettings
    from tilewright.engine.search.parallel.report import search_text, sharding_text
    from tilewright.engine.search.parallel.search import search

    from tests.factories import cluster
    from tests.test_report_text import small_gpt

    project = Project(name="t", hardware=cluster(nodes=2), workload=small_gpt(), run=RunSettings(dtype="bf16"))
    result = search(project, 8, 8, top=0, keep=3)
    assert len(result.ranked) >= 3
    plain = dataclasses.replace(result.ranked[0].candidate, overlap_tp=False)
    long_tags = dataclasses.replace(plain, ep=8, expert_tp=1, dispatcher="deepep", cp=2, fsdp=True,
                                    offload="host", overlap_grad_reduce=True, overlap_ep=True, delay_wgrad=True,
                                    overlap_tp=True)
    only_tp = dataclasses.replace(plain, overlap_tp=True)
    assert sharding_text(only_tp) != sharding_text(plain)  # rows differing in overlap_tp differ in the table
    ranked = [dataclasses.replace(result.ranked[0], candidate=long_tags),
              dataclasses.replace(result.ranked[1], candidate=only_tp), *result.ranked[2:]]
    lines = search_text(dataclasses.replace(result, ranked=ranked)).splitlines()
    header = next(s for s in lines if s.strip().startswith("#"))
    rows = [s for s in lines if re.match(r"^\s+\d+\s", s)]
    assert sharding_text(long_tags) in rows[0]
    # every column after the sharding column ends where its heading ends, row by row
    for heading in ("fast (s)", "samples/s", "event (s)", "mem GiB"):
        end = header.index(heading) + len(heading)
        for row in rows:
            assert row[end - 1] != " " and (end == len(row) or row[end] == " "), (heading, row)


# -- the Timeline's legend -------------------------------------------------------------------------------------------
def test_timeline_says_which_categories_it_draws_no_colour_for() -> None:
    from tilewright.engine.results import CATEGORIES
    from tilewright.studio.model.gantt_data import GanttData
    from tilewright.studio.model.palette import category_label

    result = simulate(load_project("presets/projects/llama2-70b-h100-inference.json"))
    data = GanttData(result.timeline, result.time_breakdown_s, result.iteration_time_s)
    drawn = {CATEGORIES[k] for k in data.present["category"]}
    stall = result.time_breakdown_s["memory_stall"]
    assert "memory_stall" not in drawn and stall > 0
    note = data.unseen_note()
    assert f"memory stall {100 * stall / result.iteration_time_s:.0f} %" in note and "Summary" in note
    for k in drawn:  # a category drawn has its colour in the legend, no share in the note
        assert not re.search(rf"{category_label(k)} \d+ %", note), (k, note)
    assert GanttData(result.timeline).unseen_note() == ""  # no breakdown given, nothing claimed
