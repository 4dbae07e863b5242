"""Two training options of issue 12 in the workload dock: the expert load imbalance (``mapping.expert_imbalance``)
and offloading state to the node's host memory (``mapping.memory_levels``) — each labelled with its unit, one
undo step that changes only its own field, refused in the model's words, disabled (and saying why) where it
cannot matter, and taken by the engine as the studio set it."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from tilewright.engine.io import load_project  # noqa: E402
from tilewright.engine.io.presets import load_system  # noqa: E402
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings  # noqa: E402
from tilewright.engine.simulate import simulate  # noqa: E402
from tilewright.studio.ui.expert_options import (  # noqa: E402
    IMBALANCE_DEFAULT,
    IMBALANCE_INFER_TIP,
    IMBALANCE_OFF_TIP,
    IMBALANCE_TEXT,
)
from tilewright.studio.ui.memory_options import OFFLOAD_OFF_TIP  # noqa: E402
from tilewright.studio.ui.offload_editor import host_memory, with_offload  # noqa: E402

MIXTRAL = "presets/projects/mixtral-8x7b-dgx-h100.json"


def small(moe: bool = True, system: str = "dgx-a100") -> Project:
    spec = GPTSpec(name="small", layers=2, hidden=1024, heads=16, seq_len=1024, vocab=32000,
                   moe={"experts": 8, "top_k": 2, "expert_ffn": 2048} if moe else None)
    return Project(name="small", hardware=load_system(system), workload=spec,
                   mapping=Mapping(tp=1, dp=8, ep=4 if moe else 1, micro_batch=2, global_batch=16, zero=1),
                   run=RunSettings(dtype="bf16", engine="analytic"))


# -- without a window ---------------------------------------------------------------------------------
def test_the_host_memory_is_the_one_with_a_host_link():
    node = next(c for _p, c in load_system("dgx-h100").walk() if c.kind.value == "node")
    host = next(m for m in node.memories if m.host_link_bandwidth_bytes_per_s)
    assert host_memory(load_system("dgx-h100")) == (host.name, host.host_link_bandwidth_bytes_per_s)
    assert host_memory(load_system("wafer-64x64")) is None  # an SRAM wafer has no host to offload to


def test_offloading_moves_only_the_hosts_entries():
    levels = {"kv_cache": "sram", "weights": "auto"}
    assert with_offload(levels, "host", "optimizer", True) == {"kv_cache": "sram", "weights": "auto",
                                                               "optimizer": "host"}
    assert with_offload({"optimizer": "host"}, "host", "optimizer", False) == {}
    assert with_offload(levels, "host", "weights", False) == levels  # 'auto' was not the host's to clear


# -- in the window ------------------------------------------------------------------------------------
def test_expert_imbalance_is_one_undo_step(make_window):
    w = make_window(load_project(MIXTRAL))
    options, doc = w.workload.options, w.doc
    editor = options.imbalance
    assert options.labels["expert_imbalance"].text() == IMBALANCE_TEXT and "×" in IMBALANCE_TEXT
    assert editor.isEnabled() and "busiest" in editor.toolTip()
    before = doc.project.mapping
    editor.type_and_commit("1.25")
    assert doc.project.mapping == before.model_copy(update={"expert_imbalance": 1.25})
    assert doc.undo_stack.count() == 1 and doc.undo_stack.undoText() == "Expert load 1.25× the mean"
    editor.type_and_commit("0.8")  # below a balanced router: refused in the model's words, nothing pushed
    assert editor.error == "expert_imbalance: must be ≥ 1" and doc.undo_stack.count() == 1
    assert doc.project.mapping.expert_imbalance == 1.25
    editor.type_and_commit("lots")  # the example is a factor above 1, as the field wants
    assert editor.error == "not a number (e.g. 1.2)" and doc.undo_stack.count() == 1
    doc.undo_stack.undo()  # back to unset: dropless routing's floor, the placeholder saying so
    assert doc.project.mapping.expert_imbalance is None and editor.line_edit.text() == ""
    assert editor.line_edit.placeholderText() == IMBALANCE_DEFAULT
    editor.type_and_commit("1")  # a balanced router asked for explicitly is a value of its own
    assert doc.project.mapping.expert_imbalance == 1.0 and doc.undo_stack.undoText() == "Expert load 1× the mean"


def test_expert_imbalance_past_the_run_s_reach_is_refused(make_window):
    """8 experts, top-2, ep 4: a rank's 2 experts take at most both slots of a token against a mean of 2/4, so
    at most 4 × the mean; 4.5 snaps back with the engine's words, 4 applies."""
    w = make_window(small())
    editor, doc = w.workload.options.imbalance, w.doc
    editor.type_and_commit("4.5")
    assert "give at most 4," in editor.error and doc.undo_stack.count() == 0
    assert doc.project.mapping.expert_imbalance is None
    editor.type_and_commit("4")
    assert doc.project.mapping.expert_imbalance == 4.0 and doc.undo_stack.count() == 1


