"""Numbers about a ``Result`` at a moment or on average, keyed by hardware-graph node ids: the data behind
the canvas heat overlay and the result views. No Qt here, so the canvas, the views and tests share it.

Public API (all take an ``engine.results.Result``; times in seconds from the start of the iteration):

- ``link_utilisation_at(result, t) -> {(src, dst): fraction 0–1}``: each link's utilisation at ``t``.
- ``average_link_utilisation(result) -> {(src, dst): fraction 0–1}``: time-weighted over the iteration.
- ``busiest_links(result, n=None) -> [(Series, average fraction)]``: links sorted busiest first.
- ``device_activity_at(result, t, window_s=None) -> {node_id: fraction 0–1}``: share of the window around
  ``t`` each device spends busy (any compute-lane slice but idle). ``window_s=None`` uses 1 % of the
  iteration so a heat map fades smoothly instead of flickering between 0 and 1; ``window_s=0`` gives the
  instantaneous 0/1 state.
- ``average_device_activity(result) -> {node_id: fraction 0–1}``: busy share of the whole iteration.
- ``memory_occupancy_at(result, t) -> {device: bytes}`` and ``memory_fraction_at(result, t) ->
  {device: occupancy / capacity}`` (above 1 means the device overflows).
- ``fullest_first(tracks) -> [(MemoryTrack, peak bytes)]``: devices by peak relative to capacity.
- ``time_span(result) -> seconds``: the length every view's time axis covers.
- ``series_value_at(series, t, end=None) -> value``: one piecewise-constant ``Series`` at ``t``.
- ``window_average(series, end, bins) -> (edges, means)``: the series averaged over ``bins`` equal windows
  of [0, ``end``] (bursty links read better as averages than as 0/100 % steps).
- ``missing_data_notes(result) -> [str]``: what the run does not report (no link series, no device lanes),
  said the way a legend says it, so a view shows why it is blank instead of staying silently empty.

A link is keyed ``(src, dst)`` as in ``Series.src/dst`` (e.g. ``("dgx-a100/node[3]/gpu[5]",
"dgx-a100/switch")``); parallel series between the same two nodes report the busiest. Devices are keyed by
the node ids in ``Result.lane_devices``: whatever lanes it maps count (per-device lanes of the event engine,
per-stage lanes of the analytic one), the others are ignored. Derived arrays are computed once per result
and cached (the canvas calls these on every cursor move).
"""

from __future__ import annotations

import weakref
from functools import cached_property

import numpy as np
from tilewright.engine.results import CATEGORIES
from tilewright.engine.results.result import MemoryTrack, Result, Series, window_means

LinkKey = tuple[str, str]
DEFAULT_WINDOW_FRACTION = 0.01
_IDLE = CATEGORIES.index("idle")


def time_span(result: Result) -> float:
    """The iteration time, or the end of the last slice if that is later (never 0 for a real run)."""
    span = float(result.iteration_time_s)
    if len(result.timeline):
        a = result.timeline.arrays()
        span = max(span, float((a["start"] + a["dur"]).max()))
    return span


def link_key(series: Series) -> LinkKey:
    return (series.src, series.dst) if series.src or series.dst else (series.name, "")


class _Links:
    """All link series concatenated: one numpy pass answers "utilisation at t" for every link."""

    def __init__(self, result: Result, span: float):
        series = list(result.link_utilisation)
        self.series = series
        self.keys = [link_key(s) for s in series]
        lengths = np.array([len(s.times) for s in series], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(lengths)])[:-1] if series else np.zeros(0, np.int64)
        self.lengths = lengths
        self.times = np.concatenate([np.asarray(s.times, float) for s in series]) if series else np.zeros(0)
        self.values = np.concatenate([np.asarray(s.values, float) for s in series]) if series else np.zeros(0)
        self.owner = np.repeat(np.arange(len(series)), lengths)
        self.span = span

    def at(self, t: float) -> np.ndarray:
        if not self.series:
            return np.zeros(0)
        if t < 0 or t > self.span:
            return np.zeros(len(self.series))
        counts = np.bincount(self.owner, weights=self.times <= t, minlength=len(self.series)).astype(np.int64)
        idx = self.offsets + counts - 1
        return np.where(counts > 0, self.values[np.maximum(idx, 0)], 0.0)

    @cached_property
    def means(self) -> np.ndarray:
        if not self.series or self.span <= 0:
            return np.zeros(len(self.series))
        nxt = np.append(self.times[1:], self.span)
        last = self.offsets + self.lengths - 1
        nxt[last[self.lengths > 0]] = self.span  # a series' last value holds to the end of the iteration
        held = np.clip(np.minimum(nxt, self.span) - self.times, 0.0, None)
        sums = np.bincount(self.owner, weights=self.values * held, minlength=len(self.series))
        return sums / self.span


