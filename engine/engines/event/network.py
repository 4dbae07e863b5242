"""A simpy-driven flow network: transfers are flows on routes sharing links max-min fairly.

Rates are recomputed only when a flow starts or ends, once per timestamp, and only for the connected
component of flows that share links with the changed ones; a flow alone on its links gets its route's
bottleneck at once. Completion events are simpy timeouts that carry a version, so a rate change
simply makes older timeouts stale.

Bookkeeping is per *usage pattern* (the link-usage dict of a collective phase, shared by every flow of
that phase): a pattern keeps the sum of its flows' rates over time and the bytes it carried, and link
series are derived from patterns at the end — O(1) per flow event instead of O(links).

A component's max-min solution is kept by its patterns, and, when every usage is a whole number (link
loads then add up exactly in any order), reused for every order its flows come in: the same rates, bit
for bit (``FlowNetwork._solve``). A 64 × 64-tile wafer run solves 1.6 k components instead of 21 k.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from heapq import heappop, heappush
from itertools import compress, repeat

import numpy as np
import simpy
from simpy.events import NORMAL, Event
from tilewright.engine.engines.event.maxmin import independent_rates, max_min_rates_arrays, progressive_fill

NETWORK = "network"  # the category of bytes whose mover did not say what it is
SYNC_COMPONENT = 8  # components up to this many flows are re-solved at once, without a batching event
EXACT_SUM = 2.0**32  # whole usages below this add up exactly in any order (far from 2**53)
INF = float("inf")
# Runs an iterator to its end in C: a flow joins and leaves its ~50 links on a wafer (``Pattern.sets``) as
# ``_consume(map(set.add, sets, repeat(fid)))``, the same set operations in the same order as a Python loop.
_consume = deque(maxlen=0).extend


def _call_later(env: simpy.Environment, delay: float, callback: Callable[[Event], None]) -> None:
    """``env.timeout(delay).callbacks.append(callback)`` without the Timeout class: a triggered event scheduled
    ``delay`` from now, as ``Environment.schedule`` schedules it (the same time, priority and event number).
    The flow network asks for ~300 k of them in a wafer run."""
    event = Event(env)
    event._ok = True
    event._value = None
    event.callbacks.append(callback)
    heappush(env._queue, (env._now + delay, NORMAL, next(env._eid), event))


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
    # the flow sets of the solver links a component walk visits (see ``FlowNetwork._walk``), in ``solve``
    # order, valid while ``walk_version`` is the network's pattern version
    walk: list[set[int]] = field(default_factory=list)
    walk_version: int = -1
    rows: tuple[np.ndarray, np.ndarray] | None = None  # ``solve`` as (link ids, usages), for the solver
    serial: int = 0  # creation order: the canonical order of a component's patterns (``FlowNetwork._solve``)
    whole: bool = False  # every usage in ``solve`` a whole number below EXACT_SUM
    # (link, its ``on_link`` set) for the links of ``solve`` in order, the links and the sets alone: a flow
    # joins and leaves its links without a dict lookup per link (``on_link`` sets are never replaced)
    members: list[tuple[int, set[int]]] = field(default_factory=list)
    links: list[int] = field(default_factory=list)
    sets: list[set[int]] = field(default_factory=list)
    rate_sum: float = 0.0
    bytes: float = 0.0
    trace: LinkTrace = field(default_factory=LinkTrace)
    booked: list[tuple[float, float, float]] = field(default_factory=list)  # (start, end, rate) without flows
    by_category: dict[str, float] = field(default_factory=dict)  # its bytes by what moved them (``transfer``)


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
        self._wake_at = INF
        self.flow_count = 0
        # the patterns (by ``id(usage)``) whose solver links include each link: every pattern the run can
        # issue (``reduced``), and any other as it appears, which bumps the version (see ``_walk``)
        self._link_users: dict[int, set[int]] = {}
        for key, solve in self.reduced.items():
            for link in solve:
                self._link_users.setdefault(link, set()).add(key)
        self._pattern_version = 0
        # max-min solutions by the component's patterns in order: the solver is a pure function of them
        self._solved: dict[tuple[Pattern, ...], list[float]] = {}
        # ... and by the patterns in canonical order (None: the solver's guard acted; see ``_solve``)
        self._canonical: dict[tuple[Pattern, ...], list[float] | None] = {}
        self._serial = 0

    # -- public -------------------------------------------------------------------------------
    def transfer(
        self, usage: Mapping[int, float], nbytes: float, latency: float = 0.0, category: str = NETWORK
    ) -> simpy.Event:
        """An event that fires when ``nbytes`` have crossed every link of ``usage`` (plus ``latency``).
        ``category``: what moves them (a time category: "tp_comm", "ep_comm", "memory", …), for the link
        lanes' colours (``link_categories``).

        ``usage`` must not be mutated afterwards: flows of one pattern share it."""
        done = self.env.event()
        if nbytes <= 0 or not usage:
            self._finish_after(done, latency)
            return done
        pattern = self.patterns.get(id(usage))
        if pattern is None or pattern.usage is not usage:
            pattern = self._pattern(usage)
        pattern.bytes += nbytes
        pattern.by_category[category] = pattern.by_category.get(category, 0.0) + nbytes
        fid = self._next_id
        self._next_id += 1
        self.flow_count += 1
        flow = Flow(fid, pattern, float(nbytes), latency, done, updated=self.env._now)
        self.flows[fid] = flow
        # alone: no other flow on any of its links (finished flows leave empty sets: that is not sharing)
        sets = pattern.sets
        alone = not any(sets)
        _consume(map(set.add, sets, repeat(fid)))
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

    def account(
        self,
        usage: Mapping[int, float],
        nbytes: float,
        start: float,
        end: float | None = None,
        category: str = NETWORK,
    ) -> float:
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
        pattern.by_category[category] = pattern.by_category.get(category, 0.0) + nbytes
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

    def link_category_bytes(self) -> dict[int, dict[str, float]]:
        """Per link that carried bytes, its bytes by the category that moved them (in the order first seen)."""
        per: dict[int, dict[str, float]] = {}
        for p in self.patterns.values():
            for link, u in p.usage.items():
                if not u:
                    continue
                tally = per.setdefault(link, {})
                for category, nbytes in p.by_category.items():
                    tally[category] = tally.get(category, 0.0) + u * nbytes
        return per

    def link_categories(self, per: dict[int, dict[str, float]] | None = None) -> dict[int, str]:
        """Per link that carried bytes, the category that carried most of them (ties: the first seen);
        ``per``: ``link_category_bytes``, when the caller has it already."""
        per = self.link_category_bytes() if per is None else per
        return {link: max(tally, key=tally.__getitem__) for link, tally in per.items() if tally}

    def category_traces(self, links: list[int]) -> dict[int, dict[str, ArrayTrace]]:
        """Some links' loads over time split by category, each pattern under the category that moved most of
        its bytes (a pattern is one collective phase or stream: in practice it has one). One pass over the
        patterns, as ``iter_link_traces``."""
        wanted = set(links)
        parts: dict[int, dict[str, list[tuple[float, np.ndarray, np.ndarray]]]] = {lk: {} for lk in links}
        for p in self.patterns.values():
            if not p.by_category or (not p.trace.times and not p.booked):
                continue
            deltas = None
            category = ""
            for link, u in p.usage.items():
                if u and link in wanted:
                    if deltas is None:
                        deltas = _pattern_deltas(p)
                        category = max(p.by_category, key=p.by_category.__getitem__)
                    parts[link].setdefault(category, []).extend((u, *part) for part in deltas)
        return {lk: {c: _sum_traces(found) for c, found in per.items()} for lk, per in parts.items()}

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
            self._serial += 1
            whole = all(float(u).is_integer() and 0 <= u < EXACT_SUM for u in solve.values())
            pattern = self.patterns[id(usage)] = Pattern(usage, solve, alone_rate, serial=self._serial, whole=whole)
            on_link = self.on_link
            pattern.members = [(link, on_link.setdefault(link, set())) for link in solve]
            pattern.links = [link for link, _members in pattern.members]
            pattern.sets = [members for _link, members in pattern.members]
            # a pattern of the universe by its usage's id (as ``reduced`` knows it); any other by its own
            # serial, negative, so that no id reused by a new usage dict could stand for an old pattern
            users, new = self._link_users, False
            key = id(usage) if id(usage) in self.reduced else -self._serial
            for link in solve:
                on = users.setdefault(link, set())
                if key not in on:
                    on.add(key)
                    new = True
            if new:
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
        """The flow sets (``on_link``) of the links of ``pattern`` a component walk must visit, in
        ``solve`` order. Every flow of a pattern is on all its links, so once a link is visited every
        flow of every pattern using it is in the component: a later link whose patterns all use an
        earlier visited one can add nothing (its own pattern's private links, and the many links a
        collective and a DRAM stream of one stage both cross). Skipping those visits the same flows in
        the same order. Patterns that do not exist yet only make the walk visit more links (with no
        flows of theirs), so the patterns of the whole run serve from the start. (An empty set in
        ``on_link`` means what a missing one does.)"""
        if pattern.walk_version != self._pattern_version:
            users = self._link_users
            covered: set[int] = set()
            walk = []
            for link, members in pattern.members:
                on = users[link]
                if not covered.issuperset(on):
                    covered |= on
                    walk.append(members)
            pattern.walk = walk
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
        flow_of, pop, push, see, version = self.flows.get, stack.pop, stack.append, seen.add, self._pattern_version
        while stack:
            flow = flow_of(pop())
            if flow is None:
                continue
            pattern = flow.pattern
            if pattern in walked:
                continue
            walked.add(pattern)
            walk = pattern.walk if pattern.walk_version == version else self._walk(pattern)
            for members in walk:  # a link seen before adds nothing new: no need to skip it
                for other in members:
                    if other not in seen:
                        see(other)
                        push(other)
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
        flows = self.flows
        comp = [flows[f] for f in component if f in flows]
        now = self.env._now
        for flow in comp:
            flow.remaining = max(0.0, flow.remaining - flow.rate * (now - flow.updated))
            flow.updated = now
        if len(comp) == 1:  # alone again: its route's bottleneck
            rates = [comp[0].pattern.alone_rate]
        else:
            key = tuple(f.pattern for f in comp)
            rates = self._solved.get(key)
            if rates is None:
                rates = self._solved[key] = self._solve(key)
        add_rate, set_rate = self._add_rate, self._set_rate
        for flow, rate in zip(comp, rates, strict=True):
            if rate != flow.rate:
                add_rate(flow, rate - flow.rate)
            set_rate(flow, rate)

    def _solve(self, key: tuple[Pattern, ...]) -> list[float]:
        """Max-min rates of flows with these patterns, in this order. With whole-number usages every link
        load is summed and reduced exactly, so the progressive filling does the same float operations on
        every link, and takes the same steps, in whatever order the flows come; only the solver's guard
        (see ``progressive_fill``) looks at the order. A component's flows come in many orders (set
        order of flow ids), so the solution is kept by the patterns in creation order and reused for
        every order — bit for bit the rates the ordered solve gives — unless the guard acted."""
        if all(p.whole for p in key):
            order = sorted(range(len(key)), key=lambda i: key[i].serial)
            canon = tuple(key[i] for i in order)
            if canon in self._canonical:
                solved = self._canonical[canon]
            else:
                solved, guarded = progressive_fill([self._rows(p) for p in canon], self._capacity)
                if guarded:
                    solved = None
                self._canonical[canon] = solved
            if solved is not None:
                rates = [0.0] * len(key)
                for j, i in enumerate(order):
                    rates[i] = solved[j]
                return rates
        return max_min_rates_arrays([self._rows(p) for p in key], self._capacity)

    def _add_rate(self, flow: Flow, delta: float) -> None:
        """``LinkTrace.record`` of the pattern's new rate sum, inlined (a call per flow event)."""
        p = flow.pattern
        rate_sum = p.rate_sum + delta
        if -1e-6 < rate_sum < 1e-6:
            rate_sum = 0.0
        p.rate_sum = rate_sum
        trace, now = p.trace, self.env._now
        times = trace.times
        if times and times[-1] == now:
            trace.loads[-1] = rate_sum
        else:
            times.append(now)
            trace.loads.append(rate_sum)

    def _set_rate(self, flow: Flow, rate: float) -> None:
        """Give ``flow`` a rate and (re)book its finish. Finishes live in one heap with one pending
        wake-up, so a rate change leaves a stale heap entry, not a stale simpy event."""
        env = self.env
        now = env._now
        flow.rate = rate
        flow.updated = now
        version = flow.version = flow.version + 1
        if rate <= 0:
            return
        finish = now if rate == INF else now + flow.remaining / rate
        heappush(self._heap, (finish, flow.fid, version))
        if finish < self._wake_at:
            self._wake_at = finish
            _call_later(env, finish - now, self._wake)

    def _wake(self, _event: simpy.Event) -> None:
        env = self.env
        now = env._now
        if now >= self._wake_at:
            self._wake_at = INF
        heap, flows = self._heap, self.flows
        while heap and heap[0][0] <= now:
            _, fid, version = heappop(heap)
            flow = flows.get(fid)
            if flow is not None and flow.version == version:
                self._complete(flow)
        if heap and heap[0][0] < self._wake_at:
            self._wake_at = heap[0][0]
            _call_later(env, self._wake_at - now, self._wake)

    def _complete(self, flow: Flow) -> None:
        """A current flow (``_wake`` checked its version) has carried its bytes: it leaves its links."""
        fid = flow.fid
        del self.flows[fid]
        self._add_rate(flow, -flow.rate)
        flow.remaining = 0.0
        pattern = flow.pattern
        _consume(map(set.discard, pattern.sets, repeat(fid)))
        if self.contention:  # the links still carrying flows, in the pattern's order
            self._freed_links.update(compress(pattern.links, pattern.sets))
        self._finish_after(flow.done, flow.latency)
        if self.contention and self._freed_links:
            self._schedule_recompute()
