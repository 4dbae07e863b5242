"""The key to the canvas colours, floating in the view's top-right corner: pipeline stages with the
layers each holds, the heat scale in percent with what it measures and when, or the collectives whose
traffic colours the links (expert all-to-all, data-parallel all-reduce, …) with the link time each took.

The key fits the view it floats on. It comes in three sizes: in full; compact (no explanation, each stage
by its first layer range as its tag on the canvas shows it, more columns); and a one-line title for a view
too small for either, wrapped to the view's width where even that line is wider. Zoom-to-fit keeps the
room it takes free (``room``): a column on the right for the first two, a strip along the top for the
title, so the key never covers what it explains.
"""

from __future__ import annotations

import html
from enum import Enum

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget
from tilewright.studio.mapping import expert_tp_text, stage_split
from tilewright.studio.model.palette import CATEGORY_COLOURS, category_label
from tilewright.studio.model.parallel_groups import GroupKind, groups_here, idle_degree
from tilewright.studio.ui.canvas import style
from tilewright.studio.ui.canvas.overlay_controller import Overlay, OverlayController
from tilewright.studio.ui.canvas.stage_tags import tag_text
from tilewright.studio.units import SECONDS, format_value

MAX_STAGE_ROWS = 12  # per column; two columns (four when compact), then "… and N more"
MARGIN = 10
SHARE = {"full": 0.3, "compact": 0.4}  # of the view's width each key beside the level may take
CHROME_PX = 16  # the label's padding and border, top and bottom together


class Size(Enum):
    full = "full"
    compact = "compact"
    title = "title"


def _swatch(color: str) -> str:
    return f"<span style='background:{color}; color:{color}'>&nbsp;&nbsp;&nbsp;&nbsp;</span>"


def stage_legend(overlay: OverlayController, size: Size = Size.full, max_rows: int = MAX_STAGE_ROWS) -> str:
    """The stages and their layers; ``max_rows`` per column (the view's height allows that many)."""
    layout = overlay.layout
    if layout.problem:
        if size is Size.title:
            return "<b>Pipeline stages</b> · <span style='color:#c0392b'>no placement</span>"
        return f"<b>Pipeline stages</b><br><span style='color:#c0392b'>no placement: {layout.problem}</span>"
    if size is Size.title:
        hint = "<span style='color:#566573'>(a larger canvas shows the key)</span>"
        return f"<b>Pipeline stages</b> · {layout.stages} {hint}"
    m = overlay.doc.project.mapping
    how = "placed by hand" if layout.explicit else f"{m.placement.value} placement"
    per_stage, split = stage_split(m)
    each = f"{per_stage} {'device' if per_stage == 1 else 'devices'} each ({split})"
    head = f"<b>Pipeline stages</b> · {layout.stages}"
    if size is Size.compact and (m.ep > 1 or m.cp > 1):
        shown = [("ep", m.ep if m.ep > 1 else None), ("etp", expert_tp_text(m)), ("cp", m.cp if m.cp > 1 else None)]
        head += "".join(f" · {k} {v}" for k, v in shown if v is not None)
    if size is Size.full:
        head += f"<br><span style='color:#566573'>{each}<br>{how} · L = model layers</span>"
    name = layout.label if size is Size.full else (lambda s: tag_text(layout, s))
    rows = [f"{_swatch(style.stage_color(s).name())}&nbsp;{s}&nbsp;&nbsp;{name(s)}" for s in range(layout.stages)]
    per_column = max(1, min(max_rows, MAX_STAGE_ROWS))
    columns_max = 2 if size is Size.full else 4
    shown = rows[: columns_max * per_column]
    if len(shown) < len(rows) and len(shown) > 1:
        shown = shown[:-1]  # the "… more" line takes a row's height
    columns = [shown[i : i + per_column] for i in range(0, len(shown), per_column)]
    cells = "".join(f"<td style='padding-right:10px'>{'<br>'.join(col)}</td>" for col in columns)
    more = f"<br>… and {len(rows) - len(shown)} more stages" if len(rows) > len(shown) else ""
    return f"{head}<table><tr>{cells}</tr></table>{more}"


NOTE_COLOUR = "#b9770e"  # what the run does not report: amber, like the status bar's warnings


def heat_legend(overlay: OverlayController, size: Size = Size.full) -> str:
    frame = overlay.frame
    when = frame.label if frame is not None else ""
    notes = frame.notes if frame is not None else []
    if size is Size.title:
        return f"<b>Utilisation</b> {when} <span style='color:#566573'>(0 % grey-blue → 100 % red)</span>"
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
    told = f"<span style='color:#566573'>{what}</span>{said}" if size is Size.full else said.removeprefix("<br>")
    return (f"<b>Utilisation</b> {when}<table cellspacing=0 cellpadding=1><tr>{ramp}</tr><tr>{ticks}</tr></table>"
            f"{told}")


TRAFFIC_TITLE = "Traffic by collective"
TRAFFIC_HOW = ("links coloured by what kept them busy:<br>spokes stacked by share, mesh links<br>"
               "by the longest; links not split<br>keep their usual colour")
