"""The workload panel's HyPar part: per layer, HyPar's data/model-parallel choice and the one the mapping
holds (two columns of the layer table), and above the table what HyPar saves, with one-click Apply.

Apply writes the mapping the way ``engine.search.hypar.report.apply_partition`` does (as the Explore
panel's HyPar tab and ``tilewright hypar --project`` do), as ONE undo command. The numbers come from
``studio.hypar_choice``; this module only shows them.
"""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QTreeWidgetItem, QWidget
from tilewright.engine.ir.mapping import Mapping
from tilewright.studio.document import ProjectDocument
from tilewright.studio.explore_commands import AdoptMapping
from tilewright.studio.hypar_choice import (
    HyparChoice,
    hypar_choice,
    is_applied,
    mapped_choices,
    mapping_with,
    stores_levels,
)
from tilewright.studio.units import BYTES, format_value, plural

HYPAR_COLUMNS = ("HyPar", "Mapped")
HYPAR_TIPS = (
    "HyPar's choice per level of halving the devices, top level first: dp splits the batch, mp the "
    "weights (Song et al., HPCA 2019)",
    "what the mapping's layer_parallelism holds for the layer",
)
NOTE_STYLE = "color: #566573;"
APPLY = "Apply HyPar"
APPLIED = "HyPar applied"


class HyparSection(QWidget):
    """Summary line and the Apply button; ``fill`` writes the two table columns of each layer row."""

    def __init__(self, doc: ProjectDocument, parent: QWidget | None = None):
        super().__init__(parent)
        self.doc = doc
        self.choice = HyparChoice()
        self.target: Mapping | None = None  # the mapping Apply would write
        self._choice_of: tuple[object, ...] = ()
        self.summary = QLabel(self)
        self.summary.setWordWrap(True)
        self.summary.setStyleSheet(NOTE_STYLE)
        self.apply_button = QPushButton(APPLY, self)
        self.apply_button.clicked.connect(self.apply)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.summary, 1)
        row.addWidget(self.apply_button)

    def refresh(self) -> None:
        """Recompute HyPar when what it reads changed (workload, devices, batch, data type); the target
        mapping and the button follow every mapping edit."""
        project = self.doc.project
        m = project.mapping
        key = (project.workload, m.devices, m.global_batch, project.run.dtype)
        if key != self._choice_of:
            self.choice = hypar_choice(project)
            self._choice_of = key
        self.target, why_not = mapping_with(project, self.choice) if self.choice.applies else (None, "")
        self.setVisible(self.choice.applies)
        self.summary.setText(self._summary(why_not))
        self.summary.setToolTip(self._inputs() if self.choice.applies else "")
        applied = is_applied(project, self.target)
        self.apply_button.setEnabled(self.target is not None and not applied and not self.doc.read_only)
        self.apply_button.setText(APPLIED if applied else APPLY)
        self.apply_button.setToolTip(self._what_apply_writes())

    def _summary(self, why_not: str) -> str:
        c = self.choice
        if not c.applies:
            return ""
        if c.partition is None:
            return f"<b>HyPar</b>: {c.problem}"
        of = f" of {c.devices}" if c.devices != c.accelerators else ""
        counted = plural("device", c.devices if of else c.accelerators)  # "1 device", "16 of 20 devices"
        share = f"{100 * c.total_bytes / c.dp_bytes:.0f} % of" if c.dp_bytes > 0 else "vs"
        text = (f"<b>HyPar</b> · {c.accelerators}{of} {counted}, {c.levels} {plural('level', c.levels)}: "
                f"{format_value(c.total_bytes, BYTES)} exchanged per step, {share} all-dp's "
                f"{format_value(c.dp_bytes, BYTES)}")
        if why_not:
            text += f"<br><span style='color:#b9770e'>cannot apply: {why_not}</span>"
        elif not stores_levels() and c.levels > 1:
            text += "<br>the mapping keeps each layer's top-level choice"
        return text

    def _inputs(self) -> str:
        c = self.choice
        return (f"HyPar's inputs, from the project: {c.accelerators} {plural('device', c.accelerators)} "
                f"(the largest power of two up to "
                f"the mapping's {c.devices}), global batch {c.batch} samples, {c.dtype}. "
                "Vary them in Explore ▸ HyPar.")

    def _what_apply_writes(self) -> str:
        t = self.target
        if t is None:
            return "HyPar cannot be applied to this mapping"
        return (f"write HyPar's per-layer choices into the mapping, on HyPar's array: dp {t.dp}, tp {t.tp}, "
                f"pp {t.pp}, micro-batch {t.micro_batch} samples of a global batch of {t.global_batch} "
                "(one undo step)")

    def fill(self, items: dict[int, QTreeWidgetItem], first_column: int) -> None:
        """Column ``first_column``: HyPar's choice; the next one: the mapping's."""
        mapped = mapped_choices(self.doc.project.mapping, list(items))
        for index, item in items.items():
            item.setText(first_column, self.choice.by_layer.get(index, ""))
            item.setText(first_column + 1, mapped.get(index, ""))

    @property
    def shows_mapped(self) -> bool:
        return bool(self.doc.project.mapping.layer_parallelism)

    def apply(self) -> bool:
        self.refresh()  # against the project as it is now
        if self.target is None or self.doc.read_only or is_applied(self.doc.project, self.target):
            return False
        self.doc.push(AdoptMapping(self.doc, self.target, text=APPLY))
        return True
