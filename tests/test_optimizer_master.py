"""Megatron-Core's precision-aware optimizer beyond bf16 moments: the master copy (``mapping.optimizer_master``:
fp32, bf16 parameters + 16-bit remainders, fp16) and fp16 / fp8 moments, with Megatron's flags.

Expected numbers are derived here by hand from Transformer Engine's FusedAdam (``fused_adam.py``) and the
parameter count. Held per parameter: moments 4 / 2 / 2 / 1 B each (fp32 / bf16 / fp16 / fp8), master 4 (fp32),
2 (int16 remainders), 2 (fp16); ZeRO-1 divides them by dp. The step: TE's kernel reads and writes fp32 master and
moments (2 · (4 + 4 + 4)), reads the fp32 gradient (4) and writes the bf16 weights (2): 30 B. Each state held in
another dtype is copied to fp32 and back around the kernel: bf16 ``.float()`` 2 + 4, ``.bfloat16()`` 4 + 2,
``copy_`` 2 + 2; fp16 ``.float()`` 2 + 4, ``mul_`` 4 + 4, ``aminmax`` 4, ``mul_`` 4 + 4, ``copy_`` 4 + 2; fp8
dequantize 1 + 4, ``aminmax`` 4, quantize 4 + 1. Remainders are no cast: the remainder kernel reads and writes the
int16 remainder (2 + 2) and the bf16 parameter (2 + 2) instead of the fp32 master (4 + 4) and the written weights (2).
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # the studio control's test below

import pytest  # noqa: E402
from tilewright.engine.cli import main  # noqa: E402
from tilewright.engine.io.presets import load_system  # noqa: E402
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings  # noqa: E402
from tilewright.engine.plan import train_step  # noqa: E402
from tilewright.engine.plan.checks import check_project  # noqa: E402
from tilewright.engine.search.parallel.candidate import Candidate  # noqa: E402
from tilewright.engine.simulate import make_plan, simulate  # noqa: E402
from tilewright.engine.workloads import build_workload  # noqa: E402

from tests.agreement import assert_engines_agree, assert_search_matches_engine  # noqa: E402

GPT = GPTSpec(name="gpt-master", layers=4, hidden=1024, heads=16, seq_len=512, vocab=8192)
FIELD = "mapping.optimizer_master"
HELD_MOMENT = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
HELD_MASTER = {"fp32": 4.0, "remainders": 2.0, "fp16": 2.0}
CAST = {"fp32": 0.0, "bf16": (2 + 4) + (4 + 2) + (2 + 2), "fp16": (2 + 4) + (4 + 4) + 4 + (4 + 4) + (4 + 2),
        "fp8": (1 + 4) + 4 + (4 + 1)}
KERNEL = 2 * (4 + 4 + 4) + 4 + 2  # fp32 master and moments read + written, gradient read, bf16 weights written


def _project(dtype: str = "bf16", engine: str = "analytic", mode: str = "train", scaling: str | None = None,
             **mapping) -> Project:
    m = {"tp": 1, "pp": 1, "dp": 4, "micro_batch": 1, "global_batch": 16, "zero": 1} | mapping
    if scaling:
        m["formats"] = {"fp8_scaling": scaling}
    return Project(name="master", hardware=load_system("dgx-h100"), workload=GPT, mapping=Mapping(**m),
                   run=RunSettings(dtype=dtype, mode=mode, engine=engine, contention=False))


def _params() -> float:
    return sum(op.params for op in build_workload(GPT).ops())


def _step_bytes(moments: str, master: str) -> float:
    if master == "remainders":
        return KERNEL - (4 + 4) + (2 + 2) - 2 + (2 + 2) + 2 * CAST[moments]
    return KERNEL + 2 * CAST[moments] + CAST[master]


COMBOS = [("fp32", "remainders"), ("bf16", "remainders"), ("fp32", "fp16"), ("fp8", "fp32"), ("fp16", "fp32"),
          ("bf16", "fp32")]


@pytest.mark.parametrize(("moments", "master"), COMBOS)
def test_held_bytes_per_parameter(moments: str, master: str):
    """The optimizer state: two moments and the master, sharded over dp by ZeRO-1; weights and gradients stay."""
    base = make_plan(_project()).stages[0].state
    st = make_plan(_project(optimizer_moments=moments, optimizer_master=master)).stages[0].state
    assert st.optimizer == pytest.approx(_params() * (2 * HELD_MOMENT[moments] + HELD_MASTER[master]) / 4, rel=1e-9)
    assert base.optimizer == pytest.approx(_params() * 12 / 4, rel=1e-9)
    assert (st.weights, st.gradients) == (base.weights, base.gradients)


@pytest.mark.parametrize(("moments", "master"), COMBOS)
def test_the_steps_traffic(moments: str, master: str):
    """The fused step streams the bytes counted by hand over the device's DRAM bandwidth, for its 1/dp shard."""
    assert _step_bytes("fp32", "fp32") == 30.0
    st = make_plan(_project(optimizer_moments=moments, optimizer_master=master)).stages[0]
    assert st.fused_step_s == pytest.approx(_params() / 4 * _step_bytes(moments, master) / st.dev.dram_bandwidth,
                                            rel=1e-9)