class _Lane:
    """Union of one compute lane's busy slices, with the busy time accumulated before each interval."""

    def __init__(self, start: np.ndarray, end: np.ndarray):
        if len(start) == 0:
            self.start = self.end = self.before = np.zeros(0)
            return
        reach = np.maximum.accumulate(end)
        first = np.flatnonzero(np.concatenate([[True], start[1:] > reach[:-1]]))
        self.start = start[first]
        self.end = np.maximum.reduceat(end, first)
        self.before = np.concatenate([[0.0], np.cumsum(self.end - self.start)])[:-1]

    def busy_until(self, t: float) -> float:
        k = int(np.searchsorted(self.start, t, side="right")) - 1
        if k < 0:
            return 0.0
        return float(self.before[k] + min(t, self.end[k]) - self.start[k])

    def busy_at(self, t: float) -> bool:
        k = int(np.searchsorted(self.start, t, side="right")) - 1
        return k >= 0 and t < self.end[k]


class _Index:
    """Derived arrays of one result. It refers to the result weakly: the cache below holds indexes for
    as long as their results live, so a strong reference here would keep every run ever shown alive."""

    def __init__(self, result: Result):
        self._ref = weakref.ref(result)
        self.span = time_span(result)

    @property
    def result(self) -> Result:
        result = self._ref()
        assert result is not None, "an index outlived its result"
        return result

    @cached_property
    def links(self) -> _Links:
        return _Links(self.result, self.span)

    @cached_property
    def lanes(self) -> list[tuple[list[str], _Lane]]:
        """(devices, busy intervals) per compute lane that ``lane_devices`` maps to devices."""
        timeline, lane_devices = self.result.timeline, self.result.lane_devices
        if not lane_devices:
            return []
        a = timeline.arrays()
        out = []
        for li, lane in enumerate(timeline.lanes):
            devices = lane_devices.get(lane.name)
            if not devices:
                continue
            mask = (a["lane"] == li) & (a["category"] != _IDLE)
            start = a["start"][mask]
            out.append((list(devices), _Lane(start, start + a["dur"][mask])))
        return out


_CACHE: dict[int, tuple[weakref.ref, _Index]] = {}


def _index(result: Result) -> _Index:
    key = id(result)
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is result:
        return hit[1]
    for k in [k for k, (ref, _) in _CACHE.items() if ref() is None]:
        del _CACHE[k]
    index = _Index(result)
    _CACHE[key] = (weakref.ref(result), index)
    return index


def _by_key(keys: list[LinkKey], values: np.ndarray) -> dict[LinkKey, float]:
    out: dict[LinkKey, float] = {}
    for key, v in zip(keys, values.tolist(), strict=True):
        out[key] = max(v, out.get(key, 0.0))
    return out


def series_value_at(series: Series, t: float, end: float | None = None) -> float:
    """A piecewise-constant series' value at ``t`` (0 before its first point and after ``end``)."""
    if end is not None and t > end:
        return 0.0
    k = int(np.searchsorted(np.asarray(series.times, float), t, side="right")) - 1
    return float(series.values[k]) if k >= 0 else 0.0


