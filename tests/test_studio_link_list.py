"""The links list is a model: each row's text and tooltip made when asked, the plotted rows carrying
their curve's colour, and the selection driving the plot."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QItemSelectionModel, Qt  # noqa: E402
from PySide6.QtGui import QIcon  # noqa: E402
from tilewright.studio.model.run_record import prepare_record  # noqa: E402
from tilewright.studio.samples import dgx_project  # noqa: E402
from tilewright.studio.ui.results.links_view import LinksView  # noqa: E402
from tilewright.studio.ui.results.synthetic import tiny_result  # noqa: E402
from tilewright.studio.ui.results.time_cursor import TimeCursor  # noqa: E402

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
    assert model.index(0).data(ICON) is None and isinstance(model.index(1).data(ICON), QIcon)

    view.set_result(None)
    assert model.rowCount() == 0 and view.curves == [] and view.selected() == []