def test_expert_imbalance_needs_experts(make_window):
    w = make_window(small(moe=False))
    editor = w.workload.options.imbalance
    assert not editor.isEnabled() and editor.toolTip() == IMBALANCE_OFF_TIP


def test_expert_imbalance_is_off_in_inference_where_the_engine_ignores_it(make_window):
    """An inference run holds every routed expert on each device (the plan runs it at ep 1): the busiest rank's
    load changes nothing there — the same times at 1 and 1.5 — so the control is off and says why."""
    train = small()
    infer = Project.model_validate({**train.model_dump(), "run": {**train.run.model_dump(), "mode": "infer"}})
    skewed = Project.model_validate({**infer.model_dump(),
                                     "mapping": {**infer.mapping.model_dump(), "expert_imbalance": 1.5}})
    runs = [simulate(p) for p in (infer, skewed)]
    assert [r.mode for r in runs] == ["infer", "infer"]
    assert runs[0].iteration_time_s == runs[1].iteration_time_s > 0
    w = make_window(infer)
    editor = w.workload.options.imbalance
    assert not editor.isEnabled() and editor.toolTip() == IMBALANCE_INFER_TIP
    w2 = make_window(train)
    assert w2.workload.options.imbalance.isEnabled()


def test_offloading_the_optimizer_is_one_undo_step_and_saved(make_window, tmp_path):
    w = make_window(load_project(MIXTRAL))
    options, doc = w.workload.options, w.doc
    offload = options.offload
    assert options.labels["memory_levels"].text() == "offload to host (50 GB/s link)"  # dgx-h100's PCIe figure
    assert offload.isEnabled() and offload.offloaded() == []
    before = doc.project.mapping
    offload.set_offload("optimizer", True)
    assert doc.project.mapping == before.model_copy(update={"memory_levels": {"optimizer": "host"}})
    assert doc.undo_stack.undoText() == "Offload optimizer to host"
    offload.set_offload("weights", True)
    assert doc.project.mapping.memory_levels == {"optimizer": "host", "weights": "host"}
    assert doc.undo_stack.count() == 2 and doc.undo_stack.undoText() == "Offload weights, optimizer to host"
    doc.undo_stack.undo()
    assert doc.project.mapping.memory_levels == {"optimizer": "host"} and offload.offloaded() == ["optimizer"]
    doc.undo_stack.redo()
    assert offload.offloaded() == ["weights", "optimizer"]
    saved = load_project(doc.save(tmp_path / "offload.json"))
    assert saved.mapping.memory_levels == {"optimizer": "host", "weights": "host"}


def test_offload_needs_a_host_memory(make_window):
    w = make_window(small(system="wafer-64x64"))
    offload = w.workload.options.offload
    assert not offload.isEnabled() and offload.toolTip() == OFFLOAD_OFF_TIP


def test_the_engine_runs_what_the_boxes_set(make_window):
    """The optimizer state ticked off the device leaves the device's memory (the engine's residency)."""
    project = small()
    w = make_window(project)
    w.workload.options.offload.set_offload("optimizer", True)
    offloaded = w.doc.project
    assert offloaded.mapping.memory_levels == {"optimizer": "host"}
    on_device, on_host = simulate(project), simulate(offloaded)
    assert on_device.memory_breakdown_bytes["optimizer"] > 0
    assert on_host.peak_memory_bytes < on_device.peak_memory_bytes
