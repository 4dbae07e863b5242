"""The links list is a model: each row's text and tooltip made when asked, the plotted rows carrying
their curve's colour (the others an empty square of its size), and the selection driving the plot; a re-run
keeps the "Carrying" choice and the links chosen; the plot's legend names four curves on screen, every curve
in an export."""

from __future__ import annotations

import dataclasses
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtCore import QItemSelectionModel, Qt  # noqa: E402
from PySide6.QtGui import QIcon  # noqa: E402
from tilewright.engine.results import Series  # noqa: E402
from tilewright.studio.model.run_record import prepare_record  # noqa: E402
from tilewright.studio.samples import dgx_project  # noqa: E402
from tilewright.studio.ui.results.links_view import LinksView  # noqa: E402
from tilewright.studio.ui.results.synthetic import tiny_result  # noqa: E402
from tilewright.studio.ui.results.time_cursor import TimeCursor  # noqa: E402

from tests.test_studio_collectives_view import A, B, mixed_run  # noqa: E402

ICON = Qt.ItemDataRole.DecorationRole


def test_plotted_links_carry_their_colour_and_a_new_selection_replots(qtbot):
    view = LinksView(TimeCursor())
    qtbot.addWidget(view)
    record = prepare_record(dgx_project(), tiny_result(), 0.5)
    view.set_result(record.result, record.ranked_links, record.carriage)
    model = view.model
    assert model.rowCount() == len(record.ranked_links) == 2
    assert view.selected() == [0, 1] and len(view.curves) == 2
    assert all(isinstance(model.index(r).data(ICON), QIcon) for r in range(2))
    series, mean = record.ranked_links[1]
    assert model.index(1).data().split()[:2] == [f"{100 * mean:.1f}", "%"]
    assert model.index(1).data(Qt.ItemDataRole.ToolTipRole).startswith(series.name + "\naverage utilisation")

    view.list.selectionModel().select(model.index(1), QItemSelectionModel.SelectionFlag.ClearAndSelect)
    assert view.selected() == [1] and len(view.curves) == 1
    # the unplotted row keeps an empty square of the swatch's size, so every row's text starts at one x
    assert model.index(0).data(ICON).cacheKey() == model.blank.cacheKey() != model.index(1).data(ICON).cacheKey()

    view.set_result(None)
    assert model.rowCount() == 0 and view.curves == [] and view.selected() == []


def many_links(n: int):
    """``n`` links l0 … l(n-1), each at a constant load: l0 90 %, l1 80 %, … (busiest first in that order)."""
    links = [Series(f"sys/l{i} → sys/switch", "fraction", [0.0], [0.9 - 0.1 * i], 1.0) for i in range(n)]
    return dataclasses.replace(tiny_result(), link_utilisation=links)


def names(view: LinksView) -> list[str]:
    return [view.ranked[r][0].name for r in view.selected()]


def test_every_row_has_a_swatch_sized_square_plotted_or_not(qtbot):
    view = LinksView(TimeCursor())
    qtbot.addWidget(view)
    view.set_result(many_links(6))
    sizes = {r: model_icon.availableSizes() for r in range(6) if (model_icon := view.model.index(r).data(ICON))}
    assert len(sizes) == 6 and len({tuple((s.width(), s.height()) for s in v) for v in sizes.values()}) == 1
    assert view.selected() == [0, 1, 2, 3]
    assert view.model.index(4).data(ICON).cacheKey() == view.model.blank.cacheKey()


def test_a_rerun_keeps_the_carrying_choice_and_the_chosen_links(qtbot):
    view = LinksView(TimeCursor())
    qtbot.addWidget(view)
    view.set_result(mixed_run())
    view.carrying.setCurrentIndex(view.carrying.findData("dp_comm"))  # links A and B carried dp comm
    view.list.selectionModel().select(view.model.index(1), QItemSelectionModel.SelectionFlag.ClearAndSelect)
    assert names(view) == [B]
    view.set_result(mixed_run())  # the same project run again
    assert view.category == "dp_comm" and names(view) == [B] and len(view.curves) == 1
    assert [s.name for s, _ in view.ranked] == [A, B]
    # a run that carried no dp comm and has none of those links: every link, the busiest four
    other = many_links(6)
    view.set_result(other)
    assert view.category is None and view.selected() == [0, 1, 2, 3]
    # no run in between (another project opened): the defaults again, whatever was chosen before
    view.list.selectionModel().select(view.model.index(5), QItemSelectionModel.SelectionFlag.ClearAndSelect)
    view.set_result(None)
    view.set_result(other)
    assert view.selected() == [0, 1, 2, 3]


def legend_labels(view: LinksView) -> list[str]:
    return [label.text for _sample, label in view.legend.items]


