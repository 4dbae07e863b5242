"""Take a widget out of its parent's layouts through PySide, so no Python wrapper outlives its layout item.

PySide wraps layout items behind our back: ``QBoxLayout.addLayout`` (and ``insertLayout``, the grid's
``addLayout``, ``QLayout.itemAt``) creates a Python wrapper for every item already in the added layout and
keeps it alive as a child of the outer layout (PySide's ``addLayoutOwnership``). A plain ``QWidgetItem``
tells PySide nothing when Qt deletes it, and Qt does delete it when its widget is reparented or deleted
(``QLayout`` removes the widget and deletes its item). The wrapper then stays registered at the freed
address for as long as the outer layout lives; the next C++ object allocated there and handed to Python
(a child pyqtgraph's ``PlotItem`` walks with ``children()`` while it builds its menu) comes back as that
``QWidgetItem``: ``AttributeError: 'QWidgetItem' object has no attribute 'children'``, or a crash.

``QLayout.removeWidget`` called from Python runs PySide's ``removeLayoutOwnership`` first: it invalidates
and unregisters the item's wrapper, then Qt deletes the item. So a widget is detached that way before it
is reparented or deleted.
"""

from __future__ import annotations

from PySide6.QtWidgets import QLayout, QWidget


def detach_widget(widget: QWidget) -> None:
    """Remove ``widget`` from the layout (at any depth) of its parent that holds it, then unparent it."""
    parent = widget.parentWidget()
    top = parent.layout() if parent is not None else None
    if top is not None:
        for layout in [top, *top.findChildren(QLayout)]:
            if layout.indexOf(widget) >= 0:
                layout.removeWidget(widget)
    widget.setParent(None)
