"""The editors the mapping options need beyond ``studio.ui.fields``: text typed in a short form the model
holds as a list (a pipeline layout, names, a pair of layer counts), and a choice shown in words while the
model holds a bare value. Like every editor they never touch the model: they parse, ask ``check``, and emit
``committed`` with an accepted value, which ``MappingOptions`` pushes as one undo command."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QComboBox, QWidget
from tilewright.engine.ir.mapping import format_pipeline_layout, parse_pipeline_layout
from tilewright.studio.ui.fields import Check, ChoiceEditor, ValueEditor


class LayoutEditor(ValueEditor):
    """``mapping.pipeline_layers`` typed in its short form ("1,2*30,0"); empty means an even split."""

    def __init__(self, value: list[int] | None, check: Check, parent: QWidget | None = None):
        super().__init__(value, None, check, optional=True, parent=parent)
        self.line_edit.setPlaceholderText("even split")

    def display(self, value: Any) -> str:
        return format_pipeline_layout(value) if value else ""

    def evaluate(self, text: str) -> tuple[Any, str | None]:
        if not text.strip():
            return None, self.check(None)
        try:
            value = parse_pipeline_layout(text)
        except ValueError as exc:
            return None, str(exc)
        return value, self.check(value)


class NamesEditor(ValueEditor):
    """A list of names typed comma-separated ("layernorm,moe_act": ``mapping.recompute_modules``,
    ``mapping.cuda_graph_scope``); empty: None, the default the placeholder names."""

    def __init__(self, value: list[str] | None, placeholder: str, check: Check, parent: QWidget | None = None):
        super().__init__(value, None, check, optional=True, parent=parent)
        self.line_edit.setPlaceholderText(placeholder)

    def display(self, value: Any) -> str:
        return ",".join(value) if value else ""

    def evaluate(self, text: str) -> tuple[Any, str | None]:
        value = [part.strip() for part in text.split(",") if part.strip()] or None
        return value, self.check(value)


class LayerPairEditor(ValueEditor):
    """Two layer counts typed "first,last" (``mapping.formats.bf16_first_layers`` / ``bf16_last_layers``); empty:
    none, the default."""

    def __init__(self, value: list[int] | None, check: Check, parent: QWidget | None = None):
        super().__init__(value, None, check, optional=True, parent=parent)
        self.line_edit.setPlaceholderText("none")

    def display(self, value: Any) -> str:
        return f"{value[0]},{value[1]}" if value else ""

    def evaluate(self, text: str) -> tuple[Any, str | None]:
        if not text.strip():
            return None, self.check(None)
        parts = [p.strip() for p in text.split(",")]
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            return None, "type two layer counts, first,last (\"1,1\"), or leave it empty"
        value = [int(p) for p in parts]
        return value, self.check(value)


class LabelledChoice(ChoiceEditor):
    """A choice shown in words ("deepep (node by node)") while the model holds the bare value ("deepep")."""

    def __init__(self, value: str, labels: dict[str, str], check: Check, parent: QWidget | None = None):
        self.labels = labels
        super().__init__(labels[value], list(labels.values()), lambda text: check(self.model_value(text)), parent)

    def set_value(self, value: str) -> None:
        super().set_value(self.labels[value])

    def model_value(self, chosen: str) -> object:
        return next(value for value, text in self.labels.items() if text == chosen)


def compact(combo: QComboBox) -> None:
    """Let the combo shrink to the dock's width (1280 × 720) instead of widening the panel to its longest item."""
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    combo.setMinimumContentsLength(8)
