"""The studio's summary and compare view show the energy of a run, every figure with its unit."""

from __future__ import annotations

from tilewright.engine.simulate import simulate
from tilewright.studio.ui.results.compare import compare_rows
from tilewright.studio.ui.results.summary import result_tables

from tests.engine_cases import dgx, llama_inference
from tests.test_energy import energetic


def test_summary_has_an_energy_table_with_units():
    result = simulate(energetic(dgx()))
    tables = dict(result_tables(result))
    energy = dict(tables["Energy per iteration"])
    assert set(energy) == {"compute", "SRAM", "DRAM", "NoC", "links", "static (idle devices)",
                           "host (node, rated max)", "total"}
    assert all(v.endswith("J") for v in energy.values())  # every part priced, each with its unit
    run = dict(tables["Run"])
    assert run["energy"].endswith("J") and run["average power"].endswith("W")
    assert run["energy per token"].endswith("J/token")
    assert "energy_sources" not in str(tables)


def test_inference_energy_is_per_request_and_compares():
    a, b = simulate(energetic(llama_inference())), simulate(energetic(llama_inference(), dram=40.0))
    assert "Energy per request" in dict(result_tables(a))
    rows = {r.label: r for r in compare_rows(a.metrics_json(), b.metrics_json())}
    assert rows["energy"].better is False and rows["energy"].delta.startswith("+")
