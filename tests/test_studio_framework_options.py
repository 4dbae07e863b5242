"""The training options whose default is a framework era's, in the workload dock: the layers per chunk of an
activation offload (``mapping.offload_layers``), the input-gradient all-reduce's overlap
(``mapping.overlap_dgrad_comm``), the pipeline sends (``mapping.pipeline_p2p``) and Megatron's logging and checks.
Each control is one undo step that changes only its field (undo brings the old value back and the control
follows), is off where its option cannot matter and says why, names what an unset option resolves to — checked
against what the engine itself says it assumed (the result's notes) — and the results dock shows those notes."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from tilewright.engine.io import load_project  # noqa: E402
from tilewright.engine.io.presets import load_system  # noqa: E402
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings  # noqa: E402
from tilewright.engine.simulate import simulate  # noqa: E402
from tilewright.studio.ui.framework_options import (  # noqa: E402
    DGRAD_2D_TIP,
    DGRAD_LABELS,
    DGRAD_TP_TIP,
    DGRAD_UB_TIP,
    GROUP_TITLE,
    HOST_FRAMEWORK_LABELS,
    HOST_FRAMEWORK_OFF_TIP,
    HOST_LOOP_TIP,
    OFFLOAD_LAYERS_OFF_TIP,
    P2P_LABELS,
    P2P_OFF_TIP,
    TRAINING_ONLY,
)
from tilewright.studio.ui.results.summary import NOTES_TITLE  # noqa: E402
from tilewright.studio.ui.results_panel import ResultsPanel  # noqa: E402

FIELDS = ("offload_layers", "overlap_dgrad_comm", "pipeline_p2p", "host_framework", "log_params_norm",
          "log_num_zeros_in_grad", "timing_log_level", "check_for_nan_in_loss_and_grad")
LAYERS = 4


def small(system: str = "dgx-a100", mode: str = "train", **mapping) -> Project:
    """Four GPT layers on one node: built and simulated in well under a second."""
    spec = GPTSpec(name="small", layers=LAYERS, hidden=1024, heads=16, seq_len=1024, vocab=32000)
    fields = {"tp": 2, "pp": 2, "dp": 2, "micro_batch": 1, "global_batch": 8} | mapping
    return Project(name="small", hardware=load_system(system), workload=spec, mapping=Mapping(**fields),
                   run=RunSettings(dtype="bf16", engine="analytic", mode=mode))


def choose(editor, value) -> None:
    """What a user does with a combo: pick the item of ``value`` (``activated`` fires only for a user's choice)."""
    if hasattr(editor, "choose"):
        editor.choose(value)
        return
    editor.combo.setCurrentText(value)
    editor.combo.activated.emit(editor.combo.currentIndex())


def _resolved(editor) -> str:
    """What the unset item says the default resolves to ("default (era): blocking" → "blocking")."""
    text = editor.combo.itemText(0)
    assert text.startswith("default (era): ")
    return text.removeprefix("default (era): ")


# -- the era's default, as the engine reads it -----------------------------------------------------------------
def test_an_unset_option_names_what_the_engine_assumed(make_window):
    """Full recompute on GPUs reads as Megatron-LM v2.x: the engine's notes say the sends block and the input-
    gradient all-reduces block their GEMM; the combos say the same before any run. Selective recompute reads
    as Megatron-Core: no such note, and the combos say the sends overlap and the all-reduce hides."""
    old, new = small(recompute="full"), small(recompute="selective")
    old_notes, new_notes = " ".join(simulate(old).notes), " ".join(simulate(new).notes)
    assert "pipeline sends block their stage" in old_notes and "input-gradient all-reduces block" in old_notes
    assert "block" not in new_notes
    w = make_window(old)
    options = w.workload.options
    assert _resolved(options.p2p) == P2P_LABELS["megatron-lm"] and _resolved(options.dgrad) == DGRAD_LABELS[False]
    assert options.p2p.combo.currentIndex() == 0 and options.dgrad.combo.currentIndex() == 0  # unset
    choose(options.recompute, "selective")  # the era follows the model: the same combos, renamed
    assert _resolved(options.p2p) == P2P_LABELS["overlap"] and _resolved(options.dgrad) == DGRAD_LABELS[True]
    assert options.p2p.combo.currentIndex() == 0


def test_the_offload_default_is_the_layers_the_engine_offloads(make_window):
    project = small(pp=1, dp=4, memory_levels={"activations": "host"})
    note = next(n for n in simulate(project).notes if n.startswith("activation offload"))
    k = LAYERS - 1  # the frameworks' maximum: all but the last (Transformer Engine never offloads the last)
    assert f"the stored activations of {k} of {LAYERS} transformer layers" in note
    w = make_window(project)
    editor = w.workload.options.offload_layers
    assert editor.isEnabled() and editor.line_edit.text() == ""
    assert editor.line_edit.placeholderText() == f"default: {k} of {LAYERS} layers (all but the last)"
    assert w.workload.options.labels["offload_layers"].text().startswith("layers")  # the count's unit


# -- one undo step each --------------------------------------------------------------------------------------
def test_each_era_choice_is_one_undo_step(make_window):
    w = make_window(small(recompute="full"))
    options, doc = w.workload.options, w.doc
    before = doc.project.mapping
    choose(options.p2p, "blocking")
    assert doc.project.mapping == before.model_copy(update={"pipeline_p2p": "blocking"})
    assert doc.undo_stack.count() == 1 and doc.undo_stack.undoText() == "Pipeline sends blocking"
    choose(options.dgrad, True)
    assert doc.project.mapping.overlap_dgrad_comm is True and doc.undo_stack.count() == 2
    choose(options.timing, 1)
    assert doc.project.mapping.timing_log_level == 1 and doc.undo_stack.undoText() == "Timing log level 1"
    choose(options.timing, 0)  # level 0 is a value, not the unset default
    assert doc.project.mapping.timing_log_level == 0
    choose(options.timing, None)
    assert doc.project.mapping.timing_log_level is None and options.timing.combo.currentIndex() == 0
    for _ in range(3):
        doc.undo_stack.undo()
    assert doc.project.mapping.timing_log_level is None and options.timing.combo.currentIndex() == 0
    doc.undo_stack.undo()
    assert doc.project.mapping.overlap_dgrad_comm is None and options.dgrad.combo.currentIndex() == 0
    doc.undo_stack.undo()
    assert doc.project.mapping == before and options.p2p.combo.currentIndex() == 0
    doc.undo_stack.redo()
    assert options.p2p.combo.currentText() == P2P_LABELS["blocking"]


def test_the_logging_flags_are_undo_steps_and_reach_the_engine(make_window):
    project = small()
    w = make_window(project)
    options, doc = w.workload.options, w.doc
    for editor, field in ((options.params_norm, "log_params_norm"), (options.num_zeros, "log_num_zeros_in_grad"),
                          (options.nan_check, "check_for_nan_in_loss_and_grad")):
        assert editor.isEnabled()
        editor.box.click()
        assert getattr(doc.project.mapping, field) is True
    assert doc.undo_stack.count() == 3
    logged = doc.project
    # each check and norm is host and device work the plain run has not got (plan.train_logging)
    assert simulate(logged).iteration_time_s > simulate(project).iteration_time_s
    for _ in range(3):
        doc.undo_stack.undo()
    assert doc.project.mapping == project.mapping
    assert not any(e.box.isChecked() for e in (options.params_norm, options.num_zeros, options.nan_check))


def test_offload_layers_typed_refused_and_undone(make_window, tmp_path):
    w = make_window(small(pp=1, dp=4, memory_levels={"activations": "host"}))
    editor, doc = w.workload.options.offload_layers, w.doc
    editor.type_and_commit("2")
    assert doc.project.mapping.offload_layers == 2
    assert doc.undo_stack.undoText() == "Offload the activations of 2 layers per chunk"
    editor.type_and_commit(str(LAYERS))  # every layer: the frameworks refuse it, in the engine's words
    assert "offloads at most 3" in editor.error and doc.undo_stack.count() == 1
    assert doc.project.mapping.offload_layers == 2
    editor.type_and_commit("")  # empty: back to the default
    assert doc.project.mapping.offload_layers is None and doc.undo_stack.count() == 2
    doc.undo_stack.undo()
    assert doc.project.mapping.offload_layers == 2 and editor.line_edit.text() == "2"
    saved = load_project(doc.save(tmp_path / "offload.json"))
    assert saved.mapping.offload_layers == 2


def test_setting_and_undoing_saves_the_project_as_it_was(make_window, tmp_path):
    w = make_window(load_project("presets/projects/gpt3-dgx-a100.json"))
    doc, options = w.doc, w.workload.options
    first = doc.save(tmp_path / "a.json").read_text()
    choose(options.p2p, "blocking")
    options.params_norm.box.click()
    doc.undo_stack.undo()
    doc.undo_stack.undo()
    assert doc.save(tmp_path / "b.json").read_text() == first


# -- off where they cannot matter ----------------------------------------------------------------------------
def _off(options, field: str) -> str:
    editor = options.editors[field]
    assert not editor.isEnabled()
    return editor.toolTip()


def test_disabled_where_idle(make_window):
    options = make_window(small(tp=1, pp=1, dp=8)).workload.options
    assert _off(options, "overlap_dgrad_comm") == DGRAD_TP_TIP
    assert _off(options, "pipeline_p2p") == P2P_OFF_TIP
    assert _off(options, "offload_layers") == OFFLOAD_LAYERS_OFF_TIP  # the activations stay on the device
    assert options.params_norm.isEnabled() and options.timing.isEnabled()  # a GPU's training loop
    assert not options.labels["pipeline_p2p"].isEnabled()

    options = make_window(small(sequence_parallel=True, overlap_tp_comm=True)).workload.options
    assert _off(options, "overlap_dgrad_comm") == DGRAD_UB_TIP  # userbuffers hide that reduce-scatter already
    options = make_window(small(tp=4, pp=1, tp_axes=(2, 2))).workload.options
    assert _off(options, "overlap_dgrad_comm") == DGRAD_2D_TIP

    options = make_window(small(mode="infer", global_batch=2, micro_batch=1, dp=1)).workload.options
    for field in FIELDS:
        assert _off(options, field) == TRAINING_ONLY, field


def test_offload_layers_follow_the_activations_box(make_window):
    w = make_window(small(pp=1, dp=4))
    options = w.workload.options
    assert not options.offload_layers.isEnabled()
    options.offload.set_offload("activations", True)
    assert w.doc.project.mapping.memory_levels == {"activations": "host"}
    assert options.offload_layers.isEnabled()
    w.doc.undo_stack.undo()
    assert not options.offload_layers.isEnabled()


def test_offload_layers_off_with_a_pipeline_or_recompute(make_window):
    """Megatron-Core refuses activation offload with pp > 1 or any recomputation: the count is off, saying so."""
    options = make_window(small(pp=2, memory_levels={"activations": "host"})).workload.options
    assert "pp 2" in _off(options, "offload_layers")
    options = make_window(small(pp=1, dp=4, recompute="selective",
                                memory_levels={"activations": "host"})).workload.options
    assert "recompute 'selective'" in _off(options, "offload_layers")


def test_the_logging_options_need_a_framework_driven_device(make_window):
    wafer = small(system="wafer-64x64", tp=1, pp=1, dp=1, global_batch=2)
    options = make_window(wafer).workload.options
    for field in ("log_params_norm", "log_num_zeros_in_grad", "timing_log_level", "check_for_nan_in_loss_and_grad"):
        assert _off(options, field) == HOST_LOOP_TIP, field
    assert _off(options, "host_framework") == HOST_FRAMEWORK_OFF_TIP
    assert not options.labels["host_framework"].isEnabled()


# -- the host framework ----------------------------------------------------------------------------------------
def test_the_host_framework_sits_in_the_framework_group_and_names_its_default(make_window):
    options = make_window(small(recompute="full")).workload.options
    editor = options.host_framework
    assert options.framework.title() == GROUP_TITLE
    assert options.framework.isAncestorOf(editor) and options.framework.isAncestorOf(options.labels["host_framework"])
    assert editor.isEnabled() and editor.combo.currentIndex() == 0
    items = [editor.combo.itemText(i) for i in range(editor.combo.count())]
    assert items == [HOST_FRAMEWORK_LABELS[v] for v in (None, "megatron-lm", "mcore", "mcore-te", "pytorch",
                                                              "pytorch-compile", "megatron-deepspeed")]
    assert items[0] == "default: Megatron-LM v2.x layers"
    choose(options.recompute, "selective")  # a fixed default, not the era's: the recompute does not rename it
    assert editor.combo.itemText(0) == "default: Megatron-LM v2.x layers"


def test_each_host_framework_choice_is_one_undo_step_and_reaches_the_engine(make_window, tmp_path):
    """A small job on GPUs waits for its host: Megatron-Core's local layers make more Python calls per linear
    than v2.x's, Transformer Engine's more still (plan.framework_host), so the iteration grows in that order."""
    project = small(tp=1, pp=1, dp=8)
    w = make_window(project)
    options, doc = w.workload.options, w.doc
    before = doc.project
    times = {None: simulate(before).iteration_time_s}
    for step, framework in enumerate(("megatron-lm", "mcore", "mcore-te"), start=1):
        choose(options.host_framework, framework)
        assert doc.project.mapping == before.mapping.model_copy(update={"host_framework": framework})
        assert doc.undo_stack.count() == step
        assert doc.undo_stack.undoText() == f"Host framework: {HOST_FRAMEWORK_LABELS[framework]}"
        times[framework] = simulate(doc.project).iteration_time_s
    assert times[None] == times["megatron-lm"] < times["mcore"] < times["mcore-te"]
    choose(options.host_framework, None)
    assert doc.project.mapping.host_framework is None and doc.undo_stack.count() == 4
    doc.undo_stack.undo()
    assert doc.project.mapping.host_framework == "mcore-te"
    assert options.host_framework.combo.currentText() == HOST_FRAMEWORK_LABELS["mcore-te"]
    saved = load_project(doc.save(tmp_path / "te.json"))
    assert saved.mapping.host_framework == "mcore-te"
    for _ in range(3):
        doc.undo_stack.undo()
    assert doc.project.mapping == before.mapping and options.host_framework.combo.currentIndex() == 0


# -- the result's notes --------------------------------------------------------------------------------------
def test_the_results_dock_shows_the_engines_notes(qtbot):
    panel = ResultsPanel()
    qtbot.addWidget(panel)
    result = simulate(small(recompute="full"))
    assert result.notes
    panel.show_result(result, 0.5)
    assert panel.notes.isVisibleTo(panel) and NOTES_TITLE in panel.notes.text()
    for note in result.notes:  # every note, escaped as HTML
        assert note.replace("'", "&#x27;") in panel.notes.text()
    assert not panel.tabs.tabIcon(panel.summary_tab).isNull()
    assert panel.tabs.tabToolTip(panel.summary_tab).startswith(f"{len(result.notes)} note")
    assert NOTES_TITLE in panel.text()
    plain = simulate(small(recompute="selective"))
    assert not plain.notes
    panel.show_result(plain, 0.5)
    assert not panel.notes.isVisibleTo(panel) and panel.tabs.tabIcon(panel.summary_tab).isNull()
    assert panel.tabs.tabText(panel.summary_tab) == "Summary"
