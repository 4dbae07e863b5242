"""Expert and context parallelism in the studio: ep, cp, the ZeRO stage and FSDP in the workload panel (one
undo step through Auto-map, refused with the engine's own message), on the canvas legend, and the expert
all-to-all in the results (Gantt slices in their colour, legends and the Summary in plain words)."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from tilewright.engine.io import load_project  # noqa: E402
from tilewright.engine.io.presets import load_system  # noqa: E402
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings  # noqa: E402
from tilewright.engine.ir.mapping import Schedule  # noqa: E402
from tilewright.engine.results import CATEGORIES  # noqa: E402
from tilewright.studio.mapping import stage_layout, stage_split  # noqa: E402
from tilewright.studio.mapping_edit import checked_auto_mapping  # noqa: E402
from tilewright.studio.model.palette import CATEGORY_COLOURS, category_label  # noqa: E402
from tilewright.studio.tree_edit import EditRefused  # noqa: E402
from tilewright.studio.ui.canvas.legend import Size, stage_legend  # noqa: E402
from tilewright.studio.ui.results.breakdown_bar import segment_text  # noqa: E402
from tilewright.studio.ui.results.plot_style import legend_html  # noqa: E402

MIXTRAL = "presets/projects/mixtral-8x7b-dgx-h100.json"


def interleaved_mixtral() -> Project:
    """The Mixtral preset with two model chunks per stage: Megatron-Core overlaps the expert all-to-all under a
    pipeline only when it interleaves (``plan.checks``)."""
    project = load_project(MIXTRAL)
    mapping = project.mapping.model_copy(update={"interleave": 2, "schedule": Schedule.interleaved})
    return project.model_copy(update={"mapping": mapping})


def small_moe(ep: int = 4) -> Project:
    """Two GPT layers with 8 experts (top-2) on one DGX-A100, dp 8: a run takes well under a second."""
    spec = GPTSpec(name="moe", layers=2, hidden=1024, heads=16, seq_len=1024, vocab=32000,
                   moe={"experts": 8, "top_k": 2, "expert_ffn": 2048})
    return Project(name="moe", hardware=load_system("dgx-a100"), workload=spec,
                   mapping=Mapping(tp=1, dp=8, ep=ep, micro_batch=2, global_batch=16),
                   run=RunSettings(dtype="bf16", engine="event", contention=False))


# -- without a window ---------------------------------------------------------------------------------
def test_labels_say_what_the_collectives_are():
    assert category_label("ep_comm") == "expert all-to-all"
    assert category_label("cp_comm") == "context ring"
    assert category_label("dp_comm") == "dp comm" and category_label("stage 3") == "stage 3"
    assert "expert all-to-all" in legend_html([("ep_comm", "#eeca3b")])
    assert segment_text("cp_comm", 0.5, 2.0).startswith("context ring 500 ms")


def test_stage_split_names_ep_and_cp_only_when_they_split():
    assert stage_split(Mapping(tp=2, dp=4, global_batch=4)) == (8, "tp 2 × dp 4")
    assert stage_split(Mapping(tp=1, dp=16, ep=8, global_batch=16)) == (16, "tp 1 × dp 16 · ep 8")
    assert stage_split(Mapping(tp=2, dp=2, cp=4, global_batch=2)) == (16, "tp 2 × cp 4 × dp 2")
    # whole experts per rank without expert parallelism (ep 1, expert tp below tp) still say so
    assert stage_split(Mapping(tp=4, dp=2, expert_tp=1, sequence_parallel=True, global_batch=2)) == (
        8, "tp 4 × dp 2 · etp 1")


def test_auto_map_refuses_ep_and_cp_with_the_engines_message():
    project = small_moe(ep=1)
    assert checked_auto_mapping(project, ep=4).ep == 4
    with pytest.raises(EditRefused, match=r"mapping\.ep: 3 does not divide dp \(8\)"):
        checked_auto_mapping(project, ep=3)
    with pytest.raises(EditRefused, match=r"mapping\.cp: 3: .* 2 × cp = 6 chunks .* does not divide seq_len \(1024\)"):
        checked_auto_mapping(project, cp=3, dp=2, global_batch=4)
    assert checked_auto_mapping(project, fsdp=True).zero == 3  # FSDP is ZeRO stage 3


def test_context_ranks_belong_to_their_stage_on_the_canvas():
    """The engine places a stage on tp × cp × dp devices (``plan.context``); the canvas colours all of them."""
    project = small_moe(ep=1)
    project = project.model_copy(update={"mapping": Mapping(tp=1, pp=2, dp=2, cp=2, micro_batch=1, global_batch=4),
                                         "run": project.run.model_copy(update={"engine": "analytic"})})
    layout = stage_layout(project)
    assert not layout.problem and [len(d) for d in layout.stage_devices] == [4, 4]
    assert len(layout.device_stage) == 8


# -- in the window ------------------------------------------------------------------------------------
def test_editing_ep_is_one_undo_step(make_window):
    w = make_window(load_project(MIXTRAL))
    panel, doc = w.workload, w.doc
    assert panel.editors["ep"].value == 8 and panel.zero.value.startswith("1")
    panel.editors["ep"].type_and_commit("3")  # refused as the engine refuses it, nothing staged
    assert "does not divide dp (16)" in panel.editors["ep"].error and "ep" not in panel.pending
    panel.editors["ep"].type_and_commit("4")
    assert doc.undo_stack.count() == 0 and doc.project.mapping.ep == 8  # staged until Auto-map
    panel.auto_map.click()
    assert doc.project.mapping.ep == 4 and doc.undo_stack.count() == 1
    assert "ep 4" in doc.undo_stack.undoText()
    doc.undo_stack.undo()
    assert doc.project.mapping.ep == 8 and panel.editors["ep"].value == 8
    panel.editors["dp"].type_and_commit("4")  # ep 8 no longer divides dp: Auto-map says so, changes nothing
    assert not panel.apply_auto_map()
    assert "mapping.ep: 8 does not divide dp (4)" in panel.error_label.text() and doc.undo_stack.count() == 1


def test_fsdp_stages_zero_three(make_window):
    w = make_window(small_moe())
    panel, doc = w.workload, w.doc
    panel.fsdp.box.click()
    assert panel.pending["zero"] == 3 and not panel.zero.isEnabled()
    assert panel.apply_auto_map()
    assert doc.project.mapping.fsdp and doc.project.mapping.zero == 3
    doc.undo_stack.undo()
    assert not doc.project.mapping.fsdp and panel.zero.isEnabled()


def test_the_stage_legend_names_expert_parallelism(make_window):
    w = make_window(load_project(MIXTRAL), size=(1600, 1000))
    text = stage_legend(w.canvas.overlay, Size.full)
    assert "tp 1 × dp 16 · ep 8" in text
    assert "ep 8" in stage_legend(w.canvas.overlay, Size.compact)
    assert "ep 8" in w.canvas.legend.text()


def test_a_moe_run_draws_the_all_to_all(make_window, qtbot):
    w = make_window(small_moe(), size=(1400, 900))
    with qtbot.waitSignal(w.runner.done, timeout=60_000):
        w.run_simulation()
    gantt = w.results.gantt
    ep = CATEGORIES.index("ep_comm")
    qtbot.waitUntil(lambda: ep in gantt.items and len(gantt.items[ep].opts["x0"]) > 0, timeout=10_000)
    assert gantt.items[ep].opts["brush"] == CATEGORY_COLOURS["ep_comm"]
    # the key fills in the event-loop turn after the bars (ResultsPanel.show_record)
    qtbot.waitUntil(lambda: "expert all-to-all" in [label.text for _sample, label in gantt.legend.items],
                    timeout=10_000)
    assert "expert all-to-all" in w.results.breakdown.toolTip()
    summary = " ".join(label.text() for label in w.results.labels)
    assert "expert all-to-all" in summary and "ep comm" not in summary


def test_overlapping_the_all_to_all_is_one_undo_step_and_saved(make_window, tmp_path):
    """The check box sets mapping.overlap_ep_comm at once (not staged for Auto-map), the panel follows undo
    and redo, a degree typed but not applied stays staged, and the saved file carries the option."""
    w = make_window(interleaved_mixtral())
    panel, doc = w.workload, w.doc
    box = panel.overlap_ep
    assert doc.project.mapping.ep == 8 and not doc.project.mapping.overlap_ep_comm
    assert box.isEnabled() and not box.box.isChecked() and "all-to-all" in box.toolTip()
    panel.editors["dp"].type_and_commit("8")  # staged, not applied
    box.box.click()
    assert doc.project.mapping.overlap_ep_comm and doc.undo_stack.count() == 1
    assert doc.undo_stack.undoText() == "Overlap expert all-to-all"
    assert doc.project.mapping.dp == 16 and panel.pending == {"dp": 8} and panel.editors["dp"].value == 8
    before = interleaved_mixtral().mapping
    assert doc.project.mapping == before.model_copy(update={"overlap_ep_comm": True})  # nothing else changed
    doc.undo_stack.undo()
    assert not doc.project.mapping.overlap_ep_comm and not box.box.isChecked()
    doc.undo_stack.redo()
    assert box.box.isChecked()
    saved = doc.save(tmp_path / "mixtral-overlap.json")
    assert '"overlap_ep_comm": true' in saved.read_text()
    assert load_project(saved).mapping.overlap_ep_comm


def test_overlapping_the_all_to_all_needs_expert_parallelism(make_window):
    """Without ep > 1 there is no all-to-all: the box is disabled and its tooltip says why, until an
    Auto-map applies an ep."""
    w = make_window(small_moe(ep=1))
    panel, doc = w.workload, w.doc
    box = panel.overlap_ep
    assert not box.isEnabled() and "ep > 1" in box.toolTip()
    panel.editors["ep"].type_and_commit("4")
    assert not box.isEnabled()  # a typed ep is not the mapping's yet
    assert panel.apply_auto_map()
    assert box.isEnabled() and "ep > 1" not in box.toolTip()
    box.box.click()
    assert doc.project.mapping.overlap_ep_comm and doc.project.mapping.ep == 4
    doc.undo_stack.undo()
    doc.undo_stack.undo()
    assert doc.project.mapping.ep == 1 and not box.isEnabled()


def test_delaying_weight_gradients_follows_the_overlap(make_window):
    """The delayed weight gradients hide the overlapped all-to-all: the box is disabled until the overlap is
    on, ticking it is one undo step that changes only that option, and turning the overlap off turns it off
    in the same step (the mapping would otherwise be refused)."""
    w = make_window(interleaved_mixtral())
    panel, doc = w.workload, w.doc
    delay = panel.options.delay_wgrad
    assert not delay.isEnabled() and "overlapped" in delay.toolTip()
    panel.overlap_ep.box.click()
    assert delay.isEnabled() and "--delay-wgrad-compute" in delay.toolTip()
    before = doc.project.mapping
    delay.box.click()
    assert doc.project.mapping == before.model_copy(update={"delay_wgrad_compute": True})
    assert doc.undo_stack.undoText() == "Delay weight gradients" and doc.undo_stack.count() == 2
    panel.overlap_ep.box.click()
    m = doc.project.mapping
    assert not m.overlap_ep_comm and not m.delay_wgrad_compute and doc.undo_stack.count() == 3
    assert not delay.isEnabled() and not delay.box.isChecked()
    doc.undo_stack.undo()
    assert doc.project.mapping.delay_wgrad_compute and delay.box.isChecked()



def test_overlapping_the_all_to_all_of_a_plain_pipeline_is_refused(make_window):
    """Mixtral's preset pipelines over pp 4 without interleaving, where Megatron-Core asserts against the
    overlapped all-to-all (``plan.checks``): ticking it snaps back, nothing is pushed, and the box says why in
    the engine's words (the field, Megatron-Core's assert, the remedy)."""
    w = make_window(load_project(MIXTRAL))
    panel, doc = w.workload, w.doc
    box = panel.overlap_ep
    assert doc.project.mapping.pp == 4 and doc.project.mapping.interleave == 1
    box.box.click()
    assert not doc.project.mapping.overlap_ep_comm and doc.undo_stack.count() == 0 and not box.box.isChecked()
    assert "virtual_pipeline_model_parallel_size" in box.error and "interleave" in box.error
