"""Demo mode: a play button and a time scrubber that animate the last run on the canvas.

Playing moves the shared time cursor (``TimeCursor``, owned by the main window, followed by the Gantt
and the plots too) along the iteration on a GUI-thread ``QTimer``; the canvas recolours at each move —
tiles light up while they compute, links glow with their traffic. The per-frame work is a few numpy
lookups and one recolour (see ``OverlayController.refresh``), so it keeps up at ``FPS`` on a wafer.
The overlay choice (stages, heat at the cursor, heat averaged) sits here too, next to the controls.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QBoxLayout, QComboBox, QHBoxLayout, QLabel, QSlider, QToolButton, QWidget
from tilewright.engine.results.result import Result
from tilewright.studio.model.core_grid import op_uses
from tilewright.studio.model.link_carriage import LinkCarriage
from tilewright.studio.model.metrics import time_span
from tilewright.studio.ui.canvas.overlay_controller import Overlay, OverlayController
from tilewright.studio.ui.results.time_cursor import TimeCursor
from tilewright.studio.units import SECONDS, format_value

FPS = 30
LOOP_SECONDS = 12.0  # one iteration plays in this many wall seconds, whatever its simulated length
SLIDER_STEPS = 1000
SLIDER_MIN_PX = 100  # the scrubber stays draggable next to the op chooser in a 1280 × 720 window
OP_TIP = "after a run on a grid device: which cores this op uses, how A and B are multicast"
OP_CHARS = 15  # the op chooser's width in characters (its popup and tooltip hold the whole descriptions);
# 18 left the hierarchy dock too narrow for its names at 1280 × 720 (the canvas took 734 px)
MODES = [(Overlay.stages, "Pipeline stages"), (Overlay.experts, "Expert groups"), (Overlay.context, "Context rings"),
         (Overlay.cursor, "Heat at cursor"), (Overlay.average, "Heat averaged"),
         (Overlay.traffic, "Link traffic"), (Overlay.off, "Plain")]


class DemoBar(QWidget):
    playingChanged = Signal(bool)
    opChosen = Signal(object)  # the CoreUse of the op chosen in the chooser, or None

    def __init__(self, overlay: OverlayController, parent: QWidget | None = None):
        super().__init__(parent)
        self.overlay = overlay
        self.cursor = TimeCursor(self)
        self.timer = QTimer(self)
        self.timer.setInterval(1000 // FPS)
        self.timer.timeout.connect(self.step)
        self.play_button = QToolButton(self)
        self.play_button.setCheckable(True)
        self.play_button.setToolTip("play the run on the canvas (Space)")
        self.play_button.toggled.connect(self.set_playing)
        self.slider = QSlider(Qt.Orientation.Horizontal, self)
        self.slider.setRange(0, SLIDER_STEPS)
        self.slider.setToolTip("time in the iteration: drag to scrub")
        self.slider.valueChanged.connect(self._scrubbed)
        self.slider.setMinimumWidth(SLIDER_MIN_PX)
        self.time_label = QLabel(self)
        self.time_label.setMinimumWidth(self.fontMetrics().horizontalAdvance("t = 888 ms of 888 ms") + 8)
        self.mode_box = QComboBox(self)
        for mode, text in MODES:
            self.mode_box.addItem(text, mode)
        self.mode_box.setToolTip("what the canvas colours show")
        self.mode_box.currentIndexChanged.connect(lambda _i: overlay.set_mode(self.mode_box.currentData()))
        self.op_label = QLabel("op:", self)
        self.op_box = QComboBox(self)
        self.op_box.setToolTip(OP_TIP)
        self.op_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.op_box.setMinimumContentsLength(OP_CHARS)
        self.op_box.currentIndexChanged.connect(self._op_chosen)
        # Two halves, side by side, or one above the other where the canvas is narrower than both: with a grid
        # device's op chooser one row needs ~710 px, and a 1024-px window grew to 1,115 px around it (the
        # inspector squeezed to its 84-px minimum) to give the canvas that width.
        self.choices = QHBoxLayout()
        self.choices.addWidget(QLabel("Show:", self))
        self.choices.addWidget(self.mode_box)
        self.choices.addSpacing(12)
        self.choices.addWidget(self.op_label)
        self.choices.addWidget(self.op_box)
        self.choices.addStretch(0)
        self.player = QHBoxLayout()
        self.player.addWidget(self.play_button)
        self.player.addWidget(self.slider, 1)
        self.player.addWidget(self.time_label)
        self.rows = QBoxLayout(QBoxLayout.Direction.LeftToRight, self)
        self.rows.setContentsMargins(6, 2, 6, 2)
        self.rows.setSpacing(12)
        self.rows.addLayout(self.choices)
        self.rows.addLayout(self.player, 1)
        self.set_time_cursor(self.cursor)
        overlay.resultChanged.connect(self._update_enabled)
        self._update_enabled()

    # -- one row or two -----------------------------------------------------------------------------
    def _one_row_width(self) -> int:
        margins = self.rows.contentsMargins()
        return (self.choices.minimumSize().width() + self.rows.spacing() + self.player.minimumSize().width()
                + margins.left() + margins.right())

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        """As narrow as the wider half: below one row's width the halves stack (``resizeEvent``)."""
        hint = super().minimumSizeHint()
        margins = self.rows.contentsMargins()
        half = max(self.choices.minimumSize().width(), self.player.minimumSize().width())
        return QSize(half + margins.left() + margins.right(), hint.height())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self.fit_rows(event.size().width())

    def fit_rows(self, width: int) -> None:
        """One row where ``width`` holds both halves at their minimum, else the scrubber under the choices."""
        direction = (QBoxLayout.Direction.LeftToRight if width >= self._one_row_width()
                     else QBoxLayout.Direction.TopToBottom)
        if self.rows.direction() != direction:
            self.rows.setDirection(direction)
            self.updateGeometry()  # the canvas above gives the bar its new height

    @property
    def stacked(self) -> bool:
        return self.rows.direction() == QBoxLayout.Direction.TopToBottom

    # -- wiring -------------------------------------------------------------------------------------
    def set_time_cursor(self, cursor: TimeCursor) -> None:
        """Follow ``cursor`` (the main window's, shared with the plots) instead of a private one."""
        if cursor is not self.cursor:
            self.cursor.moved.disconnect(self._cursor_moved)
            self.cursor = cursor
        cursor.moved.connect(self._cursor_moved)
        self._cursor_moved(cursor.position)

    def show_result(self, result: Result | None, carriage: LinkCarriage | None = None) -> None:
        """A run finished: heat becomes available, the cursor spans the iteration."""
        self.set_playing(False)
        if result is not None and time_span(result) > 0 and self.cursor.span != time_span(result):
            self.cursor.set_span(time_span(result))
        self.overlay.set_result(result, carriage)
        self._cursor_moved(self.cursor.position)

    def set_mode(self, mode: Overlay) -> None:
        self.mode_box.setCurrentIndex([m for m, _ in MODES].index(mode))

    # -- playing ------------------------------------------------------------------------------------
    @property
    def span(self) -> float:
        return time_span(self.overlay.result) if self.overlay.result is not None else 0.0

    @property
    def playing(self) -> bool:
        return self.timer.isActive()

    def set_playing(self, on: bool) -> None:
        on = on and self.span > 0
        if on and self.overlay.mode is not Overlay.cursor:
            self.set_mode(Overlay.cursor)  # playing means watching the heat move
        if on and not self.timer.isActive():
            if self.cursor.position >= self.span:
                self.cursor.move_to(0.0)
            self.timer.start()
        elif not on:
            self.timer.stop()
        self.play_button.blockSignals(True)
        self.play_button.setChecked(on)
        self.play_button.blockSignals(False)
        self.play_button.setText("❚❚ Pause" if on else "▶ Play")
        self.playingChanged.emit(on)

    def step(self) -> None:
        """One frame: move the cursor on; wrap at the end of the iteration."""
        span = self.span
        if span <= 0:
            self.set_playing(False)
            return
        t = self.cursor.position + span / (LOOP_SECONDS * FPS)
        self.cursor.move_to(0.0 if t > span else t)

    # -- followers ----------------------------------------------------------------------------------
    def _scrubbed(self, value: int) -> None:
        if self.span > 0:
            if self.overlay.mode is not Overlay.cursor:
                self.set_mode(Overlay.cursor)  # scrubbing means looking at a moment
            self.cursor.move_to(self.span * value / SLIDER_STEPS)

    def _cursor_moved(self, t: float) -> None:
        span = self.span
        self.slider.blockSignals(True)
        self.slider.setValue(round(SLIDER_STEPS * t / span) if span > 0 else 0)
        self.slider.blockSignals(False)
        self.time_label.setText(
            f"t = {format_value(t, SECONDS)} of {format_value(span, SECONDS)}" if span > 0 else "no run yet (F5)"
        )
        self.overlay.set_time(t)

    def _fill_ops(self) -> None:
        """List the run's spatial splits (grid devices only); the bar hides the chooser otherwise."""
        result = self.overlay.result
        rows = result.spatial_splits if result is not None else []
        self.op_box.blockSignals(True)
        self.op_box.clear()
        self.op_box.addItem("none", None)
        for text, use in op_uses(self.overlay.doc.project, rows) if rows else []:
            self.op_box.addItem(text, use)
            self.op_box.setItemData(self.op_box.count() - 1, text, Qt.ItemDataRole.ToolTipRole)
        self.op_box.blockSignals(False)
        has_ops = self.op_box.count() > 1
        self.op_label.setVisible(has_ops)
        self.op_box.setVisible(has_ops)
        self.opChosen.emit(None)  # a new run (or none): no op chosen yet

    def _op_chosen(self, _index: int) -> None:
        chosen = self.op_box.currentData()
        self.op_box.setToolTip(self.op_box.currentText() if chosen is not None else OP_TIP)  # the whole text
        self.overlay.set_core_use(self.op_box.currentData())
        self.opChosen.emit(self.op_box.currentData())

    def _update_enabled(self) -> None:
        self._fill_ops()
        has_run = self.span > 0
        for w in (self.play_button, self.slider):
            w.setEnabled(has_run)
        for i, (mode, _text) in enumerate(MODES):
            item = self.mode_box.model().item(i)  # type: ignore[attr-defined]
            item.setEnabled(has_run or mode in (Overlay.stages, Overlay.experts, Overlay.context, Overlay.off))
        if not has_run and self.overlay.mode in (Overlay.cursor, Overlay.average, Overlay.traffic):
            self.set_mode(Overlay.stages)
        self.set_playing(False)

    def set_presentation(self, on: bool) -> None:
        """Bigger targets for a talk: the play button and scrubber are what the presenter reaches for."""
        self.play_button.setMinimumHeight(36 if on else 0)
        self.slider.setMinimumHeight(30 if on else 0)
