"""The text the commands print: one number style (``results.text``), "1 device", rounding noise kept out
of the time breakdown, preset descriptions cut at a word, the search table's columns, serve's first line."""

from __future__ import annotations

import re

import numpy as np
import pytest
from tilewright.engine.cli.catalog import DESCRIPTION_WIDTH, _describe, catalog, first_sentence
from tilewright.engine.engines.result_builder import BREAKDOWN_NOISE
from tilewright.engine.io.presets import load_project_preset
from tilewright.engine.ir import RunSettings
from tilewright.engine.results.text import counted, duration, number, quantity, shorten, si
from tilewright.engine.search.parallel.report import search_text
from tilewright.engine.search.parallel.search import search
from tilewright.engine.simulate import simulate

from tests.engine_cases import dgx
from tests.factories import cluster, small_gpt

EXPONENT = re.compile(r"\d[eE][+-]?\d")
PLAIN = re.compile(r"^-?\d{1,3}(,\d{3})*(\.\d+)?$")  # thousands grouped by three, no exponent


def _significant(text: str) -> int:
    digits = text.replace(",", "").replace("-", "").replace(".", "").lstrip("0")
    return len(digits.rstrip("0")) if "." not in text else len(digits)


# -- the helpers -----------------------------------------------------------------------------------------
def test_number_is_plain_grouped_and_keeps_four_significant_digits():
    rng = np.random.default_rng(7)
    for x in 10 ** rng.uniform(-4, 12, 2000):
        for value in (float(x), -float(x)):
            shown = number(value)
            assert PLAIN.match(shown), (value, shown)
            assert _significant(shown) <= 4, (value, shown)
            assert float(shown.replace(",", "")) == pytest.approx(value, rel=5e-4), (value, shown)
    assert number(0.0) == "0" and number(1e-15) == "1e-15"  # noise-sized values keep their exponent


def test_number_rounds_up_across_a_magnitude_without_an_exponent():
    assert number(9999.6) == "10,000" and number(999.96, 3) == "1,000"


def test_counted_agrees_with_its_count():
    assert [counted(n, "device") for n in (0, 1, 2, 3072)] == ["0 devices", "1 device", "2 devices", "3,072 devices"]
    assert counted(1, "micro-batch", "micro-batches") == "1 micro-batch"
    assert counted(4, "micro-batch", "micro-batches") == "4 micro-batches"


def test_shorten_cuts_at_a_word_and_says_so():
    text = "PALM-style tiled wafer: 5 x 4 dies of 4 x 4 tiles (320 tiles), 4 DRAM ports per die, as PALM configures"
    cut = shorten(text, 100)
    assert len(cut) <= 100 and cut.endswith("…")
    kept = cut[:-1]
    assert text.startswith(kept) and text[len(kept)] in " ,"  # the next character ends a word
    assert shorten("short", 100) == "short"


# -- tilewright run's summary ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def inference():
    return simulate(load_project_preset("llama2-70b-h100-inference"))


@pytest.fixture(scope="module")
def megatron_analytic():
    project = load_project_preset("megatron-18b-dgx-a100")
    return simulate(project.model_copy(update={"run": project.run.model_copy(update={"engine": "analytic"})}))


def test_one_device_is_singular_in_the_summary_and_the_lanes():
    for engine in ("event", "analytic"):
        project = dgx(tp=1, pp=1, dp=1)
        project = project.model_copy(update={"run": RunSettings(dtype="bf16", engine=engine)})
        result = simulate(project)
        assert result.summary_text().splitlines()[0] == f"dgx-test — train, {engine} engine, 1 device"
        compute = [lane for lane in result.timeline.lanes if lane.group == "compute"]
        assert compute and all(lane.detail == "1 device" for lane in compute)
    result = simulate(dgx(tp=2, pp=2, dp=2))
    for lane in (lane for lane in result.timeline.lanes if lane.group == "compute"):
        n = len(result.lane_devices[lane.name])
        assert n > 1 and lane.detail == f"{n} devices"


def test_rounding_noise_is_no_bubble(inference, megatron_analytic):
    for result in (inference, megatron_analytic):
        m = result.metrics_json()
        t = m["iteration_time_s"]
        assert set(m["time_breakdown_s"]) >= {"bubble", "compute", "memory_stall"}  # keys stay
        line = next(s for s in result.summary_text().splitlines() if s.strip().startswith("time breakdown"))
        for k, v in m["time_breakdown_s"].items():
            assert v == 0.0 or abs(v) >= BREAKDOWN_NOISE * t, (k, v)
            assert (f" {k} " in line) == (v > 0), (k, v, line)
        # the parts still account for the iteration (what was dropped was below a nanosecond per second)
        assert sum(m["time_breakdown_s"].values()) == pytest.approx(t, rel=1e-6)


def _value(text: str, before: str) -> str:
    match = re.search(r"([-\d.,]+(?:e[+-]?\d+)?) " + re.escape(before), text)
    assert match, (before, text)
    return match.group(1)


def test_summary_numbers_share_one_style(inference, megatron_analytic):
    for result in (inference, megatron_analytic):
        text = result.summary_text()
        head = "\n".join(s for s in text.splitlines() if not s.strip().startswith(("note", "split")))
        assert not EXPONENT.search(head), head
        m = result.metrics_json()
        for shown, value in ((_value(head, "tokens/s"), m["tokens_per_s"]),
                             (_value(head, "samples/s"), m["samples_per_s"]),
                             (_value(head, "J per"), m["energy_j"])):
            assert PLAIN.match(shown) and _significant(shown) <= 4, shown
            assert float(shown.replace(",", "")) == pytest.approx(value, rel=5e-4)
    ttft, unit = re.search(r"TTFT / TPOT +([\d.,]+) (µs|ms|s) /", inference.summary_text()).groups()
    scale = {"µs": 1e-6, "ms": 1e-3, "s": 1.0}[unit]
    assert 1 <= float(ttft.replace(",", "")) < 1000 or unit == "s"  # the largest unit that keeps it ≥ 1
    assert _significant(ttft) <= 4 and float(ttft.replace(",", "")) * scale == pytest.approx(inference.ttft_s, rel=5e-4)


