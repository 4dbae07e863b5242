"""Serving on a grid of cores prices attention as ``tilewright run`` does: split by its head structure
(``perf.spatial_attention``), not as the merged op a GPU's varlen kernel is."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_project_preset
from tilewright.engine.ir import Project
from tilewright.engine.serving import ServingConfig, build_instances, simulate_serving
from tilewright.engine.serving.cost_model import Work, decode
from tilewright.engine.simulate import simulate

PROMPT, OUTPUT = 256, 16


def _project(name: str) -> Project:
    data = load_project_preset(name).model_dump(mode="json")
    data["run"] |= {"engine": "analytic", "contention": False}
    data["run"]["inference"] |= {"batch": 1, "prompt_tokens": PROMPT, "output_tokens": OUTPUT}
    return Project.model_validate(data)


@pytest.mark.parametrize("name", ["wormhole-n150-llama2-7b-inference", "blackhole-p150-llama3.1-8b-inference"])
def test_at_a_trickle_a_grid_chip_serves_each_request_as_run_times_it(name):
    project = _project(name)
    single = simulate(project).metrics_json()
    result = simulate_serving(project, ServingConfig(rate=1e-3, count=2, chunk=PROMPT))
    for r in result.records:
        assert r.ttft_s == pytest.approx(single["ttft_s"], rel=1e-9)
        assert r.tpot_s == pytest.approx(single["tpot_s"], rel=1e-6)


def test_a_decode_batch_reads_the_cache_of_every_sequence():
    """Decode attention's time grows in proportion to the batch's summed context (each sequence's keys and
    values streamed once from DRAM), and a batch of mixed contexts costs what its mean context costs."""
    model = build_instances(_project("wormhole-n150-llama2-7b-inference"), 2048, None)[0].cost
    grid = next(iter(model._grid_attn.values()))

    def seconds(contexts: list[int]) -> float:
        return grid.parts([decode(c) for c in contexts])[0]

    short, mid, long = seconds([1024] * 4), seconds([4096] * 4), seconds([16384] * 4)
    assert short < mid < long
    assert (long - short) / (mid - short) == pytest.approx((16384 - 1024) / (4096 - 1024), rel=0.1)
    mixed = seconds([1024, 2048, 8192, 16384])  # mean 6912
    assert mid < mixed < long
    assert mixed == pytest.approx(seconds([6912] * 4), rel=1e-12)
    assert grid.parts([Work(PROMPT, PROMPT, 1)])[0] > grid.parts([decode(PROMPT)])[0]  # a prefill chunk
