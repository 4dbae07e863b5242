"""The key to the canvas colours, floating in the view's top-right corner: pipeline stages with the
layers each holds, or the heat scale in percent with what it measures and when."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget
from tilewright.studio.ui.canvas import style
from tilewright.studio.ui.canvas.overlay_controller import Overlay, OverlayController

MAX_STAGE_ROWS = 12  # per column; two columns, then "… and N more"
MARGIN = 10


def _swatch(color: str) -> str:
    return f"<span style='background:{color}; color:{color}'>&nbsp;&nbsp;&nbsp;&nbsp;</span>"


def stage_legend(overlay: OverlayController) -> str:
    layout = overlay.layout
    if layout.problem:
        return f"<b>Pipeline stages</b><br><span style='color:#c0392b'>no placement: {layout.problem}</span>"
    m = overlay.doc.project.mapping
    how = "placed by hand" if layout.explicit else f"{m.placement.value} placement"
    per_stage = m.tp * m.dp
    each = f"{per_stage} {'device' if per_stage == 1 else 'devices'} each (tp {m.tp} × dp {m.dp})"
    head = (f"<b>Pipeline stages</b> · {layout.stages}<br>"
            f"<span style='color:#566573'>{each}<br>{how} · L = model layers</span>")
    rows = [f"{_swatch(style.stage_color(s).name())}&nbsp;{s}&nbsp;&nbsp;{layout.label(s)}"
            for s in range(layout.stages)]
    shown = rows[: 2 * MAX_STAGE_ROWS]
    columns = [shown[i : i + MAX_STAGE_ROWS] for i in range(0, len(shown), MAX_STAGE_ROWS)]
    cells = "".join(f"<td style='padding-right:10px'>{'<br>'.join(col)}</td>" for col in columns)
    more = f"<br>… and {len(rows) - len(shown)} more stages" if len(rows) > len(shown) else ""
    return f"{head}<table><tr>{cells}</tr></table>{more}"


NOTE_COLOUR = "#b9770e"  # what the run does not report: amber, like the status bar's warnings


def heat_legend(overlay: OverlayController) -> str:
    frame = overlay.frame
    when = frame.label if frame is not None else ""
    notes = frame.notes if frame is not None else []
    no_links = any("link" in n for n in notes)
    steps = 10
    ramp = "".join(
        f"<td width=16 style='background:{style.heat_color(i / steps).name()}'>&nbsp;</td>" for i in range(steps + 1)
    )
    ticks = ("<td colspan=3>0 %</td><td colspan=5 align=center>50 %</td>"
             "<td colspan=3 align=right>100 %</td>")
    what = ("tiles, chips: share of time busy<br>" + (
        "links, memory ports, switches keep their usual colour" if no_links else
        "links, memory ports, switches: traffic ÷ bandwidth<br>links the run did not record keep their usual colour"))
    said = "".join(f"<br><span style='color:{NOTE_COLOUR}'>{html.escape(n)}</span>" for n in notes)
    return (f"<b>Utilisation</b> {when}<table cellspacing=0 cellpadding=1><tr>{ramp}</tr><tr>{ticks}</tr></table>"
            f"<span style='color:#566573'>{what}</span>{said}")


class Legend(QLabel):
    def __init__(self, overlay: OverlayController, parent: QWidget):
        super().__init__(parent)
        self.overlay = overlay
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.setStyleSheet("QLabel { background: rgba(255,255,255,225); border: 1px solid #b8c2cc;"
                           " border-radius: 4px; padding: 6px; color: #1c2833; }")
        overlay.changed.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        if self.overlay.heat_active:
            text = heat_legend(self.overlay)
        elif self.overlay.mode is Overlay.stages:
            text = stage_legend(self.overlay)
        else:
            text = ""
        if text != self.text():
            self.setText(text)
            self.adjustSize()
            self.place()
        self.setVisible(bool(text))

    def place(self) -> None:
        parent = self.parentWidget()
        if parent is not None:
            self.move(parent.width() - self.width() - MARGIN, MARGIN)
