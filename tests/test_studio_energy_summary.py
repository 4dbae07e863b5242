"""The studio's summary and compare view show the energy of a run, every figure with its unit."""

from __future__ import annotations

from tilewright.engine.simulate import simulate
from tilewright.studio.ui.results.compare import compare_rows
from tilewright.studio.ui.results.summary import format_metric, result_tables

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


def test_inference_energy_is_per_batch_and_per_request_and_compares():
    """The batch's requests run at once, so the run's energy is the batch's: the table says so and gives
    one request's share beside it."""
    a, b = simulate(energetic(llama_inference())), simulate(energetic(llama_inference(), dram=40.0))
    batch = llama_inference().run.inference.batch
    assert batch > 1
    tables = dict(result_tables(a))
    energy = dict(tables[f"Energy per batch of {batch} requests"])
    total = sum(v for k, v in a.energy.by_part.items() if v is not None and k != "host")  # hosts: an upper bound
    assert energy["per request"] == format_metric("x_j", total / batch)
    assert dict(tables["Run"])[f"energy (batch of {batch} requests)"] == format_metric("x_j", total)
    rows = {r.label: r for r in compare_rows(a.metrics_json(), b.metrics_json())}
    assert rows["energy"].better is False and rows["energy"].delta.startswith("+")


def test_power_of_partly_priced_hardware_says_what_it_counts():
    """Without a compute or idle-power figure the average power sums DRAM and links only: the row says so
    rather than showing a number that reads as a device's power."""
    result = simulate(energetic(dgx()))
    result.energy.by_part["compute"] = None
    result.energy.by_part["static"] = None
    run = dict(dict(result_tables(result))["Run"])
    for key in ("average power", "average power per device (hosts excluded)"):
        assert run[key].endswith(")") and "only" in run[key], run[key]
        assert "compute" not in run[key].split("(")[1].split("only")[0]  # compute is not among those counted
