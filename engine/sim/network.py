"""A simpy-driven flow network: transfers are flows on routes sharing links max-min fairly.

Rates are recomputed only when a flow starts or ends, once per timestamp, and only for the connected
component of flows that share links with the changed ones. Completion events are simpy timeouts that
carry a version, so a rate change simply makes older timeouts stale.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import simpy

from engine.sim.maxmin import independent_rates, max_min_rates


@dataclass(slots=True)
class Flow:
    fid: int
    usage: dict[int, float]
    remaining: float
    latency: float
    done: simpy.Event
    tag: str
    rate: float = 0.0
    updated: float = 0.0
    version: int = 0


@dataclass
class LinkTrace:
    """Piecewise-constant load (bytes/s) of one link: ``times[i]`` → ``loads[i]`` until the next time."""

    times: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)

    def record(self, t: float, load: float) -> None:
        if self.times and self.times[-1] == t:
            self.loads[-1] = load
        elif not self.loads or abs(self.loads[-1] - load) > 1e-9 * max(1.0, load):
            self.times.append(t)
            self.loads.append(load)


class FlowNetwork:
    def __init__(self, env: simpy.Environment, capacity: list[float], *, contention: bool = True):
        self.env = env
        self.capacity = capacity
        self.contention = contention
        self.flows: dict[int, Flow] = {}
        self.on_link: dict[int, set[int]] = {}
        self.load: dict[int, float] = {}
        self.traces: dict[int, LinkTrace] = {}
        self.bytes_on_link: dict[int, float] = {}
        self._next_id = 0
        self._dirty: set[int] = set()
        self._pending = False
        self._freed_links: set[int] = set()
        self.flow_count = 0

    # -- public -------------------------------------------------------------------------------
    def transfer(self, usage: Mapping[int, float], nbytes: float, latency: float = 0.0, tag: str = "") -> simpy.Event:
        """An event that fires when ``nbytes`` have crossed every link of ``usage`` (plus ``latency``)."""
        done = self.env.event()
        if nbytes <= 0 or not usage:
            self._finish_after(done, latency)
            return done
        fid = self._next_id
        self._next_id += 1
        self.flow_count += 1
        flow = Flow(fid, dict(usage), float(nbytes), latency, done, tag, updated=self.env.now)
        self.flows[fid] = flow
        for link, u in flow.usage.items():
            self.on_link.setdefault(link, set()).add(fid)
            self.bytes_on_link[link] = self.bytes_on_link.get(link, 0.0) + u * nbytes
        if not self.contention:
            (rate,) = independent_rates([flow.usage], self.capacity)
            self._set_rate(flow, rate)
            self._add_load(flow, rate)
            return done
        self._dirty.add(fid)
        self._schedule_recompute()
        return done

    # -- internals ------------------------------------------------------------------------------
    def _finish_after(self, done: simpy.Event, latency: float) -> None:
        if latency > 0:
            self.env.timeout(latency).callbacks.append(lambda _e: done.succeed())
        else:
            done.succeed()

    def _schedule_recompute(self) -> None:
        if not self._pending:
            self._pending = True
            self.env.timeout(0).callbacks.append(self._recompute)

    def _component(self, seeds: set[int]) -> set[int]:
        seen = set(seeds)
        stack = list(seeds)
        links_seen: set[int] = set()
        while stack:
            fid = stack.pop()
            flow = self.flows.get(fid)
            if flow is None:
                continue
            for link in flow.usage:
                if link in links_seen:
                    continue
                links_seen.add(link)
                for other in self.on_link.get(link, ()):
                    if other not in seen:
                        seen.add(other)
                        stack.append(other)
        return seen

    def _recompute(self, _event: simpy.Event | None = None) -> None:
        self._pending = False
        seeds = {f for f in self._dirty if f in self.flows}
        # a finished flow leaves its former neighbours dirty through its links
        seeds |= {f for link in self._freed_links for f in self.on_link.get(link, ())}
        self._dirty.clear()
        self._freed_links.clear()
        if not seeds:
            return
        comp = [self.flows[f] for f in self._component(seeds) if f in self.flows]
        now = self.env.now
        for flow in comp:
            self._advance(flow, now)
            self._add_load(flow, -flow.rate)
        rates = max_min_rates([f.usage for f in comp], self.capacity)
        for flow, rate in zip(comp, rates, strict=True):
            self._set_rate(flow, rate)
            self._add_load(flow, rate)

    def _advance(self, flow: Flow, now: float) -> None:
        flow.remaining = max(0.0, flow.remaining - flow.rate * (now - flow.updated))
        flow.updated = now

    def _add_load(self, flow: Flow, rate: float) -> None:
        now = self.env.now
        for link, u in flow.usage.items():
            value = self.load.get(link, 0.0) + u * rate
            if abs(value) < 1e-6:
                value = 0.0
            self.load[link] = value
            trace = self.traces.get(link)
            if trace is None:
                trace = self.traces[link] = LinkTrace()
            trace.record(now, value)

    def _set_rate(self, flow: Flow, rate: float) -> None:
        flow.rate = rate
        flow.updated = self.env.now
        flow.version += 1
        version = flow.version
        delay = flow.remaining / rate if rate > 0 else float("inf")
        if delay == float("inf"):
            return
        self.env.timeout(delay).callbacks.append(lambda _e, f=flow, v=version: self._complete(f, v))

    def _complete(self, flow: Flow, version: int) -> None:
        if flow.version != version or flow.fid not in self.flows:
            return
        del self.flows[flow.fid]
        self._add_load(flow, -flow.rate)
        flow.remaining = 0.0
        for link in flow.usage:
            members = self.on_link[link]
            members.discard(flow.fid)
            if self.contention and members:
                self._freed_links.add(link)
        self._finish_after(flow.done, flow.latency)
        if self.contention and self._freed_links:
            self._schedule_recompute()
