"""What the Gantt draws, computed with numpy and without Qt: rows (group headers and lanes), one bar set per
colour, level of detail, and hit testing for tooltips.

Built on the worker thread right after a run (sorting a million slices is not GUI-thread work); the view
then asks ``bars`` for what is visible at its current zoom. Bars narrower than a pixel are widened to one
pixel and neighbours closer than a pixel are merged, so a zoomed-out million-slice timeline turns into a
few thousand rectangles that look the same.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
from tilewright.engine.results import CATEGORIES
from tilewright.studio.model.palette import STAGE_COLOURS, category_colour, category_label, stage_colour
from tilewright.studio.units import SECONDS, format_value

GROUP_ORDER = ("compute", "links", "memory")
GROUP_TITLES = {"compute": "compute", "links": "links", "memory": "memory ports"}
MODES = ("category", "stage")
LABEL_CHARS = 60  # the axis elides further, to its pixel width
DENSE_CELLS = 8_000_000  # cells × colours up to which binning uses a table (64 MB of float64)
MAX_SCAN = 64  # slices looked at backwards from a hover point (lanes rarely overlap themselves)

Bars = dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]  # colour key → (x0, width, y)


@dataclass(frozen=True)
class Row:
    """One row of the chart: a group header (``lane == -1``) or a timeline lane."""

    text: str
    lane: int = -1
    group: str = ""

    @property
    def is_header(self) -> bool:
        return self.lane < 0


def root_prefix(names: list[str]) -> str:
    """"dgx-a100/" when every node id in the lane names starts with it: the system name is noise there."""
    firsts = Counter(part.split("/", 1)[0] for name in names for part in name.split(" → ") if "/" in part)
    if not firsts:
        return ""
    root, count = firsts.most_common(1)[0]
    return f"{root}/" if count == sum(firsts.values()) else ""


def link_name(name: str) -> str:
    """"a/b/ctrl → a/b" becomes "a/b/ctrl → …/b": the destination without the path it shares with the
    source (memory ports and on-die links repeat long prefixes)."""
    if " → " not in name:
        return name
    src, dst = name.split(" → ", 1)
    s, d = src.split("/"), dst.split("/")
    common = 0
    while common < min(len(s), len(d)) - 1 and s[common] == d[common]:
        common += 1
    return f"{src} → …/{'/'.join(d[common:])}" if common else name


def elide(text: str, limit: int = LABEL_CHARS) -> str:
    if len(text) <= limit:
        return text
    keep = limit - 1
    return text[: keep // 2] + "…" + text[len(text) - (keep - keep // 2) :]


def lane_label(lane: Any, root: str) -> str:
    name = link_name(lane.name.replace(root, "") if root else lane.name)
    if lane.group == "compute" and lane.detail.split(" ", 1)[0].isdigit():
        name += f" · {lane.detail.split(' from ', 1)[0]}"  # "stage 0 · 8 devices"
    return elide(name)


def time_digits(t: float, resolution: float) -> int:
    """Significant digits that keep ``resolution`` visible in ``t`` ("105.09 ms", not "105 ms", for a
    92 µs slice there), between 3 and 9."""
    if t <= 0 or resolution <= 0:
        return 3
    return int(min(9, max(3, math.ceil(math.log10(t / resolution)) + 2)))


class GanttData:
    """Rows and per-colour slice indices of one timeline (arrays sorted by lane, then start)."""

    def __init__(self, timeline: Any, breakdown: dict[str, float] | None = None, iteration_s: float = 0.0):
        # the run's time breakdown, for what the bars cannot show (``unseen_note``)
        self.breakdown, self.iteration_s = dict(breakdown or {}), iteration_s
        a = timeline.arrays()
        self.lanes = list(timeline.lanes)
        self.labels = list(timeline.labels)
        self.lane = a["lane"].astype(np.int64)
        self.start = a["start"]
        self.end = a["start"] + a["dur"]
        self.category, self.stage = a["category"], a["stage"]
        self.label, self.micro_batch, self.layer = a["label"], a["micro_batch"], a["layer"]
        self.span = float(self.end.max()) if len(self.end) else 0.0
        self.rows, self.lane_row = self._layout()
        self.y = self.lane_row[self.lane].astype(np.float64) if len(self.lane) else np.zeros(0)
        bounds = np.searchsorted(self.lane, np.arange(len(self.lanes) + 1))
        self.lane_lo, self.lane_hi = bounds[:-1], bounds[1:]
        self.keys = {"category": self.category.astype(np.int64), "stage": self.stage.astype(np.int64)}
        self.present = {mode: np.unique(keys).tolist() for mode, keys in self.keys.items()}
        # Per-slice columns the level of detail reads on every zoom, computed once here (worker thread).
        self.row = self.lane_row[self.lane] if len(self.lane) else np.zeros(0, np.int64)
        self.mid = (self.start + self.end) / 2
        self.weight = self.end - self.start
        self.dense = {mode: np.searchsorted(np.asarray(self.present[mode]), keys) for mode, keys in self.keys.items()}

    def __len__(self) -> int:
        return len(self.start)

    def _layout(self) -> tuple[list[Row], np.ndarray]:
        root = root_prefix([lane.name for lane in self.lanes])
        rows: list[Row] = []
        lane_row = np.zeros(max(len(self.lanes), 1), dtype=np.int64)
        groups = [g for g in GROUP_ORDER if any(lane.group == g for lane in self.lanes)]
        groups += sorted({lane.group for lane in self.lanes} - set(GROUP_ORDER))
        for group in groups:
            members = [i for i, lane in enumerate(self.lanes) if lane.group == group]
            noun = "lane" if len(members) == 1 else "lanes"
            rows.append(Row(f"{GROUP_TITLES.get(group, group).upper()} · {len(members)} {noun}", -1, group))
            for i in members:
                lane_row[i] = len(rows)
                rows.append(Row(lane_label(self.lanes[i], root), i, group))
        return rows, lane_row

    def colour(self, mode: str, key: int) -> str:
        return category_colour(key) if mode == "category" else stage_colour(key)

    def legend(self, mode: str) -> list[tuple[str, str]]:
        """(name, colour) of every key present, in key order."""
        keys = self.present[mode]
        if mode == "category":
            return [(CATEGORIES[k], category_colour(k)) for k in keys]
        stages = [k for k in keys if k >= 0]
        cycle = len(STAGE_COLOURS)
        out = [("no stage", stage_colour(-1))] if len(stages) < len(keys) else []
        for k in stages[:cycle]:
            same = [s for s in stages if s % cycle == k % cycle]
            more = "…" if len(same) > 3 else ""
            name = f"stage {k}" if len(same) == 1 else "stages " + ", ".join(map(str, same[:3])) + more
            out.append((name, stage_colour(k)))
        return out

    def unseen_note(self) -> str:
        """The time categories of the breakdown that no slice is drawn in, with their share of the
        iteration: a memory stall is time inside a compute op (the op waits for DRAM), so a run that is
        60 % memory stall draws solid "compute" bars; the legend must say so and point to the Summary,
        where the breakdown is."""
        drawn = {CATEGORIES[k] for k in self.present["category"]}
        total = self.iteration_s or sum(self.breakdown.values())
        hidden = [(k, v) for k, v in self.breakdown.items() if v > 0 and k not in drawn and k != "bubble"]
        if not hidden or total <= 0:
            return ""
        inside = {"memory_stall": " (inside the compute bars)"}
        shares = ", ".join(f"{category_label(k)} {100 * v / total:.0f} %{inside.get(k, '')}" for k, v in hidden)
        return (f"Not drawn in a colour of its own: {shares} of the iteration; "
                "the Summary's time breakdown has every category")

    def bars(self, mode: str, x0: float, x1: float, pixel_s: float,
             rows: tuple[float, float] | None = None) -> Bars:
        """Visible bars per colour between ``x0`` and ``x1`` seconds (and ``rows``, if given).

        Slices at least a pixel wide are drawn as they are (same-colour neighbours closer than a pixel
        merged); narrower ones are binned into pixel columns, and each (row, column) cell takes the colour
        that covers most of it, so interleaved compute and communication stay visible when zoomed out.
        """
        keys = self.keys[mode]
        visible = (self.end >= x0) & (self.start <= x1)
        if rows is not None:
            visible &= (self.y >= rows[0] - 1) & (self.y <= rows[1] + 1)
        idx = np.flatnonzero(visible)
        if not len(idx):
            return {}
        if pixel_s <= 0:
            return self._exact(idx, keys, 0.0)
        wide = (self.end[idx] - self.start[idx]) >= pixel_s
        out = self._exact(idx[wide], keys, pixel_s)
        for key, (x, w, y) in self._binned(idx[~wide], mode, pixel_s).items():
            if key in out:
                ox, ow, oy = out[key]
                out[key] = (np.concatenate([ox, x]), np.concatenate([ow, w]), np.concatenate([oy, y]))
            else:
                out[key] = (x, w, y)
        return out

    def _exact(self, idx: np.ndarray, keys: np.ndarray, pixel_s: float) -> Bars:
        out: Bars = {}
        if not len(idx):
            return out
        k = keys[idx]
        order = np.argsort(k, kind="stable")  # per key, still in (lane, start) order
        k, idx = k[order], idx[order]
        cuts = np.flatnonzero(np.diff(k)) + 1
        for part in np.split(idx, cuts):
            start, end, lane = self.start[part], self.end[part], self.lane[part]
            if len(part) > 1 and pixel_s > 0:
                gap = start[1:] - end[:-1]
                first = np.flatnonzero(np.concatenate([[True], (lane[1:] != lane[:-1]) | (gap > pixel_s)]))
                start, end, lane = start[first], np.maximum.reduceat(end, first), lane[first]
            out[int(keys[part[0]])] = (start, np.maximum(end - start, pixel_s), self.lane_row[lane].astype(np.float64))
        return out

    def _binned(self, idx: np.ndarray, mode: str, pixel_s: float) -> Bars:
        """Dominant key per (row, pixel column) of sub-pixel slices, as runs of one-pixel bars."""
        if not len(idx):
            return {}
        every = len(idx) == len(self.start)  # the whole chart is in view: no gathers needed
        mid, row = (self.mid, self.row) if every else (self.mid[idx], self.row[idx])
        kd, weight = (self.dense[mode], self.weight) if every else (self.dense[mode][idx], self.weight[idx])
        present = self.present[mode]
        col = (mid * (1.0 / pixel_s)).astype(np.int64)  # columns anchored at t = 0 (times are ≥ 0)
        c0, r0 = col.min(), row.min()
        ncol = int(col.max() - c0 + 1)
        cell = (row - r0) * ncol + (col - c0)
        weight = weight + pixel_s * 1e-6  # a zero-length slice still marks its cell
        nk = len(present)
        ncell = int(row.max() - r0 + 1) * ncol
        if ncell * nk <= DENSE_CELLS:  # a (cell × key) table: linear time
            cover = np.bincount(cell * nk + kd, weights=weight, minlength=ncell * nk).reshape(ncell, nk)
            cells = np.flatnonzero(cover.any(axis=1))
            dom = cover[cells].argmax(axis=1)
        else:  # too many cells for a table (a deep pipeline coloured by stage): sort instead
            uniq, inverse = np.unique(cell * nk + kd, return_inverse=True)
            cover = np.bincount(inverse, weights=weight)
            ucell, ukey = uniq // nk, uniq % nk
            best = np.lexsort((-cover, ucell))  # per cell, the largest cover first
            first = best[np.concatenate([[True], np.diff(ucell[best]) != 0])]
            cells, dom = ucell[first], ukey[first]
        out: Bars = {}
        for k in np.unique(dom):
            c = np.sort(cells[dom == k])
            r, cc = c // ncol, c % ncol
            run = np.flatnonzero(np.concatenate([[True], (np.diff(r) != 0) | (np.diff(cc) != 1)]))
            length = np.diff(np.append(run, len(c)))
            x = (cc[run] + c0) * pixel_s
            out[int(present[k])] = (x.astype(np.float64), length * pixel_s, (r[run] + r0).astype(np.float64))
        return out

    def slice_at(self, lane: int, t: float, tolerance: float = 0.0) -> int | None:
        """The slice of ``lane`` under time ``t`` (or the nearest within ``tolerance`` seconds)."""
        if not 0 <= lane < len(self.lanes):
            return None
        lo, hi = int(self.lane_lo[lane]), int(self.lane_hi[lane])
        k = lo + int(np.searchsorted(self.start[lo:hi], t + tolerance, side="right")) - 1
        best, best_gap = None, tolerance
        for i in range(k, max(lo, k - MAX_SCAN) - 1, -1):
            s, e = self.start[i], self.end[i]
            gap = 0.0 if s <= t <= e else min(abs(t - s), abs(t - e))
            if gap <= best_gap:
                best, best_gap = i, gap
                if gap == 0.0:
                    break
        return best

    def describe(self, i: int) -> str:
        """Tooltip text of slice ``i``: what, where, when — every number with its unit."""
        lane = self.lanes[int(self.lane[i])]
        facts = [category_label(CATEGORIES[int(self.category[i])])]
        if self.stage[i] >= 0:
            facts.append(f"stage {int(self.stage[i])}")
        if self.layer[i] >= 0:
            facts.append(f"layer {int(self.layer[i])}")
        if self.micro_batch[i] >= 0:
            facts.append(f"micro-batch {int(self.micro_batch[i])}")
        start, dur = float(self.start[i]), float(self.end[i] - self.start[i])
        digits = time_digits(start + dur, dur)
        return "\n".join([
            self.labels[int(self.label[i])],
            " · ".join(facts),
            f"start {format_value(start, SECONDS, digits)} · duration {format_value(dur, SECONDS)} "
            f"· end {format_value(start + dur, SECONDS, digits)}",
            f"lane: {lane.name}" + (f" ({lane.detail})" if lane.detail else ""),
        ])