NO_TRAFFIC = ("the run split no link's traffic by collective (the event engine records it on the busiest "
              "links of each collective; the analytic engine has no links)")


def _plural(kind: str) -> str:
    return kind if kind.endswith("s") else f"{kind}s"


def hidden_note(category: str, drawn: set[str], inside: dict[str, set[str]], outside: set[str], level: str
                ) -> str:
    """Where a category's traffic is when no link drawn at this level carried it: inside the cells (a node
    drawn as one cell hides its NVSwitch spokes: "inside the nodes: open one to see it"), outside the opened
    ``level`` (a component path; its pipeline sends leave the node), or on links this level does not draw.
    "" when a drawn link carried it."""
    if category in drawn:
        return ""
    if category in inside:
        kinds = sorted({_plural(path.rpartition("/")[2]) for path in inside[category]})
        return f"inside the {' and '.join(kinds)}: open one to see it"
    if category in outside:
        return f"outside this {level.rpartition('/')[2]}: Backspace goes up to see it"
    return "on no link drawn at this level"


def traffic_legend(overlay: OverlayController, size: Size = Size.full) -> str:
    """The categories the run's links carried, each with its colour and its link-seconds, most first; a
    category no link drawn here carried says where it is instead (inside the cells, or elsewhere)."""
    carriage = overlay.carriage
    categories = carriage.categories()
    if not categories:
        return f"<b>{TRAFFIC_TITLE}</b><br><span style='color:{NOTE_COLOUR}'>{NO_TRAFFIC}</span>"
    drawn, inside, outside = overlay.traffic_where()
    level = overlay.scene.selection.level
    notes = {c: hidden_note(c, drawn, inside, outside, level) for c in categories}
    if size is Size.title:
        return f"<b>{TRAFFIC_TITLE}</b> · " + " · ".join(
            category_label(c) + (f" <span style='color:{NOTE_COLOUR}'>({notes[c].partition(':')[0]})</span>"
                                 if notes[c] else "") for c in categories)
    rows = []
    for category in categories:
        links = [name for name in carriage.by_link if carriage.carries(name, category)]
        seconds = sum(carriage.by_link[name][category] for name in links)
        label = category_label(category)
        if size is Size.full:
            label += (f" <span style='color:#566573'>· {len(links)} {'link' if len(links) == 1 else 'links'} · "
                      f"{format_value(seconds, SECONDS)}</span>")
        if notes[category]:  # compact: where, without how to get there
            note = notes[category] if size is Size.full else notes[category].partition(":")[0]
            label += f"<br>&nbsp;&nbsp;&nbsp;&nbsp;&nbsp;<span style='color:{NOTE_COLOUR}'>{note}</span>"
        rows.append(f"{_swatch(CATEGORY_COLOURS.get(category, '#bab0ac'))}&nbsp;{label}")
    how = f"<br><span style='color:#566573'>{TRAFFIC_HOW}</span>" if size is Size.full else ""
    return f"<b>{TRAFFIC_TITLE}</b>{how}<br>{'<br>'.join(rows)}"


GROUP_WORD = {GroupKind.expert: "group", GroupKind.context: "ring"}
TITLE_PLACE_CHARS = 40  # of groups placed on the level's cells the one-line key names before "…"
GROUP_TITLES = {GroupKind.expert: "Expert-parallel groups", GroupKind.context: "Context-parallel rings"}
NO_GROUPS = {
    GroupKind.expert: "ep 1: every device holds all the routed experts, no tokens are exchanged (set ep > 1 "
                      "and Auto-map)",
    GroupKind.context: "cp 1: every device runs whole sequences, no keys and values pass around a ring (set "
                       "cp > 1 and Auto-map; training only)",
}
INFERENCE_GROUPS = {  # an inference run keeps a training mapping's ep but runs without it (plan.plan)
    GroupKind.expert: "ep {}: an inference run serves experts in parallel only when ep divides dp (data-parallel "
                      "attention); here it holds every routed expert on each device and exchanges no tokens",
    # the project checks refuse cp > 1 outside training (plan.checks): the run does not start, so say so
    GroupKind.context: "cp {}: training only; the project checks refuse it in an inference run (set cp 1)",
}


