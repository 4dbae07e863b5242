"""The Gantt's left axis: one label per row (lane names and group headers), thinned so labels never
overlap when many lanes share little height, and elided in the middle to the axis width (pyqtgraph
silently drops a label that does not fit)."""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics
from tilewright.studio.model.gantt_data import Row

LINE_PX = 15  # height a label needs
TEXT_MARGIN_PX = 16  # tick length and padding beside a label
SLACK_PX = 14  # pyqtgraph's own tick-text offset, so the longest label fits whole
MIN_PX, MAX_PX = 150, 320


def label_stride(rows: float, pixels: float) -> int:
    """Label every ``stride``-th lane: 1 when each of ``rows`` rows in ``pixels`` has room for its label."""
    px_per_row = pixels / max(rows, 1e-9)
    return max(1, math.ceil(LINE_PX / max(px_per_row, 1e-9)))


class LaneAxis(pg.AxisItem):
    def __init__(self) -> None:
        super().__init__("left")
        self.rows: list[Row] = []
        self.setWidth(MIN_PX)
        self.enableAutoSIPrefix(False)

    def set_rows(self, rows: list[Row]) -> None:
        """New rows; the axis takes the width of its longest label, within ``MIN_PX``–``MAX_PX``."""
        self.rows = rows
        metrics = QFontMetrics(self.style.get("tickFont") or self.font())
        longest = max((metrics.horizontalAdvance(r.text) for r in rows), default=0)
        self.setWidth(min(MAX_PX, max(MIN_PX, longest + TEXT_MARGIN_PX + SLACK_PX)))
        self.picture = None
        self.update()

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, list[float]]]:  # noqa: N802, N803
        if not self.rows or size <= 0:
            return []
        minVal, maxVal = min(minVal, maxVal), max(minVal, maxVal)  # noqa: N806 (the Gantt's y axis is inverted)
        lo, hi = max(0, math.ceil(minVal)), min(len(self.rows) - 1, math.floor(maxVal))
        if hi < lo:
            return []
        stride = label_stride(maxVal - minVal, size)
        headers = [float(r) for r in range(lo, hi + 1) if self.rows[r].is_header]
        lanes = [float(r) for r in range(lo, hi + 1) if not self.rows[r].is_header and (r - lo) % stride == 0]
        if stride > 1:  # a header wins over a lane label it would collide with
            lanes = [v for v in lanes if all(abs(v - h) >= stride for h in headers)]
        return [(1.0, headers + lanes)]

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:  # noqa: N802
        font = self.style.get("tickFont") or self.font()
        metrics = QFontMetrics(font)
        room = max(20, int(self.width()) - TEXT_MARGIN_PX)
        out = []
        for v in values:
            r = int(round(v))
            text = self.rows[r].text if 0 <= r < len(self.rows) else ""
            out.append(metrics.elidedText(text, Qt.TextElideMode.ElideMiddle, room))
        return out