# -- units at a readable scale (D18) -----------------------------------------------------------------------
_SCALE = {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0}


def test_duration_picks_the_unit_that_keeps_the_number_readable():
    rng = np.random.default_rng(3)
    for x in 10 ** rng.uniform(-9, 5, 2000):
        shown, unit = duration(float(x)).split(" ")
        assert not EXPONENT.search(shown) and PLAIN.match(shown), (x, shown)
        value = float(shown.replace(",", ""))
        assert value * _SCALE[unit] == pytest.approx(x, rel=5e-4), (x, shown, unit)
        assert value >= 1 and (value < 1000 or unit == "s"), (x, shown, unit)  # never "57,550 ms"
    assert duration(0.0) == "0 s" and duration(0.9999999) == "1 s"


def test_si_and_quantity_name_the_unit():
    for watts in 10 ** np.random.default_rng(4).uniform(0, 14, 500):
        shown, unit = si(float(watts), "W").split(" ")
        prefix = unit[:-1]
        scale = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[prefix]
        assert not EXPONENT.search(shown) and float(shown.replace(",", "")) * scale == pytest.approx(watts, rel=5e-4)
        assert unit.endswith("W") and (float(shown.replace(",", "")) < 1000 or prefix == "T")
    assert quantity("power_w", 2.6e4) == si(2.6e4, "W")
    assert quantity("iteration_time_s", 8.393e-05) == duration(8.393e-05)
    assert quantity("samples_per_s", 36.51) == "36.51 samples/s"
    assert quantity("hardware.children.0.memories.0.bandwidth_bytes_per_s", 2e12) == "2 TB/s"
    assert quantity("mapping.dp", 16.0) == "16" and quantity("mapping.recompute", "selective") == "selective"


def test_summary_times_carry_their_unit_at_a_readable_scale(inference, megatron_analytic):
    for result in (inference, megatron_analytic):
        m = result.metrics_json()
        line = next(s for s in result.summary_text().splitlines() if s.strip().startswith("time breakdown"))
        for k, v in m["time_breakdown_s"].items():
            if v > 0:
                shown, unit = re.search(rf"\b{k} ([\d.,]+) (ns|µs|ms|s)\b", line).groups()
                assert float(shown.replace(",", "")) * _SCALE[unit] == pytest.approx(v, rel=5e-4), (k, line)
        assert not EXPONENT.search(line), line


# -- tilewright presets ------------------------------------------------------------------------------------
def test_a_citation_does_not_end_the_first_sentence():
    text = "BERT-large, Devlin et al. 2019 (arXiv 1810.04805): 24 layers. Vocabulary 30,522."
    assert first_sentence(text) == "BERT-large, Devlin et al. 2019 (arXiv 1810.04805): 24 layers"
    assert first_sentence("LeNet-5, LeCun et al., Proc. IEEE 1998: 61,706 parameters. More.") == (
        "LeNet-5, LeCun et al., Proc. IEEE 1998: 61,706 parameters")
    assert _describe({"comment": "x" * 150}) == "x" * (DESCRIPTION_WIDTH - 1) + "…"  # one long word: cut inside


def test_catalog_descriptions_end_at_a_word():
    from tilewright.engine.io.json_file import read_json
    from tilewright.engine.io.presets import preset_path

    for kind, rows in catalog().items():
        for row in rows:
            data = read_json(preset_path(kind, row["name"]))
            source = str(data.get("description") or data.get("comment") or "")
            shown = row["description"]
            assert len(shown) <= DESCRIPTION_WIDTH
            kept = shown.removesuffix("…")
            assert source.startswith(kept), (row["name"], shown)
            if len(kept) < len(source):  # a first sentence, or a cut with "…": between words either way
                assert not source[len(kept)].isalnum(), (row["name"], shown)


# -- the search table --------------------------------------------------------------------------------------
def test_search_table_gives_samples_per_second_of_the_time_beside_it():
    from tilewright.engine.ir import Project

    project = Project(name="t", hardware=cluster(nodes=2), workload=small_gpt(), run=RunSettings(dtype="bf16"))
    result = search(project, 8, 8, top=2, keep=4)
    head = result.ranked[0]
    head.event.iteration_time_s = 10 * max(r.iteration_time_s for r in result.ranked)  # contention, say
    lines = search_text(result).splitlines()
    columns = next(s for s in lines if s.strip().startswith("#")).split()
    assert columns[-7:] == ["fast", "(s)", "samples/s", "event", "(s)", "mem", "GiB"]
    rows = [s.split() for s in lines if re.match(r"^\s+\d+\s", s)]
    assert len(rows) == len(result.ranked)
    for cells, r in zip(rows, result.ranked, strict=True):
        fast, rate = float(cells[-4]), float(cells[-3].replace(",", ""))
        assert fast == pytest.approx(r.iteration_time_s, abs=5e-4)
        assert rate == pytest.approx(result.global_batch / r.iteration_time_s, rel=5e-4)
    rates = [float(c[-3].replace(",", "")) for c in rows]
    assert rates[1:] == sorted(rates[1:], reverse=True)  # the rows after the re-simulated ones, fastest first
    assert any("event: #1–#2 re-simulated" in s for s in lines)
