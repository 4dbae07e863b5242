"""Narrowing the search from the studio: the Explore ▸ Search tab's ep/cp lists, ZeRO stages, token exchanges,
offload and overlap reach ``search(narrow=…)`` as the CLI's flags do (one engine parser), bad text is refused
in the tab naming the field, and the row fits a 1280 × 720 window; plus this session's IR fields on show: the
MTP depths among the workload rows and expert tp in the canvas legend."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402
from tilewright.engine.errors import InputError  # noqa: E402
from tilewright.engine.io import load_project  # noqa: E402
from tilewright.engine.ir import GPTSpec  # noqa: E402
from tilewright.engine.search.parallel.narrowing import narrowing  # noqa: E402
from tilewright.studio.document import ProjectDocument  # noqa: E402
from tilewright.studio.mapping import stage_split  # noqa: E402
from tilewright.studio.ui.canvas.legend import Size, stage_legend  # noqa: E402
from tilewright.studio.ui.explore import ExplorePanel, search_tab  # noqa: E402
from tilewright.studio.ui.workload_panel import workload_rows  # noqa: E402

MIXTRAL = "presets/projects/mixtral-8x7b-dgx-h100.json"


@pytest.fixture
def tab(qtbot, monkeypatch):
    """The Search tab on Mixtral with a test double for the search that records what it was asked."""
    calls: list[dict] = []

    def fake_search(project, devices, batch, **kwargs):
        calls.append({"devices": devices, "batch": batch, **kwargs})
        return SimpleNamespace(ranked=[], evaluated=0, feasible=0, global_batch=batch)

    monkeypatch.setattr(search_tab, "search", fake_search)
    panel = ExplorePanel(ProjectDocument(load_project(MIXTRAL)))
    qtbot.addWidget(panel)
    panel.search.calls = calls
    panel.search.narrow_box.setChecked(True)  # the row shows and applies only while ticked
    yield panel.search  # the panel stays referenced (its tab is deleted with it) until the test ends
    del panel


def run(qtbot, tab) -> None:
    with qtbot.waitSignal(tab.runner.finished, timeout=10_000):
        tab.start()


# -- the engine parser, shared with the CLI ------------------------------------------------------------
def test_the_parser_builds_the_narrow_keywords():
    assert narrowing("x") == {}
    got = narrowing("x", ep="1, 4,8", cp="2", zero="1,fsdp", ep_dispatcher="deepep", offload=False, overlap=False)
    assert got == {"eps": [1, 4, 8], "cps": [2], "zeros": ["1", "fsdp"], "dispatchers": ["deepep"],
                   "offload": False, "overlap": False}


@pytest.mark.parametrize(("kwargs", "flag"), [
    ({"ep": "0"}, "--ep"), ({"cp": "two"}, "--cp"), ({"zero": "4"}, "--zero"),
    ({"ep_dispatcher": "nccl"}, "--ep-dispatcher"),
])
def test_the_parser_names_the_flag_it_refuses(kwargs, flag):
    with pytest.raises(InputError) as err:
        narrowing("command line", **kwargs)
    assert str(err.value).startswith(f"command line: {flag}: ")


# -- the Search tab ------------------------------------------------------------------------------------
def test_an_unticked_narrowing_leaves_the_space_alone(qtbot, tab):
    """Narrowed but hidden: the default space (the row applies only while shown)."""
    tab.narrowing.ep.setText("1,2")
    tab.narrow_box.setChecked(False)
    tab.start()
    qtbot.waitUntil(lambda: bool(tab.calls))
    assert tab.calls[-1]["narrow"] == {}


def test_the_defaults_leave_the_space_alone(qtbot, tab):
    run(qtbot, tab)
    assert tab.calls[-1]["narrow"] == {}
    assert tab.bar.status.text() == "no mapping fits in memory"  # the double's empty result was shown


def test_the_narrowing_reaches_the_search(qtbot, tab):
    row = tab.narrowing
    row.ep.setText("4,8")
    row.cp.setText("1")
    for box in row.zero:
        box.setChecked(box.text() in ("1", "fsdp"))
    next(b for b in row.dispatcher if b.text() == "alltoall").setChecked(False)
    row.offload.setChecked(False)
    row.overlap.setChecked(False)
    row.modules.setText("core_attn,mlp; core_attn,layernorm,moe_act")
    run(qtbot, tab)
    assert tab.calls[-1]["narrow"] == {"eps": [4, 8], "cps": [1], "zeros": ["1", "fsdp"],
                                       "dispatchers": ["deepep"], "offload": False, "overlap": False,
                                       "recipes": [("core_attn", "mlp"), ("core_attn", "layernorm", "moe_act")]}


def test_a_bad_module_list_is_refused_naming_the_field(qtbot, tab):
    tab.narrowing.modules.setText("core_attn,bogus")
    tab.start()
    assert not tab.runner.running and tab.calls == []
    assert tab.bar.status.text().startswith("modules re-run: 'core_attn,bogus': give module lists")


@pytest.mark.parametrize(("field", "text", "name"), [("ep", "4,x", "ep sizes"), ("cp", "-2", "cp sizes")])
def test_bad_text_is_refused_naming_the_field(qtbot, tab, field, text, name):
    getattr(tab.narrowing, field).setText(text)
    tab.start()
    assert not tab.runner.running and tab.calls == []
    assert tab.bar.status.text().startswith(f"{name}: {text!r}: give whole numbers")


def test_no_zero_stage_ticked_is_refused(qtbot, tab):
    for box in tab.narrowing.zero:
        box.setChecked(False)
    tab.start()
    assert tab.calls == [] and tab.bar.status.text().startswith("ZeRO: ")


def test_every_narrowing_control_says_what_it_narrows(tab):
    row = tab.narrowing
    controls = [row.ep, row.cp, row.modules, *row.zero, *row.dispatcher, row.offload, row.overlap]
    assert all(c.toolTip() for c in controls)


def test_the_search_tab_fits_a_small_window(make_window, qtbot):
    w = make_window(load_project(MIXTRAL), size=(1280, 720))
    w.docks["explore"].raise_()
    tab = w.explore.search
    w.explore.setCurrentWidget(tab)
    assert not tab.narrowing.isVisible()  # hidden until asked for: the tab keeps its height
    tab.narrow_box.setChecked(True)
    qtbot.wait(50)
    row = tab.narrowing
    assert row.width() >= row.minimumSizeHint().width()  # nothing squeezed below its natural size
    right = row.mapTo(w, row.rect().topRight()).x()
    assert right <= w.width()
    for c in [row.ep, row.cp, row.modules, *row.zero, *row.dispatcher, row.offload, row.overlap]:
        assert c.isVisible() and c.width() >= c.minimumSizeHint().width()
        assert c.mapTo(w, c.rect().topRight()).x() <= w.width()


# -- this session's IR fields on show ------------------------------------------------------------------
def test_the_workload_rows_show_mtp_depths_only_when_there_are_any():
    spec = GPTSpec(name="m", layers=4, hidden=256, heads=4, seq_len=128, vocab=1000)
    assert all(label != "MTP depths" for label, _ in workload_rows(spec))
    rows = workload_rows(spec.model_copy(update={"mtp_layers": 2}))
    labels = [label for label, _ in rows]
    assert dict(rows)["MTP depths"].startswith("2")
    assert labels.index("MTP depths") == labels.index("layers") + 1


def test_the_legend_names_expert_tp_when_it_differs_from_tp(make_window):
    project = load_project(MIXTRAL)
    same = project.mapping
    assert "etp" not in stage_split(same)[1]  # expert tp defaults to tp: nothing to say
    folded = same.model_copy(update={"tp": 2, "dp": 8, "ep": 8, "expert_tp": 1})
    assert stage_split(folded)[1] == "tp 2 × dp 8 · ep 8 · etp 1"
    assert "etp" not in stage_split(folded.model_copy(update={"expert_tp": 2}))[1]
    w = make_window(project.model_copy(update={"mapping": folded}), size=(1600, 1000))
    assert "ep 8 · etp 1" in stage_legend(w.canvas.overlay, Size.compact)
    assert "· ep 8 · etp 1" in stage_legend(w.canvas.overlay, Size.full)
