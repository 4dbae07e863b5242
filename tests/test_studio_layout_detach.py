"""A widget taken out of a nested layout leaves no live PySide wrapper over its deleted layout item.

PySide wraps the items of a layout added with ``addLayout`` and keeps those wrappers as children of the
outer layout. When Qt deleted such an item (its widget reparented or deleted), the wrapper stayed
registered at the freed address, and a later C++ object allocated there came back to Python as a
``QWidgetItem``: in a full CI run, a ``PlotItem`` walking its menu's ``children()`` failed with
"'QWidgetItem' object has no attribute 'children'". Releasing the timeline did exactly that to its plot.
"""

from __future__ import annotations

import gc
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
import shiboken6  # noqa: E402
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSplitter, QVBoxLayout, QWidget, QWidgetItem  # noqa: E402
from tilewright.studio.ui.layout_detach import detach_widget  # noqa: E402

from tests.result_panels import filled_panel  # noqa: E402


def all_item_wrappers() -> list[QWidgetItem]:
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, QWidgetItem)]


def item_wrappers(widgets: list[QWidget], before: list[QWidgetItem]) -> list[QWidgetItem]:
    """The Python wrappers made since ``before`` for the layout items of ``widgets`` (looked up, none
    created). Only new ones are asked for their widget: an older wrapper may sit over freed memory."""
    old = {id(o) for o in before}
    wanted = {id(w) for w in widgets}
    return [o for o in all_item_wrappers() if id(o) not in old and id(o.widget()) in wanted]


@pytest.fixture
def nested(qapp):
    """A label in a row layout added to its parent's layout after the label: PySide wraps its item. All is
    deleted at once afterwards, so a wrapper left over a freed item (the bug) cannot reach a later test."""
    before = all_item_wrappers()
    parent = QWidget()
    outer = QVBoxLayout(parent)
    row = QHBoxLayout()
    label = QLabel("plot")
    row.addWidget(label)
    row.addWidget(QLabel("scroll bar"))
    outer.addLayout(row)
    yield parent, row, label, before
    for widget in (label, parent):
        if shiboken6.isValid(widget):
            shiboken6.delete(widget)


def test_detaching_from_a_nested_layout_invalidates_the_items_wrapper(nested):
    parent, row, label, before = nested
    wrappers = item_wrappers([label], before)
    assert wrappers, "PySide no longer wraps the items of an added layout: the hazard this guards is gone"
    detach_widget(label)
    assert row.count() == 1 and row.indexOf(label) == -1  # Qt took the item out (and deleted it) ...
    assert label.parentWidget() is None
    assert not any(shiboken6.isValid(w) for w in wrappers)  # ... and no wrapper is left registered over it


def test_detaching_keeps_the_rest_of_the_layout(nested):
    parent, row, label, before = nested
    (other,) = [w for w in parent.findChildren(QLabel) if w is not label]
    wrappers = item_wrappers([other], before)
    detach_widget(label)
    assert row.indexOf(other) == 0 and other.parentWidget() is parent
    assert wrappers and all(shiboken6.isValid(w) for w in wrappers)  # the neighbour's item is still alive


def test_a_widget_outside_any_layout_is_only_unparented(qtbot):
    splitter = QSplitter()
    qtbot.addWidget(splitter)
    first, second = QLabel("a"), QLabel("b")
    splitter.addWidget(first)
    splitter.addWidget(second)
    detach_widget(first)
    assert first.parentWidget() is None and splitter.count() == 1 and splitter.widget(0) is second
    qtbot.addWidget(first)


def test_released_result_plots_leave_no_wrapper_over_a_deleted_layout_item(qtbot):
    before = all_item_wrappers()
    panel = filled_panel(qtbot)
    plots = [panel.gantt.plot_widget, panel.links.plot_widget, panel.memory.plot_widget]
    wrappers = item_wrappers(plots, before)
    assert wrappers  # the timeline's plot sits in a nested layout (beside its lane scroll bar)
    panel.release()
    assert not any(shiboken6.isValid(w) for w in wrappers)
    assert not any(shiboken6.isValid(p) for p in plots)  # the plots themselves were deleted, as before
