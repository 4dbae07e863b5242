"""Link lanes say what moved their bytes: a link's slices take the category that carried most of them
(expert all-to-all, data-parallel reduction, pipeline sends, DRAM streams), not one generic colour."""

from __future__ import annotations

from collections import Counter

from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.results.timeline import CATEGORIES
from tilewright.engine.simulate import simulate

from tests.engine_cases import small_wafer

MOE = GPTSpec(name="moe", layers=2, hidden=1024, heads=16, seq_len=1024, vocab=32000,
              moe={"experts": 16, "top_k": 2, "expert_ffn": 2048})
DENSE = GPTSpec(name="dense", layers=2, hidden=1024, heads=16, seq_len=1024, vocab=32000)


def _link_categories(project: Project) -> Counter:
    """Slices per category on the link and memory-port lanes of an event run."""
    tl = simulate(project).timeline
    links = {i for i, lane in enumerate(tl.lanes) if lane.group in ("links", "memory")}
    a = tl.arrays()
    return Counter(CATEGORIES[c] for lane, c in zip(a["lane"], a["category"], strict=True) if lane in links)


def _gpus(spec: GPTSpec, **mapping) -> Project:
    return Project(name="cat", hardware=load_system("dgx-h100"), workload=spec, mapping=Mapping(**mapping),
                   run=RunSettings(dtype="bf16", engine="event"))


def test_expert_all_to_all_over_two_nodes_colours_the_links_it_crosses():
    seen = _link_categories(_gpus(MOE, tp=1, pp=1, dp=16, ep=16, micro_batch=1, global_batch=16))
    assert seen and seen.most_common(1)[0][0] == "ep_comm"
    assert "network" not in seen


def test_a_dense_data_parallel_run_shows_its_reduction():
    seen = _link_categories(_gpus(DENSE, tp=1, pp=1, dp=16, micro_batch=1, global_batch=16))
    assert set(seen) == {"dp_comm"}


def test_pipeline_sends_and_dram_streams_on_a_wafer():
    seen = _link_categories(small_wafer())
    assert "memory" in seen  # its SRAM-only tiles stream DRAM over the NoC
    assert "network" not in seen
    lanes = simulate(small_wafer()).timeline.lanes
    assert any("mostly" in lane.detail for lane in lanes if lane.group in ("links", "memory"))
