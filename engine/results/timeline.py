"""Columnar timeline of slices: a million slices stay cheap to build, export and draw."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

CATEGORIES = (
    "compute",
    "recompute",
    "tp_comm",
    "pp_comm",
    "dp_comm",
    "ep_comm",
    "cp_comm",
    "optimizer",
    "memory",
    "network",
    "idle",
    "host_wait",  # the device idle while the host works (a framework's synchronisation, a runtime's step)
)
HOST_WAIT = "host_wait"  # last, so the earlier categories' indices stay as saved results and views have them
CATEGORY_INDEX = {c: i for i, c in enumerate(CATEGORIES)}
ROWS_PER_CHUNK = 8192


@dataclass
class Lane:
    """A row of the Gantt chart: a device group's compute, one link, or one memory port."""

    name: str
    group: str  # "compute" | "links" | "memory"
    detail: str = ""


@dataclass
class Timeline:
    lanes: list[Lane] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    _lane_index: dict[str, int] = field(default_factory=dict, repr=False)
    _label_index: dict[str, int] = field(default_factory=dict, repr=False)
    _rows: list[tuple[int, float, float, int, int, int, int, int]] = field(default_factory=list, repr=False)
    _arrays: dict[str, np.ndarray] | None = field(default=None, repr=False)

    def lane(self, name: str, group: str, detail: str = "") -> int:
        idx = self._lane_index.get(name)
        if idx is None:
            idx = self._lane_index[name] = len(self.lanes)
            self.lanes.append(Lane(name, group, detail))
        return idx

    def add(
        self,
        lane: int,
        start: float,
        dur: float,
        category: str,
        label: str,
        stage: int = -1,
        micro_batch: int = -1,
        layer: int = -1,
    ) -> None:
        li = self._label_index.get(label)
        if li is None:
            li = self._label_index[label] = len(self.labels)
            self.labels.append(label)
        self._rows.append((lane, start, dur, CATEGORY_INDEX[category], li, stage, micro_batch, layer))
        self._arrays = None

    def __len__(self) -> int:
        return len(self._rows)

    def arrays(self) -> dict[str, np.ndarray]:
        """Columns: lane, start, dur, category, label, stage, micro_batch, layer (sorted by lane, start)."""
        if self._arrays is None:
            names = ("lane", "start", "dur", "category", "label", "stage", "micro_batch", "layer")
            types = (np.int32, np.float64, np.float64, np.int16, np.int32, np.int32, np.int32, np.int32)
            arr = {n: np.empty(len(self._rows), dtype=t) for n, t in zip(names, types, strict=True)}
            # In chunks: one conversion of every row holds the GIL for ~0.1 s per 100k slices, which froze
            # the studio's window while its worker thread prepared a result; chunks are also twice as fast.
            # Every field is an integer or a float, so the float64 staging is exact.
            for lo in range(0, len(self._rows), ROWS_PER_CHUNK):
                block = np.array(self._rows[lo : lo + ROWS_PER_CHUNK], dtype=np.float64).reshape(-1, len(names))
                for j, n in enumerate(names):
                    arr[n][lo : lo + len(block)] = block[:, j]
            order = np.lexsort((arr["start"], arr["lane"]))
            self._arrays = {n: a[order] for n, a in arr.items()}
        return self._arrays

    def busy_time(self, lane: int) -> float:
        a = self.arrays()
        return float(a["dur"][a["lane"] == lane].sum())
