"""The mapping options of the workload panel (activation recompute, reducing gradients under the last backward,
the expert token exchange): each control changes the mapping through ONE undo command, undo and redo bring the
old value back and the control follows, the enabled states follow the applied tp/dp/ep, a choice the engine
refuses is refused with the engine's own words, the saved project keeps the values, and the group fits the
Workload dock of a 1280 × 720 window."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from tilewright.engine.io import load_project  # noqa: E402
from tilewright.engine.io.presets import load_system  # noqa: E402
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings  # noqa: E402
from tilewright.engine.ir.mapping import Recompute  # noqa: E402
from tilewright.engine.plan.checks import check_project  # noqa: E402
from tilewright.studio.mapping_edit import checked_option  # noqa: E402
from tilewright.studio.tree_edit import EditRefused  # noqa: E402

MIXTRAL = "presets/projects/mixtral-8x7b-dgx-h100.json"
HYPAR = "presets/projects/hypar-vgg-a-partitioned.json"
INFERENCE = "presets/projects/llama2-70b-h100-inference.json"


def small_moe(tp: int = 1, dp: int = 8, ep: int = 1) -> Project:
    """Two GPT layers with 8 experts (top-2) on one DGX-A100: built in well under a second."""
    spec = GPTSpec(name="moe", layers=2, hidden=1024, heads=16, seq_len=1024, vocab=32000,
                   moe={"experts": 8, "top_k": 2, "expert_ffn": 2048})
    return Project(name="moe", hardware=load_system("dgx-a100"), workload=spec,
                   mapping=Mapping(tp=tp, dp=dp, ep=ep, micro_batch=1, global_batch=2 * dp),
                   run=RunSettings(dtype="bf16", engine="analytic"))


def choose(editor, text: str) -> None:
    """What a user does with a combo: pick ``text`` (``activated`` fires only for a user's choice)."""
    editor.combo.setCurrentText(text)
    editor.combo.activated.emit(editor.combo.currentIndex())


def auto_map(panel, **degrees: str) -> None:
    for field, text in degrees.items():
        panel.editors[field].type_and_commit(text)
    assert panel.apply_auto_map(), panel.error_label.text()


# -- without a window ---------------------------------------------------------------------------------
def test_an_option_the_engine_refuses_is_refused_in_its_words():
    """A HyPar partition runs without recomputation (``engine.plan.checks``): the option says so as the engine
    does, while an option the engine accepts comes back with only that field changed."""
    project = load_project(HYPAR)
    assert project.mapping.layer_parallelism and project.mapping.recompute is Recompute.none
    bad = project.model_copy(update={"mapping": project.mapping.model_copy(update={"recompute": Recompute.full})})
    engine_says = [str(p) for p in check_project(bad) if p.path == "mapping.recompute"]
    assert engine_says  # the engine's own check, not the studio's
    with pytest.raises(EditRefused) as refused:
        checked_option(project, "recompute", "full")
    assert refused.value.reason == "; ".join(engine_says)
    on = checked_option(project, "overlap_grad_reduce", True)
    assert on == project.mapping.model_copy(update={"overlap_grad_reduce": True})
    with pytest.raises(EditRefused, match="ep_dispatcher"):
        checked_option(project, "ep_dispatcher", "ring")  # the model's own validation
    with pytest.raises(EditRefused, match="not a mapping option"):
        checked_option(project, "tp", 2)  # degrees go through Auto-map


# -- in the window ------------------------------------------------------------------------------------
def test_recompute_is_one_undo_step_the_combo_follows(make_window):
    w = make_window(load_project(MIXTRAL))
    panel, doc = w.workload, w.doc
    combo = panel.options.recompute
    before = doc.project.mapping
    assert before.recompute is Recompute.none and combo.combo.currentText() == "none" and combo.isEnabled()
    choose(combo, "selective")
    assert doc.project.mapping == before.model_copy(update={"recompute": Recompute.selective})
    assert doc.undo_stack.count() == 1 and "recompute selective" in doc.undo_stack.undoText()
    choose(combo, "full")
    assert doc.project.mapping.recompute is Recompute.full and doc.undo_stack.count() == 2
    doc.undo_stack.undo()
    assert doc.project.mapping.recompute is Recompute.selective and combo.combo.currentText() == "selective"
    doc.undo_stack.undo()
    assert doc.project.mapping == before and combo.combo.currentText() == "none"
    doc.undo_stack.redo()
    assert combo.combo.currentText() == "selective"


def test_layers_re_run_follow_full_recompute(make_window):
    """The layer count is off until recompute is full; typed, it is one undo step; leaving full recomputation
    clears it in the same step (a count of whole layers means nothing then), and undo brings both back."""
    w = make_window(load_project(MIXTRAL))
    doc, opts = w.doc, w.workload.options
    layers = opts.recompute_layers
    assert not layers.isEnabled() and "full" in layers.toolTip()
    choose(opts.recompute, "full")
    assert layers.isEnabled() and layers.line_edit.text() == ""
    layers.type_and_commit("3")
    assert doc.project.mapping.recompute_layers == 3 and doc.undo_stack.count() == 2
    assert "Recompute 3 layers" in doc.undo_stack.undoText()
    choose(opts.recompute, "selective")
    assert doc.project.mapping.recompute is Recompute.selective and doc.project.mapping.recompute_layers is None
    assert doc.undo_stack.count() == 3 and not layers.isEnabled()
    doc.undo_stack.undo()
    assert doc.project.mapping.recompute_layers == 3 and layers.line_edit.text() == "3" and layers.isEnabled()
    layers.type_and_commit("0")  # refused with the reason; nothing is pushed
    assert doc.undo_stack.index() == 2 and doc.undo_stack.count() == 3 and doc.project.mapping.recompute_layers == 3
    assert "recompute_layers" in layers.error and "1" in layers.error


def test_overlapping_tensor_parallel_communication_needs_sequence_parallelism(make_window):
    """On for a tp 8 + sequence-parallel mapping (one undo step, undo follows); off, saying why, for tp 1."""
    w = make_window(load_project("presets/projects/gpt3-dgx-a100.json"))
    doc, flag = w.doc, w.workload.options.overlap_tp
    assert flag.isEnabled() and not doc.project.mapping.overlap_tp_comm
    flag.box.click()  # what a user does
    assert doc.project.mapping.overlap_tp_comm and doc.undo_stack.count() == 1
    assert "Overlap tensor-parallel" in doc.undo_stack.undoText()
    doc.undo_stack.undo()
    assert not doc.project.mapping.overlap_tp_comm and not flag.box.isChecked()
    w2 = make_window(load_project(MIXTRAL))  # tp 1
    assert not w2.workload.options.overlap_tp.isEnabled()
    assert "sequence parallelism" in w2.workload.options.overlap_tp.toolTip()


def test_the_reduce_scatter_overlap_follows_the_tp_overlap_one_undo_step(make_window):
    """The forward reduce-scatter's method is off (saying why) until tp communication is overlapped; then ring
    exchange is one undo step, and undo restores the pipelined form in the model and the combo."""
    w = make_window(load_project("presets/projects/gpt3-dgx-a100.json"))
    doc, opts = w.doc, w.workload.options
    assert not opts.tp_rs.isEnabled() and "overlapped" in opts.tp_rs.toolTip()
    opts.overlap_tp.box.click()
    assert opts.tp_rs.isEnabled() and doc.project.mapping.tp_overlap_reduce_scatter == "pipeline"
    choose(opts.tp_rs, "ring exchange")
    assert doc.project.mapping.tp_overlap_reduce_scatter == "ring_exchange" and doc.undo_stack.count() == 2
    assert "ring exchange" in doc.undo_stack.undoText()
    doc.undo_stack.undo()
    assert doc.project.mapping.tp_overlap_reduce_scatter == "pipeline"
    assert opts.tp_rs.combo.currentText() == "pipelined"


def test_the_fused_loss_is_one_undo_step(make_window):
    w = make_window(load_project("presets/projects/gpt3-dgx-a100.json"))
    doc, flag = w.doc, w.workload.options.fused_loss
    assert flag.isEnabled() and not doc.project.mapping.fused_cross_entropy
    flag.box.click()
    assert doc.project.mapping.fused_cross_entropy and doc.undo_stack.count() == 1
    doc.undo_stack.undo()
    assert not doc.project.mapping.fused_cross_entropy and not flag.box.isChecked()


def test_a_pipeline_layout_is_typed_checked_and_cleared_by_a_new_pp(make_window):
    """gpt3-dgx-a100: 96 layers on pp 8 × interleave 3 = 24 virtual stages. A layout in the short form is one
    undo step and reads back in the short form; a wrong count is refused in the engine's words and a typo in
    the parser's; an Auto-map to another pp clears the layout with it (it was for 24 virtual stages)."""
    w = make_window(load_project("presets/projects/gpt3-dgx-a100.json"))
    doc, panel = w.doc, w.workload
    layout = panel.options.layout
    assert layout.isEnabled() and layout.line_edit.text() == ""
    layout.type_and_commit("3,5,4*22")
    assert doc.project.mapping.pipeline_layers == [3, 5] + [4] * 22 and doc.undo_stack.count() == 1
    assert layout.line_edit.text() == "3,5,4*22"
    layout.type_and_commit("4*23")
    assert doc.undo_stack.count() == 1 and "24" in layout.error  # the engine: 23 listed, pp × interleave is 24
    layout.type_and_commit("4*x")
    assert doc.undo_stack.count() == 1 and "N*K" in layout.error
    auto_map(panel, pp="4")
    assert doc.project.mapping.pp == 4 and doc.project.mapping.pipeline_layers is None
    doc.undo_stack.undo()
    assert doc.project.mapping.pipeline_layers == [3, 5] + [4] * 22 and layout.line_edit.text() == "3,5,4*22"


def test_the_combo_refuses_what_the_engine_refuses(make_window):
    w = make_window(load_project(HYPAR))
    panel, doc = w.workload, w.doc
    combo = panel.options.recompute
    choose(combo, "selective")
    assert doc.undo_stack.count() == 0 and doc.project.mapping.recompute is Recompute.none
    assert combo.combo.currentText() == "none"  # snapped back
    assert "HyPar partition" in combo.error and combo.error.startswith("selective: mapping.recompute")


def test_reducing_gradients_under_the_backward_needs_data_parallelism(make_window):
    """Off (and saying why) while the applied dp is 1; a typed dp is not the mapping's until Auto-map; on, one
    click is one undo step; undoing the Auto-map disables it again."""
    w = make_window(small_moe(tp=8, dp=1))
    panel, doc = w.workload, w.doc
    box = panel.options.overlap_grad
    assert not box.isEnabled() and "dp > 1" in box.toolTip()
    box.box.click()  # a disabled box takes no click
    assert doc.undo_stack.count() == 0 and not doc.project.mapping.overlap_grad_reduce
    panel.editors["dp"].type_and_commit("2")
    assert not box.isEnabled()
    auto_map(panel, tp="4")
    assert box.isEnabled() and "--overlap-grad-reduce" in box.toolTip()
    before = doc.project.mapping
    box.box.click()
    assert doc.project.mapping == before.model_copy(update={"overlap_grad_reduce": True})
    assert doc.undo_stack.count() == 2 and box.box.isChecked()
    doc.undo_stack.undo()
    assert not doc.project.mapping.overlap_grad_reduce and not box.box.isChecked() and box.isEnabled()
    doc.undo_stack.redo()
    assert box.box.isChecked()
    doc.undo_stack.undo()
    doc.undo_stack.undo()  # the Auto-map: dp 1 again
    assert doc.project.mapping.dp == 1 and not box.isEnabled() and "dp > 1" in box.toolTip()


def test_the_expert_token_exchange_needs_expert_parallelism(make_window):
    w = make_window(small_moe(ep=1))
    panel, doc = w.workload, w.doc
    exchange = panel.options.ep_dispatcher
    assert not exchange.isEnabled() and "ep > 1" in exchange.toolTip()
    assert exchange.combo.currentText() == "alltoall (flat)"
    auto_map(panel, ep="4")
    assert exchange.isEnabled() and "DeepEP" in exchange.toolTip()
    before = doc.project.mapping
    choose(exchange, "deepep (node by node)")
    assert doc.project.mapping == before.model_copy(update={"ep_dispatcher": "deepep"})
    assert doc.undo_stack.count() == 2 and "deepep" in doc.undo_stack.undoText()
    doc.undo_stack.undo()
    assert doc.project.mapping.ep_dispatcher == "alltoall" and exchange.combo.currentText() == "alltoall (flat)"
    doc.undo_stack.redo()
    assert exchange.combo.currentText() == "deepep (node by node)"
    doc.undo_stack.undo()
    doc.undo_stack.undo()
    assert doc.project.mapping.ep == 1 and not exchange.isEnabled()


def test_training_options_are_off_for_an_inference_run(make_window):
    w = make_window(load_project(INFERENCE))
    options = w.workload.options
    for editor in (options.recompute, options.overlap_grad):
        assert not editor.isEnabled() and "training only" in editor.toolTip()


def test_an_option_keeps_degrees_typed_but_not_applied(make_window):
    w = make_window(load_project(MIXTRAL))
    panel, doc = w.workload, w.doc
    panel.editors["dp"].type_and_commit("8")
    choose(panel.options.ep_dispatcher, "deepep (node by node)")
    assert doc.project.mapping.ep_dispatcher == "deepep" and doc.project.mapping.dp == 16
    assert panel.pending == {"dp": 8} and panel.editors["dp"].value == 8


def test_a_saved_project_keeps_the_options(make_window, tmp_path):
    w = make_window(load_project(MIXTRAL))
    options, doc = w.workload.options, w.doc
    before = doc.project.mapping
    choose(options.recompute, "full")
    options.overlap_grad.box.click()
    choose(options.ep_dispatcher, "deepep (node by node)")
    assert doc.undo_stack.count() == 3
    saved = load_project(doc.save(tmp_path / "mixtral-options.json"))
    assert saved.mapping == before.model_copy(
        update={"recompute": Recompute.full, "overlap_grad_reduce": True, "ep_dispatcher": "deepep"}
    )
    w = make_window(saved)  # reopened, the panel shows what was saved
    options = w.workload.options
    assert options.recompute.combo.currentText() == "full" and options.overlap_grad.box.isChecked()
    assert options.ep_dispatcher.combo.currentText() == "deepep (node by node)"


def test_the_options_fit_the_workload_dock_at_1280x720(make_window, qtbot):
    """Nothing widens the dock or is cut at its right edge; every control says what it does."""
    w = make_window(load_project(MIXTRAL), size=(1280, 720))
    w.docks["workload"].show()
    w.docks["workload"].raise_()
    qtbot.wait(20)
    panel = w.workload
    options = panel.options
    assert options.isVisible()
    assert options.width() <= panel.viewport().width()
    # not even a pixel too wide: a horizontal scroll bar would take a line of the dock's height for nothing
    assert panel.widget().minimumSizeHint().width() <= panel.viewport().width()
    assert panel.horizontalScrollBar().maximum() == 0
    for editor in options.editors.values():
        assert editor.isVisible() and editor.toolTip()
        assert editor.geometry().right() <= options.contentsRect().right(), editor
        assert editor.width() >= editor.minimumSizeHint().width()
    assert options.mapTo(panel.widget(), options.rect().topLeft()).y() > panel.mapping_box.geometry().bottom()


def test_studio_modules_follow_selective_recompute_one_undo_step(make_window):
    w = make_window(load_project(MIXTRAL))
    doc, opts = w.doc, w.workload.options
    modules = opts.modules
    assert not modules.isEnabled() and "selective" in modules.toolTip()
    choose(opts.recompute, "selective")
    assert modules.isEnabled() and modules.line_edit.text() == ""
    modules.type_and_commit("layernorm, moe_act")
    assert doc.project.mapping.recompute_modules == ["layernorm", "moe_act"] and doc.undo_stack.count() == 2
    assert modules.line_edit.text() == "layernorm,moe_act" and "layernorm" in doc.undo_stack.undoText()
    modules.type_and_commit("mla_up_proj")  # Mixtral has no latent attention: the engine's words, nothing pushed
    assert doc.undo_stack.count() == 2 and "latent attention" in modules.error
    choose(opts.recompute, "full")  # leaving selective recomputation clears the modules in the same step
    assert doc.project.mapping.recompute_modules is None and doc.undo_stack.count() == 3
    doc.undo_stack.undo()
    assert doc.project.mapping.recompute_modules == ["layernorm", "moe_act"] and modules.isEnabled()


def test_studio_cuda_graphs_one_undo_step_and_the_engines_refusal(make_window):
    """The "CUDA graphs" field sets ``mapping.cuda_graph_scope`` in one undo step; a scope the model lacks is
    refused in the engine's words; the run's host wait falls as the engine says (``plan.cuda_graphs``)."""
    w = make_window(small_moe(dp=8, ep=8))
    doc, graphs = w.doc, w.workload.options.graphs
    assert graphs.isEnabled() and graphs.line_edit.text() == "" and "cuda-graph-scope" in graphs.toolTip()
    graphs.type_and_commit("mlp")  # a dense MLP scope on a model whose every MLP is MoE: nothing pushed
    assert doc.undo_stack.count() == 0 and "mlp" in graphs.error
    graphs.type_and_commit("attn, moe_router")
    assert doc.project.mapping.cuda_graph_scope == ["attn", "moe_router"] and doc.undo_stack.count() == 1
    assert graphs.line_edit.text() == "attn,moe_router" and "CUDA graphs attn" in doc.undo_stack.undoText()
    doc.undo_stack.undo()
    assert doc.project.mapping.cuda_graph_scope is None and graphs.line_edit.text() == ""
