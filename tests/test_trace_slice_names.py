"""What the exported timeline calls its slices, as ``tilewright run --trace/--csv`` writes them.

- A segment with no collective between its layers (an inference pass on one chip: all of it) was named after
  its first layer, so a whole 105 ms prefill showed in Perfetto as "embedding prefill". It is named by its
  layer range, as training's whole-pass slices are.
- The host's slices (the framework's synchronisations, the serving runtime's step and sampling) were filed
  under "compute"; they are the breakdown's ``host_wait``, and on a one-stage run their slices add up to it.
"""

from __future__ import annotations

import csv
import json

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import load_project_preset
from tilewright.engine.workloads import build_workload

INFERENCE = "wormhole-n150-llama2-7b-inference"  # one chip, one stage, no tensor parallelism: one segment a pass


def _layer_names(preset: str) -> tuple[str, str]:
    """The model's first and last layer names, from its graph (the names a range is made of)."""
    ops = build_workload(load_project_preset(preset).workload).ops()
    return ops[0].name.split(".")[0], ops[-1].name.split(".")[0]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("n150")
    assert main(["run", INFERENCE, "--trace", str(out / "t.json"), "--csv", str(out / "csv"), "--json",
                 "--quiet"]) == 0
    trace = json.loads((out / "t.json").read_text(encoding="utf-8"))
    with open(out / "csv" / "timeline.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    return trace, rows


def test_a_pass_over_every_layer_is_named_by_its_range(exported):
    trace, _rows = exported
    first, last = _layer_names(INFERENCE)
    assert first != last
    compute = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "compute"]
    prefill = [e["name"] for e in compute if e["name"].endswith(" prefill")]
    decode = [e["name"] for e in compute if " decode token " in e["name"]]
    assert prefill and decode
    assert set(prefill) == {f"{first}…{last} prefill"}, set(prefill)
    assert all(name.startswith(f"{first}…{last} decode token ") for name in decode), decode[:3]
    assert not any(e["name"].startswith(f"{first} ") for e in compute)  # no slice named after one layer


def test_host_slices_are_host_wait_and_add_up_to_the_breakdown(exported, capsys):
    trace, rows = exported
    assert main(["run", INFERENCE, "--json", "--quiet"]) == 0
    breakdown = json.loads(capsys.readouterr().out)["time_breakdown_s"]
    assert breakdown["host_wait"] > 0
    host = [r for r in rows if r["category"] == "host_wait"]
    labels = {r["label"].rsplit(" prefill", 1)[0].split(" decode token ")[0] for r in host}
    assert labels == {"runtime step (host)", "logits read and host sampling"}, labels
    assert sum(float(r["duration_s"]) for r in host) == pytest.approx(breakdown["host_wait"], rel=1e-6)
    assert not any(r["category"] == "compute" and "host" in r["label"] for r in rows)
    # the Chrome trace files them alike
    cats = {e["cat"] for e in trace["traceEvents"] if e["ph"] == "X" and e["name"].startswith("runtime step")}
    assert cats == {"host_wait"}


def test_training_host_synchronisations_are_host_wait_too(tmp_path):
    """A Megatron run's drains (``plan.train_step``) and an MoE dispatcher's synchronisations: on the event
    engine's per-segment slices, under host wait."""
    assert main(["run", "mixtral-8x7b-dgx-h100", "--csv", str(tmp_path / "csv"), "--quiet"]) == 0
    with open(tmp_path / "csv" / "timeline.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    sync = [r for r in rows if "host synchronisation" in r["label"]]
    assert sync and all(r["category"] == "host_wait" for r in sync)
