"""Copy and paste of components, through the same JSON the project files use (so a component copied
from one project pastes into another, or into a text editor, unchanged).

The clipboard gets plain text via ``setText``: Qt then owns a QMimeData it made itself. Handing it a
QMimeData made in Python (``setMimeData``) leaves Qt's global clipboard holding a Python wrapper that
it deletes after the interpreter has shut down, which crashes CPython at exit."""

from __future__ import annotations

import json

from pydantic import ValidationError
from PySide6.QtWidgets import QApplication
from tilewright.engine.ir.hardware import Component
from tilewright.studio.tree_edit import EditRefused

MIME = "application/x-tilewright-components"


def copy_components(components: list[Component]) -> None:
    text = json.dumps([c.model_dump(mode="json") for c in components], indent=2)
    QApplication.clipboard().setText(text)


def pasted_components() -> list[Component]:
    """Components on the clipboard (ours, or JSON text of one component or a list); none if not ours."""
    mime = QApplication.clipboard().mimeData()
    if mime is None:
        return []
    if mime.hasFormat(MIME):
        raw = bytes(mime.data(MIME).data()).decode("utf-8")
    elif mime.hasText():
        raw = mime.text()
    else:
        return []
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        return []
    items = data if isinstance(data, list) else [data]
    try:
        return [Component.model_validate(item) for item in items]
    except ValidationError as exc:
        raise EditRefused(f"clipboard: not a component ({exc.errors()[0].get('msg', 'invalid')})") from None