def group_legend(overlay: OverlayController, kind: GroupKind, size: Size = Size.full, max_rows: int = MAX_STAGE_ROWS
                 ) -> str:
    """Which devices exchange tokens (expert all-to-all) or keys and values (context ring): one colour a group."""
    title = f"<b>{GROUP_TITLES[kind]}</b>"
    if overlay.layout.problem:
        return f"{title} · <span style='color:#c0392b'>no placement</span>"
    groups = overlay.groups(kind)
    if groups is None:
        idle = idle_degree(overlay.doc.project, kind)
        note = NO_GROUPS[kind] if idle == 1 else INFERENCE_GROUPS[kind].format(idle)
        return f"{title}<br><span style='color:{NOTE_COLOUR}'>{note}</span>"
    name = "ep" if kind is GroupKind.expert else "cp"
    stages = max(groups.stage_of_group) + 1
    head = f"{title} · {name} {groups.degree} · {groups.count // stages} per stage"
    here = groups_here(groups, overlay.cells)
    if size is Size.title:
        said, shown = "", 0
        for g, where in here.items():  # as many as the one line has room for, at least one
            piece = f"{GROUP_WORD[kind]} {g} = {where}"
            if shown and len(said) + len(piece) + 2 > TITLE_PLACE_CHARS:
                break
            said, shown = f"{said}, {piece}" if said else piece, shown + 1
        more = ", …" if len(here) > shown else ""
        return head + (f" · <span style='color:#566573'>here: {html.escape(said)}{more}</span>" if said else "")
    if size is Size.full:
        m = overlay.doc.project.mapping
        if kind is GroupKind.expert:
            what = (f"each colour: {groups.block} devices whose tokens go all-to-all among them<br>"
                    f"(ep {groups.degree} × expert tp {groups.block // groups.degree}), the routed experts "
                    "split over them<br>ranks: tp fastest, then cp, then dp (Megatron's order)")
        else:
            what = (f"each colour: {groups.block} devices passing keys and values<br>around a ring "
                    f"(tp {m.tp} × cp {groups.degree}), each holding 1/{groups.degree} of every sequence<br>"
                    "ranks: tp fastest, then cp, then dp (Megatron's order)")
        head += f"<br><span style='color:#566573'>{what}</span>"
    rows = [f"{_swatch(style.stage_color(g).name())}&nbsp;{g}&nbsp;&nbsp;stage {s}"
            + (f" · {html.escape(here[g])}" if g in here else "") for g, s in enumerate(groups.stage_of_group)]
    per_column = max(1, min(max_rows, MAX_STAGE_ROWS))
    shown = rows[: 4 * per_column]
    if len(shown) < len(rows) and len(shown) > 1:
        shown = shown[:-1]
    columns = [shown[i : i + per_column] for i in range(0, len(shown), per_column)]
    cells = "".join(f"<td style='padding-right:10px'>{'<br>'.join(col)}</td>" for col in columns)
    more = f"<br>… and {len(rows) - len(shown)} more" if len(rows) > len(shown) else ""
    return f"{head}<table><tr>{cells}</tr></table>{more}"


class Legend(QLabel):
    def __init__(self, overlay: OverlayController, parent: QWidget):
        super().__init__(parent)
        self.overlay = overlay
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.setStyleSheet("QLabel { background: rgba(255,255,255,225); border: 1px solid #b8c2cc;"
                           " border-radius: 4px; padding: 6px; color: #1c2833; }")
        self.key_size = Size.full  # which key is shown (see ``refresh``)
        overlay.changed.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        """Show the largest key that fits the view: full, compact, else the one-line title."""
        shows = self.overlay.heat_active or self.overlay.traffic_active or self.overlay.group_kind is not None
        if not (shows or self.overlay.mode is Overlay.stages):
            self.key_size = Size.full
            self.setText("")
            self.setVisible(False)
            return
        parent = self.parentWidget()
        vw, vh = (parent.width(), parent.height()) if parent is not None else (10_000, 10_000)
        line = self.fontMetrics().lineSpacing()
        for size in Size:
            text = self._text(size, vh, line)
            if text != self.text() or self.wordWrap():
                self.setWordWrap(False)  # each size is measured at its natural width
                self.setText(text)
                self.adjustSize()
            if size is Size.title:
                self.key_size = size
                self._wrap_to(vw - 2 * MARGIN)
                break
            if self.width() <= SHARE[size.value] * vw and self.height() <= vh - 2 * MARGIN:
                self.key_size = size
                break
        self.place()
        self.setVisible(True)

    def _wrap_to(self, width: int) -> None:
        """A title wider than the view wraps to its width. Placed against the right edge, a wider one started
        left of the view and lost its beginning (the cp 1 note read "whole sequences, no keys and values
        pass around a ring…" at 1280 × 720); wrapped, it takes more lines of the strip ``room`` keeps free."""
        if self.width() <= width:
            return
        width = max(width, 1)
        self.setWordWrap(True)
        self.resize(width, self.heightForWidth(width))

    def _text(self, size: Size, view_height: int, line: int) -> str:
        if self.overlay.heat_active:
            return heat_legend(self.overlay, size)
        if self.overlay.traffic_active:
            return traffic_legend(self.overlay, size)
        head_lines = (4 if self.overlay.group_kind is not None else 3) if size is Size.full else 1
        rows = (view_height - 2 * MARGIN - CHROME_PX) // max(line, 1) - head_lines - 1
        if self.overlay.group_kind is not None:
            return group_legend(self.overlay, self.overlay.group_kind, size, max(1, rows))
        return stage_legend(self.overlay, size, max(1, rows))

    def room(self) -> tuple[int, int]:
        """Pixels (right, top) zoom-to-fit keeps free for the key: a column beside the level, or a strip
        above it for the one-line title."""
        if self.isHidden() or not self.text():
            return 0, 0
        if self.key_size is Size.title:
            return 0, self.height() + MARGIN
        return self.width() + 12, 0

    def place(self) -> None:
        parent = self.parentWidget()
        if parent is not None:
            self.move(parent.width() - self.width() - MARGIN, MARGIN)