def test_the_legend_on_screen_names_four_curves_and_an_export_names_all(make_window, qtbot, tmp_path):
    project = dgx_project()
    w = make_window(project, size=(1280, 720), persist=False)
    record = prepare_record(project, many_links(9), 0.5)
    w.results.show_record(record)
    w.results.flush()
    view = w.results.links
    w.results.tabs.setCurrentWidget(view)
    qtbot.wait(50)
    area_with_four = view.plot.getViewBox().sceneBoundingRect().height()
    legend_with_four = view.legend.boundingRect().height()
    assert legend_labels(view) == [f"l{i} → switch" for i in range(4)]
    view.list.selectAll()
    qtbot.wait(50)
    assert len(view.curves) == 9 and legend_labels(view) == [f"l{i} → switch" for i in range(3)] + [
        "+6 more: colours in the list"]
    # the legend does not grow into the data area: as tall as with the first four alone (nine rows took it all,
    # the legend running into the readout below; a second line of readout may take a few pixels)
    assert view.legend.boundingRect().height() == pytest.approx(legend_with_four, abs=1)
    assert view.plot.getViewBox().sceneBoundingRect().height() >= 0.8 * area_with_four
    with view.full_legend():
        assert legend_labels(view) == [f"l{i} → switch" for i in range(9)]
    assert len(legend_labels(view)) == 4
    files = w.actions_.exports.export_plots("svg", tmp_path / "svg")
    svg = (tmp_path / "svg" / "links.svg").read_text()
    assert files and all(f"l{i} → switch" in svg for i in range(9)) and "more: colours" not in svg
    assert len(legend_labels(view)) == 4  # the screen's legend is back after the export


def test_select_all_and_copy_act_on_the_list_not_the_canvas(make_window, qtbot):
    """The window's Edit shortcuts act on the canvas; with the links list focused, Ctrl+A selected every
    component on the canvas and Ctrl+C copied the canvas's selection as JSON."""
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    project = dgx_project()
    w = make_window(project, size=(1280, 720), persist=False)
    w.results.show_record(prepare_record(project, many_links(6), 0.5))
    w.results.flush()
    view = w.results.links
    w.results.tabs.setCurrentWidget(view)
    child = w.doc.project.hardware.children[0].name
    w.selection.select([f"{w.doc.project.hardware.name}/{child}"])  # a component chosen on the canvas
    chosen, before = list(w.selection.paths), w.doc.project
    assert chosen
    view.list.setFocus()
    ctrl = Qt.KeyboardModifier.ControlModifier
    QTest.keyClick(view.list, Qt.Key.Key_A, ctrl)
    assert view.selected() == list(range(6)) and len(view.curves) == 6 and w.selection.paths == chosen
    QApplication.clipboard().setText("")
    view.list.selectionModel().select(view.model.index(4), QItemSelectionModel.SelectionFlag.Deselect)
    QTest.keyClick(view.list, Qt.Key.Key_C, ctrl)
    expected = "".join(f"{90 - 10 * i:.1f} %\tsys/l{i} → sys/switch\n" for i in (0, 1, 2, 3, 5))  # many_links' loads
    assert QApplication.clipboard().text() == expected
    assert w.doc.project is before and not w.doc.is_dirty


def test_the_name_filter_narrows_the_list_and_keeps_the_chosen_links(qtbot):
    view = LinksView(TimeCursor())
    qtbot.addWidget(view)
    links = [Series(f"sys/die[{i % 2},0]/l{i} → sys/die[{i % 2},0]/r{i}", "fraction", [0.0], [0.9 - 0.1 * i], 1.0)
             for i in range(8)]  # die[0,0]: l0, l2, l4, l6; die[1,0]: l1, l3, l5, l7
    view.set_result(dataclasses.replace(tiny_result(), link_utilisation=links))
    view.list.selectionModel().select(view.model.index(2), QItemSelectionModel.SelectionFlag.ClearAndSelect)
    assert names(view) == [links[2].name]
    view.name_filter.setText("DIE[0,0]")  # any case
    assert [s.name for s, _ in view.ranked] == [links[i].name for i in (0, 2, 4, 6)]
    assert names(view) == [links[2].name] and len(view.curves) == 1  # still listed: still chosen
    assert "4 of 8 links</b> named “DIE[0,0]”" in view.heading.text() and "named “DIE[0,0]”" in view.export_title()
    view.name_filter.setText("die[1,0]")  # l2 is not listed: the busiest four of the rest
    assert names(view) == [links[i].name for i in (1, 3, 5, 7)]
    view.name_filter.setText("no such link")
    assert view.model.rowCount() == 0 and view.curves == [] and "0 of 8 links" in view.heading.text()
    view.name_filter.clear()
    assert view.model.rowCount() == 8
    view.name_filter.setText("l3")
    view.set_result(None)  # another project: no filter carried over to its links
    assert view.name_filter.text() == ""


def test_the_links_tab_fits_a_1024_by_640_window(make_window, qtbot):
    """A wafer run's Links tab (list, plot, readout and the DRAM ports' table) within the results dock of a
    1024 × 640 window: its minimum height made the window 649 px tall."""
    from tilewright.engine.io import load_project
    from tilewright.engine.simulate import simulate

    project = load_project("presets/projects/palm-wafer-t18b.json")
    w = make_window(project, size=(1024, 640), persist=False)
    result = simulate(project)
    w.results.show_record(prepare_record(project, result, 0.1))
    w.results.flush()
    w.results.tabs.setCurrentWidget(w.results.links)
    qtbot.wait(50)
    assert w.results.links.traffic.isVisible() and w.results.links.model.rowCount() > 1000
    assert (w.width(), w.height()) == (1024, 640)