def window_average(series: Series, end: float, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact time-weighted means of a piecewise-constant series over ``bins`` windows of [0, end]."""
    edges = np.linspace(0.0, end, bins + 1)
    if end <= 0:
        return edges, np.zeros(bins)
    return edges, window_means(series.times, series.values, edges)


def link_utilisation_at(result: Result, t: float) -> dict[LinkKey, float]:
    links = _index(result).links
    return _by_key(links.keys, links.at(t))


def average_link_utilisation(result: Result) -> dict[LinkKey, float]:
    links = _index(result).links
    return _by_key(links.keys, links.means)


def busiest_links(result: Result, n: int | None = None) -> list[tuple[Series, float]]:
    links = _index(result).links
    order = np.argsort(-links.means, kind="stable")
    ranked = [(links.series[i], float(links.means[i])) for i in order]
    return ranked if n is None else ranked[:n]


def device_activity_at(result: Result, t: float, window_s: float | None = None) -> dict[str, float]:
    index = _index(result)
    span = index.span
    window = span * DEFAULT_WINDOW_FRACTION if window_s is None else window_s
    a, b = max(0.0, t - window / 2), min(span, t + window / 2)
    out: dict[str, float] = {}
    for devices, lane in index.lanes:
        if b - a > 0:
            busy = (lane.busy_until(b) - lane.busy_until(a)) / (b - a)
        else:
            busy = 1.0 if lane.busy_at(t) else 0.0
        for d in devices:
            out[d] = max(busy, out.get(d, 0.0))
    return out


def average_device_activity(result: Result) -> dict[str, float]:
    index = _index(result)
    out: dict[str, float] = {}
    for devices, lane in index.lanes:
        busy = lane.busy_until(index.span) / index.span if index.span > 0 else 0.0
        for d in devices:
            out[d] = max(busy, out.get(d, 0.0))
    return out


def link_data_note(result: Result, detail: bool = False) -> str:
    """Why a run has no link utilisation to show ("" when it has some); ``detail`` adds what to do."""
    if result.link_utilisation:
        return ""
    if result.engine == "analytic":
        return "no link data for analytic runs" + (
            ": the analytic engine computes transfer times in closed form, without a time series; the event "
            "engine (run.engine = event) records link utilisation" if detail else "")
    if result.devices == 1:
        return "no link data: one device has no links to other devices" + (
            " (its cores' NoC and DRAM traffic are under the op chosen on the canvas)" if detail else "")
    return "no link data: this run recorded no link traffic"


def activity_note(result: Result) -> str:
    """Why a run has no device activity to show, or "" when some lane maps to devices."""
    if _index(result).lanes:
        return ""
    engine = result.engine
    return f"no device activity: this {engine + ' ' if engine else ''}run has no timeline lanes on devices"


def missing_data_notes(result: Result) -> list[str]:
    return [note for note in (activity_note(result), link_data_note(result)) if note]


def _track_total_at(track: MemoryTrack, t: float) -> float:
    k = int(np.searchsorted(np.asarray(track.times, float), t, side="right")) - 1
    if k < 0:
        return 0.0
    return float(sum(values[k] for values in track.by_category.values()))


def memory_occupancy_at(result: Result, t: float) -> dict[str, float]:
    return {tr.device: _track_total_at(tr, t) for tr in result.memory}


def memory_fraction_at(result: Result, t: float) -> dict[str, float]:
    return {
        tr.device: (_track_total_at(tr, t) / tr.capacity_bytes if tr.capacity_bytes > 0 else 0.0)
        for tr in result.memory
    }


def fullest_first(tracks: list[MemoryTrack]) -> list[tuple[MemoryTrack, float]]:
    """(track, peak bytes), fullest relative to capacity first (the worker computes this after a run)."""
    peaks = [(tr, float(np.max(np.sum([np.asarray(v, float) for v in tr.by_category.values()], axis=0)))
              if tr.times and tr.by_category else 0.0) for tr in tracks]
    return sorted(peaks, key=lambda tp: -(tp[1] / tp[0].capacity_bytes if tp[0].capacity_bytes else tp[1]))
