"""Property editors that validate as you type and show the reason for a refusal beside the field.

An editor never touches the model: it parses the text (with units), asks a ``check`` callback whether
the model would accept the value (the inspector runs the full pydantic validation there), and only emits
``committed`` with an accepted value when editing finishes. A refused value leaves the model as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QLabel, QLineEdit, QVBoxLayout, QWidget
from tilewright.studio.units import Unit, UnitError, format_value, parse_value

Check = Callable[[Any], str | None]  # None when the value is accepted, else the reason

ERROR_STYLE = "color: #c0392b;"
BAD_EDIT_STYLE = "QLineEdit { border: 1px solid #c0392b; background: #fdedec; }"


class _Editor(QWidget):
    """Common part: the input widget on top, the reason (hidden when there is none) under it."""

    committed = Signal(object)

    def __init__(self, check: Check, parent: QWidget | None = None):
        super().__init__(parent)
        self.check = check
        self.error_label = QLabel(self)
        self.error_label.setStyleSheet(ERROR_STYLE)
        self.error_label.setWordWrap(True)
        self.error_label.hide()
        self._box = QVBoxLayout(self)
        self._box.setContentsMargins(0, 0, 0, 0)
        self._box.setSpacing(1)

    @property
    def error(self) -> str:
        return self.error_label.text() if not self.error_label.isHidden() else ""

    def show_error(self, reason: str | None) -> None:
        self.error_label.setText(reason or "")
        self.error_label.setVisible(bool(reason))


class ValueEditor(_Editor):
    """A text field for a number with a unit ("2 TB/s"), a count, or plain text (a name)."""

    def __init__(
        self,
        value: Any,
        unit: Unit | None,
        check: Check,
        optional: bool = False,
        parent: QWidget | None = None,
    ):
        super().__init__(check, parent)
        self.unit = unit
        self.optional = optional
        self.value = value
        self.line_edit = QLineEdit(self)
        if optional:
            self.line_edit.setPlaceholderText("not set")
        if unit is not None and unit.symbol:
            # The value shows its unit already; the tooltip teaches the syntax.
            self.line_edit.setToolTip(
                f"in {unit.symbol}, e.g. {unit.example}; prefixes k, M, G, T, P (and KiB, MiB, GiB) work"
                + ("; empty means not set" if optional else "")
            )
        self._box.addWidget(self.line_edit)
        self._box.addWidget(self.error_label)
        self._edited = False
        self.set_value(value)
        self.line_edit.textEdited.connect(self._on_edited)
        self.line_edit.editingFinished.connect(self._on_finished)

    def display(self, value: Any) -> str:
        if value is None:
            return ""
        if self.unit is None:
            return str(value)
        return format_value(float(value), self.unit, digits=6)

    def set_value(self, value: Any) -> None:
        """Show the model's value (after an undo, say) unless the user is midway through typing."""
        self.value = value
        if self.line_edit.hasFocus() and self._edited:
            return
        self.line_edit.setText(self.display(value))
        self._edited = False
        self._mark(None)

    def parse(self, text: str) -> Any:
        text = text.strip()
        if not text and self.optional:
            return None
        if self.unit is None:
            return text
        number = parse_value(text, self.unit)
        return int(number) if self.unit.integer else number

    def evaluate(self, text: str) -> tuple[Any, str | None]:
        try:
            value = self.parse(text)
        except UnitError as exc:
            return None, str(exc)
        return value, self.check(value)

    def _mark(self, reason: str | None) -> None:
        self.show_error(reason)
        self.line_edit.setStyleSheet(BAD_EDIT_STYLE if reason else "")

    def _on_edited(self, text: str) -> None:
        self._edited = True
        self._mark(self.evaluate(text)[1])

    def _on_finished(self) -> None:
        if not self._edited:
            return
        value, reason = self.evaluate(self.line_edit.text())
        self._mark(reason)
        if reason is None:
            self._edited = False
            if value != self.value:
                self.committed.emit(value)

    def type_and_commit(self, text: str) -> None:
        """What a user does: type ``text`` and press Enter (used by tests and scripted demos)."""
        self.line_edit.setFocus()
        self.line_edit.setText(text)
        self._on_edited(text)
        self._on_finished()


class ChoiceEditor(_Editor):
    """A fixed set of values (kind, topology); a refused choice snaps back and says why."""

    def __init__(self, value: str, choices: list[str], check: Check, parent: QWidget | None = None):
        super().__init__(check, parent)
        self.value = value
        self.combo = QComboBox(self)
        self.combo.addItems(choices)
        self.combo.setCurrentText(value)
        self._box.addWidget(self.combo)
        self._box.addWidget(self.error_label)
        self.combo.activated.connect(self._on_chosen)

    def set_value(self, value: str) -> None:
        self.value = value
        self.combo.setCurrentText(value)
        self.show_error(None)

    def _on_chosen(self, _index: int) -> None:
        chosen = self.combo.currentText()
        if chosen == self.value:
            return
        reason = self.check(chosen)
        if reason:
            self.combo.setCurrentText(self.value)
            self.show_error(f"{chosen}: {reason}")
            return
        self.show_error(None)
        self.committed.emit(self.model_value(chosen))

    def model_value(self, chosen: str) -> object:
        """What the model holds for the combo's text (the text itself here)."""
        return chosen


class FlagEditor(_Editor):
    def __init__(self, value: bool, text: str, check: Check, parent: QWidget | None = None):
        super().__init__(check, parent)
        self.value = value
        self.box = QCheckBox(text, self)
        self.box.setChecked(value)
        self._box.addWidget(self.box)
        self._box.addWidget(self.error_label)
        self.box.clicked.connect(self._on_clicked)

    def set_value(self, value: bool) -> None:
        self.value = value
        self.box.setChecked(value)

    def _on_clicked(self, checked: bool) -> None:
        reason = self.check(checked)
        if reason:
            self.box.setChecked(self.value)
            self.show_error(reason)
            return
        self.show_error(None)
        self.committed.emit(checked)


EDGE_CHOICES = ["local", "west", "east", "north", "south", "west, east", "north, south", "west, east, north, south"]


def edges_text(edges: list[str] | None) -> str:
    """["west", "east"] → "west, east"; no edges → "local" (the memory sits in every instance)."""
    return ", ".join(edges) if edges else "local"


def text_edges(text: str) -> list[str]:
    return [] if text == "local" else [e.strip() for e in text.split(",")]


class EdgesEditor(ChoiceEditor):
    """Which edges of the child grid carry a memory's ports (DRAM on the west and east die edges, say):
    the model holds a list of edges, the editor offers the usual sets by name."""

    def __init__(self, value: list[str], check: Check, parent: QWidget | None = None):
        text = edges_text(value)
        choices = EDGE_CHOICES if text in EDGE_CHOICES else [*EDGE_CHOICES, text]
        super().__init__(text, choices, lambda chosen: check(text_edges(chosen)), parent)

    def set_value(self, value: list[str]) -> None:  # type: ignore[override]
        text = edges_text(value)
        if self.combo.findText(text) < 0:
            self.combo.addItem(text)
        super().set_value(text)

    def model_value(self, chosen: str) -> object:
        return text_edges(chosen)
