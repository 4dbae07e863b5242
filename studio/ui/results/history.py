"""The last few runs, newest last, so a run after an edit can be compared with the one before it."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from tilewright.studio.model.run_record import RunRecord

KEEP = 5


class RunHistory(QObject):
    changed = Signal()

    def __init__(self, keep: int = KEEP, parent: QObject | None = None):
        super().__init__(parent)
        self.keep = keep
        self.records: list[RunRecord] = []
        self._next = 1

    def add(self, record: RunRecord) -> RunRecord:
        record.number = self._next
        self._next += 1
        self.records = [*self.records, record][-self.keep :]
        self.changed.emit()
        return record

    def __len__(self) -> int:
        return len(self.records)

    def find(self, number: int) -> RunRecord | None:
        return next((r for r in self.records if r.number == number), None)
