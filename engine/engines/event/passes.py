"""Passes and collectives on the flow network: the event engine's timing of one step's work.

A pass runs segment by segment (compute, DRAM stream, tensor-parallel collective) as simpy timeouts and
flows — the slow path. A pass that needs no flows (its tensor group's links are private, or tp is 1, and
it streams nothing from DRAM) is accounted at once and waited out as one timeout — the fast path, exact,
and far fewer events; its collectives' bytes and link loads are booked on the network all the same (link
series and energy see them). Collectives that several units reach meet: the last to arrive starts them.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Protocol

import simpy
from tilewright.engine.engines.event.network import FlowNetwork
from tilewright.engine.engines.event.recorder import Recorder, StageLedger
from tilewright.engine.engines.event.traffic import WHOLE_GROUP, Unit, dram_usage
from tilewright.engine.perf.collectives import Collective
from tilewright.engine.plan.passes import ChunkPass, Segment
from tilewright.engine.plan.plan import Plan
from tilewright.engine.plan.sharding import comm_category, spans_replicas
from tilewright.engine.plan.timing import host_wait, pass_replica_comm, pass_times

CATEGORY_OF_PASS = {"F": "compute", "B": "compute", "R": "recompute"}


class Step(Protocol):
    micro_batch: int


class PassRunner:
    """The part of a simulation that runs passes and collectives (see ``Simulation``)."""

    plan: Plan
    env: simpy.Environment
    net: FlowNetwork
    rec: Recorder
    lanes: dict[tuple[int, Unit], int]
    private_tp: set[tuple[int, int]]
    segment_slices: bool

    def _init_passes(self) -> None:
        self._owed: dict[tuple[int, Unit], float] = {}  # fast-path time accounted, not yet waited
        self._totals: dict[tuple, tuple[float, float, float, str]] = {}
        self._traffic: dict[tuple, list[tuple[dict[int, float], float, str]]] = {}
        self._arrived: dict[tuple, int] = {}
        self._barriers: dict[tuple, simpy.Event] = {}
        self._collective_seq: dict[tuple[int, Unit, str], int] = {}

    # --- collectives and meetings --------------------------------------------------------------------
    def _collective(self, coll: Collective, category: str) -> Generator:
        for ph in coll.phases:
            yield self.net.transfer(ph.usage, ph.bytes_per_member, ph.latency_s, category)

    def _start(self, coll: Collective, category: str) -> simpy.Event:
        done = self.env.event()

        def proc():
            yield from self._collective(coll, category)
            done.succeed()

        self.env.process(proc())
        return done

    def _meet(self, key: tuple, expected: int, coll: Collective, category: str) -> simpy.Event:
        """``expected`` units reach the same collective: the last to arrive starts it; all get its end."""
        arrived = self._arrived.get(key, 0) + 1
        self._arrived[key] = arrived
        done = self._barriers.get(key)
        if done is None:
            done = self._barriers[key] = self.env.event()
        if arrived == expected:
            self._start(coll, category).callbacks.append(lambda _e: done.succeed())
        return done

    def _tensor_collective(
        self, r: int, u: Unit, coll: Collective, category: str, data_parallel: bool = False
    ) -> Generator:
        """A segment's collective: on the replica's tensor group, or (``data_parallel``: ``plan.sharding``,
        ``plan.context``) over the stage's replicas, which every unit of the stage reaches."""
        if u[1] == WHOLE_GROUP:
            yield from self._collective(coll, category)
            return
        group = "dp" if data_parallel else "tp"
        seq = self._collective_seq.get((r, u, group), 0)
        self._collective_seq[(r, u, group)] = seq + 1
        if data_parallel:
            yield self._meet(("dp-pass", r, seq), self.plan.tp * self.plan.dp, coll, category)
        else:
            yield self._meet(("tp", r, u[0], seq), self.plan.tp, coll, category)

    # --- passes --------------------------------------------------------------------------------------
    def _run_pass(self, r: int, u: Unit, ps: ChunkPass, step: Step, ledger: StageLedger) -> Generator:
        """Run one pass segment by segment on the network (compute, DRAM stream, collective): the slow
        path, for passes ``_fast_pass`` cannot account. First waits out any fast-path time still owed."""
        plan, env, lane = self.plan, self.env, self.lanes[(r, u)]
        cat = CATEGORY_OF_PASS[ps.kind]
        tag = getattr(ps, "name", "") or ps.kind  # inference passes are named ("prefill", "decode token 3")
        owed = self._owed.pop((r, u), 0.0)
        if owed:
            yield env.timeout(owed)
        for seg in ps.segments:
            start = env.now
            if seg.dram_bytes > 0:
                dram = self.net.transfer(dram_usage(plan, r, u, self.net.contention), seg.dram_bytes, 0.0, "memory")
                yield env.all_of([env.timeout(seg.busy_s), dram])
            else:
                yield env.timeout(seg.busy_s)
            took = env.now - start
            beyond = max(0.0, took - seg.compute_s)
            host = min(seg.dispatch_wait_s, beyond)  # the device idle for the host (``plan.timing.host_wait``)
            ledger.times[cat] += min(seg.compute_s, took)
            ledger.times["memory_stall"] += beyond - host
            ledger.times["host_wait"] += host
            self.rec.slice(lane, start, took, cat, f"{seg.label} {tag}", r, step.micro_batch, seg.layer)
            if seg.hidden and _books(u):
                self._book_hidden(r, seg, start, env.now)
            if seg.comm:
                start = env.now
                coll = plan.tp_collective(r, u[0], seg.comm[0], seg.comm[1])
                comm_cat = comm_category(seg.comm[0])
                yield from self._tensor_collective(r, u, coll, comm_cat, spans_replicas(seg.comm[0]))
                ledger.times[comm_cat] += env.now - start
                label = f"{seg.comm[0]} {seg.label}"
                self.rec.slice(lane, start, env.now - start, comm_cat, label, r, step.micro_batch, seg.layer)

    def _fast_pass(self, r: int, u: Unit, ps: ChunkPass, step: Step, ledger: StageLedger, defer: bool) -> float | None:
        """Account a pass that needs no flows (private or no tensor-parallel links, no DRAM streams) and
        return how long to wait, or None when it must run segment by segment on the network."""
        if ps.has_dram or not (self.plan.tp == 1 or (r, u[0]) in self.private_tp):
            return None
        if ps.has_dp_comm and (self.net.contention or u[1] != WHOLE_GROUP):  # shares links with the replicas
            return None
        now = self.env.now
        t0 = now + self._owed.get((r, u), 0.0)
        cat = CATEGORY_OF_PASS[ps.kind]
        if self.segment_slices:
            t = t0
            tag = getattr(ps, "name", "") or ps.kind
            for seg in ps.segments:
                t = self._account(r, u, seg, t, cat, tag, step, ledger)
        else:
            busy, compute, comm, label = self._pass_totals(r, u[0], ps)
            times = ledger.times
            host = host_wait(ps, busy - compute)
            times[cat] += compute
            times["memory_stall"] += busy - compute - host
            times["host_wait"] += host
            replicas = pass_replica_comm(self.plan, r, ps)  # ZeRO-2/3, context ring, expert all-to-all
            times["tp_comm"] += comm - sum(replicas.values())
            for category, seconds in replicas.items():
                times[category] += seconds
            t = t0 + busy + comm
            self.rec.timeline.add(self.lanes[(r, u)], t0, t - t0, cat, label, r, step.micro_batch, -1)
            if u[1] in (WHOLE_GROUP, 0):  # one unit books its tensor group's traffic, spread over the pass
                for usage, nbytes, category in self._pass_traffic(r, u[0], ps):
                    self.net.account(usage, nbytes, t0, t, category)
        if defer:
            self._owed[(r, u)] = t - now
            return 0.0
        self._owed[(r, u)] = 0.0
        return t - now

    def _pass_totals(self, r: int, j: int, ps: ChunkPass) -> tuple[float, float, float, str]:
        """(busy, compute, tensor-parallel comm seconds, slice label) of a fast-path pass, once."""
        key = (r, j, getattr(ps, "cache_key", ()) or id(ps))
        hit = self._totals.get(key)
        if hit is None:
            busy, compute, comm = pass_times(self.plan, r, ps, j)  # no DRAM stream on the fast path
            segs = ps.segments
            label = getattr(ps, "name", "") or (f"{segs[0].label}…{segs[-1].label} {ps.kind}" if segs else ps.kind)
            hit = self._totals[key] = (busy, compute, comm, label)
        return hit

    def _pass_traffic(self, r: int, j: int, ps: ChunkPass) -> list[tuple[dict[int, float], float, str]]:
        """Bytes per member of each link-usage pattern the tensor-parallel collectives of a pass move, and
        their category (the same pattern under two categories is booked twice)."""
        key = (r, j, getattr(ps, "cache_key", ()) or id(ps))
        hit = self._traffic.get(key)
        if hit is None:
            totals: dict[tuple[int, str], tuple[dict[int, float], float, str]] = {}
            for seg in ps.segments:
                # the hidden ring spans every replica's rings (``Segment.hidden``): booked for replica 0 alone
                for kind, size in ((seg.comm,) if seg.comm else ()) + (seg.hidden if j == 0 else ()):
                    category = comm_category(kind)
                    for ph in self.plan.tp_collective(r, j, kind, size).phases:
                        usage, nbytes, _c = totals.get((id(ph.usage), category), (ph.usage, 0.0, category))
                        totals[(id(ph.usage), category)] = (usage, nbytes + ph.bytes_per_member, category)
            hit = self._traffic[key] = list(totals.values())
        return hit

    def _account(self, r, u, seg: Segment, t: float, cat: str, tag: str, step: Step, ledger: StageLedger) -> float:
        lane = self.lanes[(r, u)]
        times = ledger.times
        host = min(seg.dispatch_wait_s, max(seg.busy_s - seg.compute_s, 0.0))
        times[cat] += seg.compute_s
        times["memory_stall"] += seg.busy_s - seg.compute_s - host
        times["host_wait"] += host
        self.rec.slice(lane, t, seg.busy_s, cat, f"{seg.label} {tag}", r, step.micro_batch, seg.layer)
        if seg.hidden and _books(u):
            self._book_hidden(r, seg, t, t + seg.busy_s)
        t += seg.busy_s
        if seg.comm:
            coll = self.plan.tp_collective(r, u[0], seg.comm[0], seg.comm[1])
            comm_cat = comm_category(seg.comm[0])
            if u[1] in (WHOLE_GROUP, 0):  # one unit books its tensor group's traffic, phase by phase
                start = t
                for ph in coll.phases:
                    start = self.net.account(ph.usage, ph.bytes_per_member, start, None, comm_cat) + ph.latency_s
            dur = self.plan.tp_time(r, u[0], seg.comm[0], seg.comm[1])
            times[comm_cat] += dur
            self.rec.slice(lane, t, dur, comm_cat, f"{seg.comm[0]} {seg.label}", r, step.micro_batch, seg.layer)
            t += dur
        return t

    def _book_hidden(self, r: int, seg: Segment, start: float, end: float) -> None:
        """The collectives a segment's kernels hide (the context ring's, ``Segment.hidden``): their bytes on the
        links, spread over the segment, as bookings, not flows — nothing waits for them, and they take no share
        of a link from the flows that are timed (the overlap the plan assumed)."""
        for kind, nbytes in seg.hidden:
            category = comm_category(kind)
            for ph in self.plan.tp_collective(r, 0, kind, nbytes).phases:
                self.net.account(ph.usage, ph.bytes_per_member, start, max(end, start + 1e-12), category)


def _books(u: Unit) -> bool:
    """The unit that books traffic spanning the stage's replicas (a hidden ring covers every replica's rings):
    the aggregated unit, or replica 0's first member."""
    return u[0] == 0 and u[1] in (WHOLE_GROUP, 0)