def test_remainders_save_two_bytes_held_and_streamed():
    """bf16 parameters + remainders: 2 B per parameter less held and 2 B less streamed (8 against 10 B for master
    and weights), so both the peak memory and the iteration time drop."""
    base, lean = simulate(_project()), simulate(_project(optimizer_master="remainders"))
    assert base.peak_memory_bytes - lean.peak_memory_bytes == pytest.approx(2.0 * _params() / 4, rel=1e-9)
    assert _step_bytes("fp32", "fp32") - _step_bytes("fp32", "remainders") == 2.0
    assert lean.iteration_time_s < base.iteration_time_s


@pytest.mark.parametrize(
    ("dtype", "scaling", "master", "read_back"),
    [("bf16", None, "remainders", False), ("fp16", None, "fp16", False), ("fp8", None, "fp16", False),
     ("fp8", "delayed", "remainders", False), ("fp8", None, "fp32", True), ("bf16", None, "fp32", True)],
    ids=["bf16", "fp16", "fp8-fp16-master", "fp8-delayed", "fp8-tensor", "default"],
)
def test_the_masters_read_back_goes_where_te_holds_the_master(dtype: str, scaling: str | None, master: str,
                                                              read_back: bool, monkeypatch):
    """Megatron's step reads the fp32 master back to write the low-precision weights (4 B per parameter beyond
    the fused step) unless Transformer Engine holds the master (Megatron-Core's
    use_precision_aware_optimizer_no_fp8_or_ds_fp8: not fp8, or delayed scaling, or an fp16 master). The
    optimizer's per-tensor Python loops, whose copy-back also goes with a TE master, are taken away here
    (``train_step.loop_seconds``, tested in test_small_job_train_step) so that the traffic is seen alone."""
    monkeypatch.setattr(train_step, "loop_seconds", lambda *a, **k: 0.0)
    moments = "bf16" if master == "fp32" and dtype == "fp8" else "fp32"
    base = make_plan(_project(dtype=dtype, scaling=scaling)).stages[0]
    st = make_plan(_project(dtype=dtype, scaling=scaling, optimizer_master=master, optimizer_moments=moments)).stages[0]
    gone = (base.optimizer_s - base.fused_step_s) - (st.optimizer_s - st.fused_step_s)
    want = 0.0 if read_back else _params() / 4 * 4 / st.dev.dram_bandwidth
    assert gone == pytest.approx(want, rel=1e-9, abs=1e-15)


def test_the_default_is_unchanged_and_not_saved():
    explicit = _project(optimizer_master="fp32", optimizer_moments="fp32")
    assert simulate(explicit).iteration_time_s == simulate(_project()).iteration_time_s
    saved = _project().mapping.model_dump(mode="json")
    assert "optimizer_master" not in saved and "overlap_param_gather_with_optimizer_step" not in saved
    assert _project(optimizer_master="fp16").mapping.model_dump(mode="json")["optimizer_master"] == "fp16"


