"""A simpy-driven flow network: transfers are flows on routes sharing links max-min fairly.

Rates are recomputed only when a flow starts or ends, once per timestamp, and only for the connected
component of flows that share links with the changed ones; a flow alone on its links gets its route's
bottleneck at once. Completion events are simpy timeouts that carry a version, so a rate change
simply makes older timeouts stale.

Bookkeeping is per *usage pattern* (the link-usage dict of a collective phase, shared by every flow of
that phase): a pattern keeps the sum of its flows' rates over time and the bytes it carried, and link
series are derived from patterns at the end — O(1) per flow event instead of O(links).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import simpy
from tilewright.engine.engines.event.maxmin import independent_rates, max_min_rates_arrays

SYNC_COMPONENT = 8  # components up to this many flows are re-solved at once, without a batching event


@dataclass
class LinkTrace:
    """Piecewise-constant load (bytes/s): ``loads[i]`` holds from ``times[i]`` until the next time."""

    times: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)

    def record(self, t: float, load: float) -> None:
        if self.times and self.times[-1] == t:
            self.loads[-1] = load
        else:
            self.times.append(t)
            self.loads.append(load)


@dataclass
class ArrayTrace:
    """``LinkTrace`` as numpy arrays (what bulk consumers want)."""

    times: np.ndarray
    loads: np.ndarray


def _sum_traces(parts: list[tuple[float, np.ndarray, np.ndarray]]) -> ArrayTrace:
    """Sum patterns' piecewise-constant rates (× their use of the link) into one load trace."""
    if not parts:
        return ArrayTrace(np.zeros(0), np.zeros(0))
    t = np.concatenate([times for _u, times, _d in parts])
    d = np.concatenate([u * deltas for u, _t, deltas in parts])
    order = np.argsort(t, kind="stable")
    t, load = t[order], np.cumsum(d[order])
    keep = np.append(t[1:] != t[:-1], True)  # last value at each timestamp
    load = np.where(np.abs(load[keep]) < 1e-6, 0.0, load[keep])
    return ArrayTrace(t[keep], load)


def _pattern_deltas(p: Pattern) -> list[tuple[np.ndarray, np.ndarray]]:
    """A pattern's rate changes as (times, deltas): its flows' trace, and +rate/−rate at each booking."""
    out = []
    if p.trace.times:
        out.append((np.asarray(p.trace.times), np.diff(np.asarray(p.trace.loads), prepend=0.0)))
    if p.booked:
        b = np.asarray(p.booked)
        out.append((np.concatenate([b[:, 0], b[:, 1]]), np.concatenate([b[:, 2], -b[:, 2]])))
    return out


@dataclass(eq=False)
class Pattern:
    usage: Mapping[int, float]
    solve: Mapping[int, float]  # the links the max-min solver needs (see engine.engines.event.compress)
    alone_rate: float = 0.0  # the route's bottleneck: a flow's rate with nothing else on its links
    # the solver links that can reach flows of other patterns (and the first, which reaches this one's),
    # in ``solve`` order, valid while ``walk_version`` is the network's pattern version
    walk: list[set[int]] = field(default_factory=list)
    walk_version: int = -1
    rows: tuple[np.ndarray, np.ndarray] | None = None  # ``solve`` as (link ids, usages), for the solver
    rate_sum: float = 0.0
    bytes: float = 0.0
    trace: LinkTrace = field(default_factory=LinkTrace)
    booked: list[tuple[float, float, float]] = field(default_factory=list)  # (start, end, rate) without flows


@dataclass(slots=True, eq=False)
class Flow:
    fid: int
    pattern: Pattern
    remaining: float
    latency: float
    done: simpy.Event
    rate: float = 0.0
    updated: float = 0.0
    version: int = 0

    @property
    def usage(self) -> Mapping[int, float]:
        return self.pattern.solve


