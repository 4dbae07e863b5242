"""The results headline: one line of facts (``a · b · c``) that, when the dock is narrower than the line,
drops whole facts from the end and shows ``…`` — never a number cut from its unit (at 1280 × 720 an
out-of-memory headline ended in "peak r"). ``text()`` is the whole line (what Copy and readers want),
``shown_text()`` the part on screen; the results panel puts the whole line in the tooltip."""

from __future__ import annotations

from PySide6.QtGui import QResizeEvent, QTextDocument
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

SEPARATOR = " · "
ELLIPSIS = " · …"


class HeadlineLabel(QLabel):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._full = ""
        self._shown_for = -1
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # never widens the window
        self.setMinimumWidth(10)

    def text(self) -> str:  # noqa: D102 - the whole headline, not the part shown
        return self._full

    def shown_text(self) -> str:
        return super().text()

    def setText(self, text: str) -> None:  # noqa: N802 - Qt override
        self._full = text
        self._shown_for = -1
        self._fit()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._fit()

    def _width_of(self, text: str) -> float:
        doc = QTextDocument()
        doc.setDefaultFont(self.font())
        doc.setDocumentMargin(0)
        doc.setHtml(text)
        return doc.idealWidth()

    def _fit(self) -> None:
        width = self.contentsRect().width()
        if width == self._shown_for:
            return
        self._shown_for = width
        text = self._full
        facts = text.split(SEPARATOR)
        if len(facts) > 1 and self._width_of(text) > width:
            kept = len(facts) - 1
            while kept > 1 and self._width_of(SEPARATOR.join(facts[:kept]) + ELLIPSIS) > width:
                kept -= 1
            text = SEPARATOR.join(facts[:kept]) + ELLIPSIS
        super().setText(text)