@pytest.mark.parametrize(
    ("project", "says"),
    [
        (_project(dtype="fp16", optimizer_master="remainders"), "bf16 parameters"),
        (_project(dtype="fp8", optimizer_master="remainders"), "keeps the fp32 master itself"),
        (_project(dtype="fp8", scaling="delayed", fp8_param_gather=True, optimizer_master="remainders"), "not bf16"),
        (_project(zero=0, optimizer_master="fp16"), "distributed optimizer"),
        (_project(dtype="fp32", optimizer_master="fp16"), "mixed precision"),
    ],
    ids=["fp16-run", "fp8-tensor", "fp8-param-gather", "zero0", "fp32"],
)
def test_refused_where_megatron_or_te_would(project: Project, says: str):
    problems = [p for p in check_project(project) if p.path == FIELD]
    assert problems and any(says in p.reason for p in problems)


@pytest.mark.parametrize("project", [_project(dtype="fp8", scaling="delayed", optimizer_master="remainders"),
                                     _project(dtype="fp8", optimizer_master="fp16", optimizer_moments="fp8"),
                                     _project(optimizer_master="remainders", optimizer_moments="bf16")],
                         ids=["fp8-delayed-remainders", "fp8-fp16-master", "bf16-remainders"])
def test_accepted(project: Project):
    assert check_project(project) == []


@pytest.mark.parametrize(("moments", "master"), [("bf16", "remainders"), ("fp8", "fp16")])
def test_both_engines_and_the_search_agree(moments: str, master: str):
    case = {"optimizer_moments": moments, "optimizer_master": master}
    assert_engines_agree(simulate(_project(**case)), simulate(_project(engine="event", **case)))
    assert_search_matches_engine(_project(), Candidate(1, 2, 4, 1, zero=1), optimizer_moments=moments,
                                 optimizer_master=master)


CLI = ["run", "--system", "dgx-h100", "--model", "gpt", "--layers", "4", "--hidden", "1024", "--heads", "16",
       "--seq-len", "512", "--vocab", "8192", "--dp", "2", "--global-batch", "4", "--zero", "1", "--json"]


def _memory(capsys, *flags: str) -> dict:
    assert main([*CLI, *flags]) == 0
    return json.loads(capsys.readouterr().out)["memory_breakdown_bytes"]


def test_megatron_flags_on_run(capsys):
    """Megatron's flags as a recipe writes them: the precision-aware optimizer stores remainders for a bf16 run by
    default (10 B of 12), --no-store-param-remainders keeps the fp32 master, bf16 moments on top leave 8 B, and
    --main-grads-dtype bf16 halves the gradient buffer."""
    off = _memory(capsys)
    aware = _memory(capsys, "--use-precision-aware-optimizer")
    assert aware["optimizer"] == pytest.approx(off["optimizer"] * 10 / 12, rel=1e-9)
    whole = _memory(capsys, "--use-precision-aware-optimizer", "--no-store-param-remainders")
    assert whole["optimizer"] == pytest.approx(off["optimizer"], rel=1e-9)
    lean = _memory(capsys, "--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16",
                   "--main-grads-dtype", "bf16")
    assert lean["optimizer"] == pytest.approx(off["optimizer"] * (2 + 2 + 2) / 12, rel=1e-9)
    assert lean["gradients"] == pytest.approx(off["gradients"] / 2, rel=1e-9)
    fp16 = _memory(capsys, "--use-precision-aware-optimizer", "--main-params-dtype", "fp16")
    assert fp16["optimizer"] == pytest.approx(off["optimizer"] * 10 / 12, rel=1e-9)


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        (["--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"], "--exp-avg-dtype"),  # not precision-aware
        (["--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16"], "--exp-avg-sq-dtype"),  # moments differ
        (["--use-precision-aware-optimizer", "--dtype", "fp8", "--store-param-remainders"], FIELD),  # tensor scaling
        (["--use-precision-aware-optimizer", "--zero", "0"], FIELD),  # no distributed optimizer
    ],
    ids=["not-aware", "moments-differ", "fp8-remainders", "zero0"],
)
def test_refusals_exit_2_naming_the_flag_or_field(capsys, flags: list[str], names: str):
    assert main([*CLI, *flags]) == 2
    assert names in capsys.readouterr().err


