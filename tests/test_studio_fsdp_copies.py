"""The studio's control of PyTorch FSDP2's copies (``mapping.fsdp_copies``), first in the workload dock's options
group under the FSDP and ZeRO degrees: one undo step that changes only that field (undo and redo bring the values
back, the check box follows), off with its reason wherever no weights are gathered (below ZeRO-3, inference), on
once FSDP is applied, and the run it edits is the engine's with the copies."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from tilewright.engine.io.presets import load_system  # noqa: E402
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings  # noqa: E402
from tilewright.engine.simulate import simulate  # noqa: E402
from tilewright.studio.ui.framework_options import TRAINING_ONLY  # noqa: E402
from tilewright.studio.ui.sharding_options import FSDP_COPIES_OFF_TIP, SHARDING_TIPS  # noqa: E402


def small(mode: str = "train", **mapping) -> Project:
    """Four GPT layers on one node: built and simulated in well under a second."""
    spec = GPTSpec(name="small", layers=4, hidden=1024, heads=16, seq_len=1024, vocab=32000)
    fields = {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1, "global_batch": 16} | mapping
    return Project(name="small", hardware=load_system("dgx-a100"), workload=spec, mapping=Mapping(**fields),
                   run=RunSettings(dtype="bf16", engine="analytic", mode=mode))


def test_one_undo_step_that_changes_only_the_copies(make_window):
    w = make_window(small(fsdp=True))
    doc, control = w.doc, w.workload.options.fsdp_copies
    before = doc.project.mapping
    assert control.isEnabled() and not control.box.isChecked()
    assert control.toolTip() == SHARDING_TIPS["fsdp_copies"] and "_fsdp_collectives.py" in control.toolTip()
    control.box.click()
    assert doc.project.mapping == before.model_copy(update={"fsdp_copies": True})
    assert doc.undo_stack.count() == 1 and "FSDP2" in doc.undo_stack.undoText()
    assert simulate(doc.project).iteration_time_s > simulate(small(fsdp=True)).iteration_time_s  # the copies' time
    doc.undo_stack.undo()
    assert doc.project.mapping == before and not control.box.isChecked()
    doc.undo_stack.redo()
    assert doc.project.mapping.fsdp_copies and control.box.isChecked()
    control.box.click()
    assert doc.undo_stack.count() == 2 and not doc.project.mapping.fsdp_copies
    assert "no FSDP2 copies" in doc.undo_stack.undoText()


def test_off_with_its_reason_until_weights_are_gathered(make_window):
    """Below ZeRO-3 the control is off and says why; FSDP applied through Auto-map turns it on."""
    w = make_window(small(zero=1))
    panel, control = w.workload, w.workload.options.fsdp_copies
    assert not control.isEnabled() and control.toolTip() == FSDP_COPIES_OFF_TIP
    panel.fsdp.box.click()  # staged: the mapping, and so the control, wait for Auto-map
    assert not control.isEnabled()
    assert panel.apply_auto_map(), panel.error_label.text()
    assert w.doc.project.mapping.zero == 3 and control.isEnabled() and "FSDP2" in control.toolTip()


def test_an_inference_run_has_no_gathers(make_window):
    w = make_window(small(mode="infer", dp=1, global_batch=1, zero=3))
    control = w.workload.options.fsdp_copies
    assert not control.isEnabled() and control.toolTip() == TRAINING_ONLY