class FlowNetwork:
    def __init__(
        self,
        env: simpy.Environment,
        capacity: list[float],
        *,
        contention: bool = True,
        reduced: dict[int, dict[int, float]] | None = None,
    ):
        self.env = env
        self.reduced = reduced or {}
        self.capacity = capacity
        self._capacity = np.asarray(capacity, dtype=float)
        self.contention = contention
        self.flows: dict[int, Flow] = {}
        self.on_link: dict[int, set[int]] = {}
        self.patterns: dict[int, Pattern] = {}
        self._next_id = 0
        self._dirty: set[int] = set()
        self._freed_links: set[int] = set()
        self._pending = False
        self._heap: list[tuple[float, int, int]] = []  # (finish time, flow id, version)
        self._wake_at = float("inf")
        self.flow_count = 0
        # how many patterns' solver links include each link, bumped as patterns appear (see _component)
        self._link_patterns: dict[int, int] = {}
        self._pattern_version = 0
        # max-min solutions by the component's patterns in order: the solver is a pure function of them
        self._solved: dict[tuple[Pattern, ...], list[float]] = {}

    # -- public -------------------------------------------------------------------------------
    def transfer(self, usage: Mapping[int, float], nbytes: float, latency: float = 0.0) -> simpy.Event:
        """An event that fires when ``nbytes`` have crossed every link of ``usage`` (plus ``latency``).

        ``usage`` must not be mutated afterwards: flows of one pattern share it."""
        done = self.env.event()
        if nbytes <= 0 or not usage:
            self._finish_after(done, latency)
            return done
        pattern = self._pattern(usage)
        usage = pattern.solve
        pattern.bytes += nbytes
        fid = self._next_id
        self._next_id += 1
        self.flow_count += 1
        flow = Flow(fid, pattern, float(nbytes), latency, done, updated=self.env.now)
        self.flows[fid] = flow
        alone = True
        on_link = self.on_link
        for link in usage:
            members = on_link.get(link)
            if members is None:
                on_link[link] = {fid}
            else:
                if members:  # flows that finished leave an empty set behind: that is not sharing
                    alone = False
                members.add(fid)
        if not self.contention or alone:
            # contention off, or nothing else on its links: its rate is its route's bottleneck, now
            rate = pattern.alone_rate
            self._set_rate(flow, rate)
            self._add_rate(flow, rate)
            return done
        self._dirty.add(fid)
        comp = None if self._pending else self._component({fid}, limit=SYNC_COMPONENT)
        if comp is not None and len(comp) <= SYNC_COMPONENT:
            # a small component: solve now, no event needed; when ``fid`` is the only change, that walk
            # (whole, as it stayed under the limit) is the component the solve needs
            only = len(self._dirty) == 1 and not self._freed_links
            self._recompute(component=comp if only else None)
        else:
            self._schedule_recompute()  # many flows may start at this instant: solve once for all
        return done

    def account(self, usage: Mapping[int, float], nbytes: float, start: float, end: float | None = None) -> float:
        """Book a transfer that needs no flow — its links carry nothing else (the event engine folds such
        tensor-parallel collectives into compute) — from ``start``, possibly ahead of the clock: its bytes,
        and its load on every link over time, as ``transfer`` would have recorded them. Alone on its
        links it runs at its route's bottleneck; with ``end``, it is spread evenly over [start, end)
        instead (a pass accounted as a whole). Returns when the bytes have crossed (no latency).

        Bookings are kept apart from the flows' trace and added to it when link traces are summed, so
        they may come in any order."""
        if nbytes <= 0 or not usage:
            return start
        pattern = self._pattern(usage)
        pattern.bytes += nbytes
        if end is None:
            end = start + nbytes / pattern.alone_rate
        if end > start:
            pattern.booked.append((start, end, nbytes / (end - start)))
        return max(start, end)

    def link_bytes(self) -> dict[int, float]:
        out: dict[int, float] = {}
        for p in self.patterns.values():
            for link, u in p.usage.items():
                out[link] = out.get(link, 0.0) + u * p.bytes
        return out

    def link_trace(self, link: int) -> LinkTrace:
        """The load of one link over time, summed over the patterns that cross it."""
        trace = self.link_traces([link])[link]
        return LinkTrace(trace.times.tolist(), trace.loads.tolist())

    def link_traces(self, links: list[int]) -> dict[int, ArrayTrace]:
        """Loads over time of several links at once."""
        return dict(self.iter_link_traces(links))

    def iter_link_traces(self, links: list[int]) -> Iterator[tuple[int, ArrayTrace]]:
        """(link, load trace) in the order given, each summed only when asked for (one pass over the
        patterns builds the index; numpy per link)."""
        wanted = set(links)
        crossing: dict[int, list[tuple[float, np.ndarray, np.ndarray]]] = {lk: [] for lk in links}
        for p in self.patterns.values():
            if not p.trace.times and not p.booked:
                continue
            parts = None
            for link, u in p.usage.items():
                if u and link in wanted:
                    if parts is None:
                        parts = _pattern_deltas(p)
                    crossing[link] += [(u, *part) for part in parts]
        for lk in links:
            yield lk, _sum_traces(crossing[lk])

    # -- internals ------------------------------------------------------------------------------
    def _pattern(self, usage: Mapping[int, float]) -> Pattern:
        pattern = self.patterns.get(id(usage))
        if pattern is None or pattern.usage is not usage:
            solve = self.reduced.get(id(usage), usage)
            (alone_rate,) = independent_rates([solve], self.capacity)
            pattern = self.patterns[id(usage)] = Pattern(usage, solve, alone_rate)
            counts = self._link_patterns
            for link in solve:
                counts[link] = counts.get(link, 0) + 1
            self._pattern_version += 1
        return pattern

    @staticmethod
    def _rows(pattern: Pattern) -> tuple[np.ndarray, np.ndarray]:
        if pattern.rows is None:
            solve = pattern.solve
            pattern.rows = (
                np.fromiter(solve.keys(), dtype=np.intp, count=len(solve)),
                np.fromiter(solve.values(), dtype=float, count=len(solve)),
            )
        return pattern.rows

    def _walk(self, pattern: Pattern) -> list[set[int]]:
        """The flow sets (``on_link``) of the links of ``pattern`` a component walk must visit. Every flow
        of a pattern is on all its links, so once its first link is visited every flow of the pattern is
        in the component, and a link no other pattern uses can add nothing more: skipping those visits
        the same flows in the same order. (An empty set in ``on_link`` means what a missing one does.)"""
        if pattern.walk_version != self._pattern_version:
            counts, on_link = self._link_patterns, self.on_link
            pattern.walk = [
                on_link.setdefault(lk, set()) for i, lk in enumerate(pattern.solve) if i == 0 or counts[lk] > 1
            ]
            pattern.walk_version = self._pattern_version
        return pattern.walk

    def _finish_after(self, done: simpy.Event, latency: float) -> None:
        """Trigger ``done`` after ``latency`` with one scheduled event (what simpy's Timeout does)."""
        done._ok = True
        done._value = None
        self.env.schedule(done, delay=latency)

    def _schedule_recompute(self) -> None:
        if not self._pending:
            self._pending = True
            self.env.timeout(0).callbacks.append(self._recompute)

    def _component(self, seeds: set[int], limit: int | None = None) -> set[int]:
        """Flows connected to ``seeds`` through shared links (stops early past ``limit``: then only its
        size says anything — it is more than ``limit``)."""
        seen = set(seeds)
        stack = list(seeds)
        walked: set[Pattern] = set()  # a pattern walked once has had all its links' flows seen
        while stack:
            flow = self.flows.get(stack.pop())
            if flow is None or flow.pattern in walked:
                continue
            walked.add(flow.pattern)
            for members in self._walk(flow.pattern):  # a link seen before adds nothing new: no need to skip it
                for other in members:
                    if other not in seen:
                        seen.add(other)
                        stack.append(other)
                if limit is not None and len(seen) > limit:
                    return seen
        return seen

    def _recompute(self, _event: simpy.Event | None = None, component: set[int] | None = None) -> None:
        self._pending = False
        seeds = {f for f in self._dirty if f in self.flows}
        seeds |= {f for link in self._freed_links for f in self.on_link.get(link, ())}
        self._dirty.clear()
        self._freed_links.clear()
        if not seeds:
            return
        if component is None:
            component = self._component(seeds)
        comp = [self.flows[f] for f in component if f in self.flows]
        now = self.env.now
        for flow in comp:
            flow.remaining = max(0.0, flow.remaining - flow.rate * (now - flow.updated))
            flow.updated = now
        if len(comp) == 1:  # alone again: its route's bottleneck
            rates = [comp[0].pattern.alone_rate]
        else:
            key = tuple(f.pattern for f in comp)
            rates = self._solved.get(key)
            if rates is None:
                rates = self._solved[key] = max_min_rates_arrays([self._rows(p) for p in key], self._capacity)
        for flow, rate in zip(comp, rates, strict=True):
            if rate != flow.rate:
                self._add_rate(flow, rate - flow.rate)
            self._set_rate(flow, rate)

    def _add_rate(self, flow: Flow, delta: float) -> None:
        p = flow.pattern
        p.rate_sum += delta
        if -1e-6 < p.rate_sum < 1e-6:
            p.rate_sum = 0.0
        p.trace.record(self.env.now, p.rate_sum)

    def _set_rate(self, flow: Flow, rate: float) -> None:
        """Give ``flow`` a rate and (re)book its finish. Finishes live in one heap with one pending
        wake-up, so a rate change leaves a stale heap entry, not a stale simpy event."""
        now = self.env.now
        flow.rate = rate
        flow.updated = now
        flow.version += 1
        if rate <= 0:
            return
        finish = now if rate == float("inf") else now + flow.remaining / rate
        heapq.heappush(self._heap, (finish, flow.fid, flow.version))
        if finish < self._wake_at:
            self._wake_at = finish
            self.env.timeout(finish - now).callbacks.append(self._wake)

    def _wake(self, _event: simpy.Event) -> None:
        now = self.env.now
        if now >= self._wake_at:
            self._wake_at = float("inf")
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, fid, version = heapq.heappop(heap)
            flow = self.flows.get(fid)
            if flow is not None and flow.version == version:
                self._complete(flow, version)
        if heap and heap[0][0] < self._wake_at:
            self._wake_at = heap[0][0]
            self.env.timeout(self._wake_at - now).callbacks.append(self._wake)

    def _complete(self, flow: Flow, version: int) -> None:
        if flow.version != version or flow.fid not in self.flows:
            return
        del self.flows[flow.fid]
        self._add_rate(flow, -flow.rate)
        flow.remaining = 0.0
        for link in flow.pattern.solve:
            members = self.on_link[link]
            members.discard(flow.fid)
            if self.contention and members:
                self._freed_links.add(link)
        self._finish_after(flow.done, flow.latency)
        if self.contention and self._freed_links:
            self._schedule_recompute()