def test_search_keeps_the_master_and_takes_the_flags(tmp_path):
    from tilewright.engine.cli.dispatch import build_parser
    from tilewright.engine.cli.search import search_template
    from tilewright.engine.io.project_file import project_to_data

    path = tmp_path / "remainders.json"
    path.write_text(json.dumps(project_to_data(_project(optimizer_master="remainders"))))
    template, _, _ = search_template(build_parser().parse_args(["search", str(path)]))
    assert template.mapping.optimizer_master == "remainders"
    flags = ["search", str(path), "--use-precision-aware-optimizer", "--no-store-param-remainders",
             "--exp-avg-dtype", "fp8", "--exp-avg-sq-dtype", "fp8"]
    template, _, _ = search_template(build_parser().parse_args(flags))
    assert (template.mapping.optimizer_master, template.mapping.optimizer_moments) == ("fp32", "fp8")


def test_studio_options_are_one_undo_step_each(make_window):
    w = make_window(_project(dp=8, global_batch=16))
    options, doc = w.workload.options, w.doc
    master, moments = options.master, options.moments
    assert master.isEnabled() and "remainders" in master.toolTip()
    master.combo.setCurrentText("bf16 + remainders")
    master.combo.activated.emit(master.combo.currentIndex())
    assert doc.project.mapping.optimizer_master == "remainders" and doc.undo_stack.count() == 1
    assert doc.undo_stack.undoText() == "Master weights bf16 + remainders"
    moments.combo.setCurrentText("bf16")
    moments.combo.activated.emit(moments.combo.currentIndex())
    assert doc.project.mapping.optimizer_moments == "bf16" and doc.undo_stack.count() == 2
    doc.undo_stack.undo()
    doc.undo_stack.undo()
    assert (doc.project.mapping.optimizer_master, doc.project.mapping.optimizer_moments) == ("fp32", "fp32")
    assert master.combo.currentText() == "fp32"
    fp32 = make_window(_project(dtype="fp32", dp=8, global_batch=16)).workload.options.master
    assert not fp32.isEnabled() and "mixed-precision" in fp32.toolTip()


def test_studio_refuses_remainders_for_an_fp16_run_with_the_engines_words(make_window):
    w = make_window(_project(dtype="fp16", dp=8, global_batch=16))
    master, doc = w.workload.options.master, w.doc
    master.combo.setCurrentText("bf16 + remainders")
    master.combo.activated.emit(master.combo.currentIndex())
    assert doc.project.mapping.optimizer_master == "fp32" and doc.undo_stack.count() == 0
    assert master.combo.currentText() == "fp32"


def test_studio_offers_the_options_where_the_weights_format_makes_the_run_mixed(make_window):
    """An fp32 run whose weights are held in bf16 (mapping.formats.weights) is mixed precision to the engine, so
    the studio enables the moments and master choices for it too; an all-fp32 run has them off."""
    from tilewright.engine.plan.checks import check_project

    mixed = _project("fp32", formats={"weights": "bf16"}, optimizer_moments="bf16")
    assert check_project(mixed) == []
    w = make_window(mixed)
    assert w.workload.options.moments.isEnabled() and w.workload.options.master.isEnabled()
    w2 = make_window(_project("fp32"))
    assert not w2.workload.options.moments.isEnabled()


def test_search_says_which_candidates_run_the_projects_adam_precision():
    """The search's notes name the project's moments and master copy, and that its ZeRO-0 candidates (listed in
    the ranking) run them in fp32 — the table shows only the ZeRO stage; a project in fp32 gets no such note."""
    from tilewright.engine.search.parallel.search import search

    bf16 = search(_project(optimizer_moments="bf16"), 4, 16, top=0, keep=200, resimulate=False)
    note = [n for n in bf16.notes if n.startswith("Adam's moments")]
    assert len(note) == 1 and "bf16" in note[0]
    assert any(r.candidate.zero == 0 for r in bf16.ranked)  # the default space ranks ZeRO 0 and 1
    assert "ZeRO-0 candidates keep them in fp32" in note[0]
    plain = search(_project(), 4, 16, top=0, keep=200, resimulate=False)
    assert not any(n.startswith("Adam's moments") for n in plain.notes)
