"""Passes and collectives on the flow network: the event engine's timing of one step's work.

A pass runs segment by segment (compute, DRAM stream, tensor-parallel collective) as simpy timeouts and
flows — the slow path. A pass that needs no flows (its tensor group's links are private, or tp is 1, and
it streams nothing from DRAM) is accounted at once and waited out as one timeout — the fast path, exact,
and far fewer events; its collectives' bytes and link loads are booked on the network all the same (link
series and energy see them). Collectives that several units reach meet: the last to arrive starts them.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
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
from tilewright.engine.results.timeline import HOST_WAIT

CATEGORY_OF_PASS = {"F": "compute", "B": "compute", "R": "recompute"}
Traffic = list[tuple[dict[int, float], float, str]]  # (link usage, bytes per member, category): ``_pass_traffic``
# (busy, compute, comm, label, host wait, memory stall, tp_comm, ((category, seconds), ...), traffic): ``_pass_totals``
PassTotals = tuple[float, float, float, str, float, float, float, tuple[tuple[str, float], ...], Traffic]
# (segment, host wait, memory stall, slice label, (comm category, phases, comm seconds, label) or None)
SegmentFigures = tuple[Segment, float, float, str, tuple[str, tuple, float, str] | None]
# (segment, slice label, (collective, comm category, over replicas?, comm slice label) or None): ``_run_pass``
RunFigures = tuple[Segment, str, tuple[Collective, str, bool, str] | None]


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
        self._totals: dict[tuple, PassTotals] = {}
        self._segments: dict[tuple, list[SegmentFigures]] = {}
        self._run_segments: dict[tuple, list[RunFigures]] = {}
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
        figures: Iterable[RunFigures]
        if getattr(ps, "cache_key", ()):  # made on the fly (inference): worked out segment by segment
            figures = (self._run_figures(r, u[0], seg, tag) for seg in ps.segments)
        else:  # the plan's pass (training): once per stage and replica
            key = (r, u[0], id(ps))
            figures = self._run_segments.get(key)
            if figures is None:
                figures = self._run_segments[key] = [self._run_figures(r, u[0], seg, tag) for seg in ps.segments]
        times, whole = ledger.times, u[1] == WHOLE_GROUP
        for seg, label, comm in figures:
            start = env._now
            if seg.dram_bytes > 0:
                dram = self.net.transfer(dram_usage(plan, r, u, self.net.contention), seg.dram_bytes, 0.0, "memory")
                yield env.all_of([env.timeout(seg.busy_s), dram])
            else:
                yield env.timeout(seg.busy_s)
            took = env._now - start
            beyond = max(0.0, took - seg.compute_s)
            host = min(seg.dispatch_wait_s, beyond)  # the device idle for the host (``plan.timing.host_wait``)
            times[cat] += min(seg.compute_s, took)
            times["memory_stall"] += beyond - host
            times["host_wait"] += host
            self.rec.slice(lane, start, took, HOST_WAIT if seg.host_only else cat, label, r, step.micro_batch,
                           seg.layer)
            if seg.hidden and _books(u):
                self._book_hidden(r, seg, start, env._now)
            if comm is not None:
                coll, comm_cat, replicas, comm_label = comm
                start = env._now
                if whole:  # ``_tensor_collective`` of an aggregated unit, inlined: its phases one after another
                    transfer = self.net.transfer
                    for ph in coll.phases:
                        yield transfer(ph.usage, ph.bytes_per_member, ph.latency_s, comm_cat)
                else:
                    yield from self._tensor_collective(r, u, coll, comm_cat, replicas)
                times[comm_cat] += env._now - start
                self.rec.slice(lane, start, env._now - start, comm_cat, comm_label, r, step.micro_batch, seg.layer)

    def _run_figures(self, r: int, j: int, seg: Segment, tag: str) -> RunFigures:
        """What ``_run_pass`` needs of a segment of replica ``j``'s pass on stage ``r`` beyond its times:
        (segment, slice label, (collective, comm category, over replicas?, comm slice label) or None)."""
        comm = None
        if seg.comm:
            kind = seg.comm[0]
            comm = (self.plan.tp_collective(r, j, kind, seg.comm[1]), comm_category(kind), spans_replicas(kind),
                    f"{kind} {seg.label}")
        return seg, f"{seg.span_label} {tag}", comm

    def _fast_pass(self, r: int, u: Unit, ps: ChunkPass, step: Step, ledger: StageLedger, defer: bool) -> float | None:
        """Account a pass that needs no flows (private or no tensor-parallel links, no DRAM streams) and
        return how long to wait, or None when it must run segment by segment on the network."""
        if ps.has_dram or not (self.plan.tp == 1 or (r, u[0]) in self.private_tp):
            return None
        if ps.has_dp_comm and (self.net.contention or u[1] != WHOLE_GROUP):  # shares links with the replicas
            return None
        now = self.env._now
        t0 = now + self._owed.get((r, u), 0.0)
        cat = CATEGORY_OF_PASS[ps.kind]
        if self.segment_slices:
            tag = getattr(ps, "name", "") or ps.kind
            if getattr(ps, "cache_key", ()):  # made on the fly (inference): not worth keeping its segments
                t = t0
                for seg in ps.segments:
                    t = self._account(r, u, seg, t, cat, tag, step, ledger)
            else:
                t = self._account_pass(r, u, ps, t0, cat, tag, step, ledger)
        else:
            busy, compute, comm, label, host, stall, tp, replicas, traffic = self._pass_totals(r, u[0], ps)
            times = ledger.times
            times[cat] += compute
            times["memory_stall"] += stall
            times["host_wait"] += host
            times["tp_comm"] += tp
            for category, seconds in replicas:
                times[category] += seconds
            t = t0 + busy + comm
            self.rec.timeline.add(self.lanes[(r, u)], t0, t - t0, cat, label, r, step.micro_batch, -1)
            if u[1] in (WHOLE_GROUP, 0):  # one unit books its tensor group's traffic, spread over the pass
                account = self.net.account
                for usage, nbytes, category in traffic:
                    account(usage, nbytes, t0, t, category)
        if defer:
            self._owed[(r, u)] = t - now
            return 0.0
        self._owed[(r, u)] = 0.0
        return t - now

    def _pass_totals(self, r: int, j: int, ps: ChunkPass) -> PassTotals:
        """What a fast-path pass adds to its stage's times, once per pass (a long run repeats each pass
        thousands of times): busy, compute and tensor-parallel comm seconds, its slice label, its host
        wait, its memory stall, the comm booked as ``tp_comm`` and the rest by category (ZeRO-2/3, the
        context ring, the experts' all-to-all: ``pass_replica_comm``), its collectives' traffic
        (``_pass_traffic``) — each figure as the uncached accounting computed it, so the sums come out bit
        for bit the same."""
        key = (r, j, getattr(ps, "cache_key", ()) or id(ps))
        hit = self._totals.get(key)
        if hit is None:
            busy, compute, comm = pass_times(self.plan, r, ps, j)  # no DRAM stream on the fast path
            segs = ps.segments
            label = getattr(ps, "name", "") or (f"{segs[0].label}…{segs[-1].last_label or segs[-1].label} {ps.kind}"
                                                if segs else ps.kind)
            host = host_wait(ps, busy - compute)
            replicas = pass_replica_comm(self.plan, r, ps)
            hit = self._totals[key] = (busy, compute, comm, label, host, busy - compute - host,
                                       comm - sum(replicas.values()), tuple(replicas.items()),
                                       self._pass_traffic(r, j, ps))
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

    def _account_pass(
        self, r: int, u: Unit, ps: ChunkPass, t: float, cat: str, tag: str, step: Step, ledger: StageLedger
    ) -> float:
        """``_account`` of every segment of a pass the plan keeps (training's), each segment's figures worked
        out once per stage and replica (``_segment_figures``) instead of once per micro-batch: the same sums
        in the same order, the same slices and bookings."""
        key = (r, u[0], id(ps))  # the plan holds its passes for the whole run: their ids stay theirs
        figures = self._segments.get(key)
        if figures is None:
            figures = self._segments[key] = [self._segment_figures(r, u[0], seg, tag) for seg in ps.segments]
        lane, times, add = self.lanes[(r, u)], ledger.times, self.rec.timeline.add  # add: ``Recorder.slice``
        mb, books, account = step.micro_batch, u[1] in (WHOLE_GROUP, 0), self.net.account
        for seg, host, stall, label, comm in figures:
            busy = seg.busy_s
            times[cat] += seg.compute_s
            times["memory_stall"] += stall
            times["host_wait"] += host
            if busy > 0:
                add(lane, t, busy, HOST_WAIT if seg.host_only else cat, label, r, mb, seg.layer)
            if seg.hidden and _books(u):
                self._book_hidden(r, seg, t, t + busy)
            t += busy
            if comm is not None:
                comm_cat, phases, dur, comm_label = comm
                if books:  # one unit books its tensor group's traffic, phase by phase
                    start = t
                    for ph in phases:
                        start = account(ph.usage, ph.bytes_per_member, start, None, comm_cat) + ph.latency_s
                times[comm_cat] += dur
                if dur > 0:
                    add(lane, t, dur, comm_cat, comm_label, r, mb, seg.layer)
                t += dur
        return t

    def _segment_figures(self, r: int, j: int, seg: Segment, tag: str) -> SegmentFigures:
        """What ``_account`` works out for a segment of replica ``j``'s pass on stage ``r``, by the same
        expressions: (segment, host wait, memory stall, slice label, (comm category, collective phases,
        comm seconds, comm slice label) or None)."""
        host = min(seg.dispatch_wait_s, max(seg.busy_s - seg.compute_s, 0.0))
        comm = None
        if seg.comm:
            kind, nbytes = seg.comm[0], seg.comm[1]
            comm = (comm_category(kind), self.plan.tp_collective(r, j, kind, nbytes).phases,
                    self.plan.tp_time(r, j, kind, nbytes), f"{kind} {seg.label}")
        return seg, host, seg.busy_s - seg.compute_s - host, f"{seg.span_label} {tag}", comm

    def _account(self, r, u, seg: Segment, t: float, cat: str, tag: str, step: Step, ledger: StageLedger) -> float:
        lane = self.lanes[(r, u)]
        times = ledger.times
        host = min(seg.dispatch_wait_s, max(seg.busy_s - seg.compute_s, 0.0))
        times[cat] += seg.compute_s
        times["memory_stall"] += seg.busy_s - seg.compute_s - host
        times["host_wait"] += host
        self.rec.slice(lane, t, seg.busy_s, HOST_WAIT if seg.host_only else cat, f"{seg.span_label} {tag}", r,
                       step.micro_batch, seg.layer)
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
