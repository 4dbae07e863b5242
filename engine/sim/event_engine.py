"""The event-driven engine: simpy processes per pipeline stage, transfers as max-min fair flows.

Coarse tasks only: a segment of a model chunk (the compute between two tensor-parallel collectives), a
collective phase, a point-to-point send, a DRAM stream. Symmetric data-parallel replicas are simulated
once (``aggregate``) — their collectives still span every replica's links — or all of them.
Tensor-parallel collectives whose links no other traffic ever touches cannot be contended, so they
are folded into the compute timeout (exact, and far fewer events).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Generator

import simpy

from engine.perf.collectives import Collective
from engine.plan.passes import ChunkPass, Segment
from engine.plan.plan import Plan
from engine.sim.compress import compress_patterns
from engine.sim.network import FlowNetwork
from engine.sim.recorder import Recorder, StageLedger
from engine.sim.schedules import Step, forward_only_order, predecessor, stage_order

CATEGORY_OF_PASS = {"F": "compute", "B": "compute", "R": "recompute"}
CHECK_EVERY = 2000  # events between progress reports and cancel checks
ProgressFn = Callable[[float], None]
CancelFn = Callable[[], bool]


class Cancelled(Exception):
    """The caller asked the simulation to stop."""
# Above this many passes the Gantt gets one slice per pass instead of one per segment and collective.
SEGMENT_SLICE_LIMIT = 20_000


class EventEngine:
    def __init__(self, plan: Plan, *, contention: bool = True, aggregate: bool = True, train: bool = True):
        self.plan = plan
        self.train = train
        self.env = simpy.Environment()
        hw = plan.hw
        self.replicas = [0] if aggregate else list(range(plan.dp))
        self.rec = Recorder()
        self.arrivals: dict[tuple, simpy.Event] = {}
        self._owed: dict[tuple[int, int], float] = {}  # fast-path time accounted, not yet waited
        self._totals: dict[tuple[int, int, int], tuple[float, float, float, str]] = {}
        self._arrived: dict[tuple[int, int, str], int] = {}
        self.total_steps = 0
        self.steps_done = 0
        self.steps_info: dict[tuple, tuple[float, float, tuple | None]] = {}  # step → (start, end, cause)
        self.last_step: dict[tuple[int, int], tuple | None] = {}
        self._reductions: dict[tuple[int, int, str], simpy.Event] = {}
        self.private_tp, patterns = self._traffic_patterns()
        capacity = [lk.bandwidth for lk in hw.links]
        self.net = FlowNetwork(
            self.env, capacity, contention=contention, reduced=compress_patterns(patterns, capacity)
        )
        passes = plan.pp * plan.chunks * plan.micro_batches * (3 if train else 1) * len(self.replicas)
        self.segment_slices = passes <= SEGMENT_SLICE_LIMIT
        self.lanes = {
            (r, j): self.rec.timeline.lane(
                f"stage {r}" + (f" · replica {j}" if not aggregate else ""), "compute", detail=self._group_text(r, j)
            )
            for r in range(plan.pp)
            for j in self.replicas
        }

    # --- set-up ------------------------------------------------------------------------------------
    def _group_text(self, r: int, j: int) -> str:
        devs = self.plan.stages[r].groups[j]
        return f"{len(devs)} devices from {self.plan.hw.devices[devs[0]].node}"

    def _traffic_patterns(self) -> tuple[set[tuple[int, int]], list[dict[int, float]]]:
        """Every link-usage pattern this run can issue, and the tensor groups whose collectives' links
        carry no other traffic (those are folded into compute)."""
        plan = self.plan
        tp_links: dict[tuple[int, int], set[int]] = {}
        tp_patterns: dict[tuple[int, int], list[dict[int, float]]] = {}
        for r, st in enumerate(plan.stages):
            for j in range(plan.dp):
                links: set[int] = set()
                pats = []
                for ps in st.passes.values():
                    for seg in ps.segments:
                        if seg.comm:
                            for ph in plan.tp_collective(r, j, seg.comm[0], seg.comm[1]).phases:
                                links |= ph.usage.keys()
                                pats.append(ph.usage)
                tp_links[(r, j)] = links
                tp_patterns[(r, j)] = pats
        count: dict[int, int] = {}
        for links in tp_links.values():
            for lk in links:
                count[lk] = count.get(lk, 0) + 1
        shared: set[int] = {lk for lk, n in count.items() if n > 1}
        others: list[dict[int, float]] = []
        for vs in range(plan.virtual_stages - 1):
            for j in range(plan.dp):
                for back in (False, True):
                    others += [ph.usage for ph in plan.p2p(vs, j, back).phases]
        for r, st in enumerate(plan.stages):
            for c in st.chunk_layers:
                others += [ph.usage for ph in plan.dp_collective(r, c).phases]
            others += [ph.usage for ph in plan.zero_gather(r).phases]
            if any(seg.dram_bytes > 0 for ps in st.passes.values() for seg in ps.segments):
                others += [self.plan.dram_usage(r, j) for j in range(plan.dp)]
        for usage in others:
            shared |= usage.keys()
        private = {key for key, links in tp_links.items() if links and not links & shared}
        patterns = others + [u for key, pats in tp_patterns.items() if key not in private for u in pats]
        return private, patterns

    def _event(self, key: tuple) -> simpy.Event:
        ev = self.arrivals.get(key)
        if ev is None:
            ev = self.arrivals[key] = self.env.event()
        return ev

    # --- execution ---------------------------------------------------------------------------------
    def _collective(self, coll: Collective) -> Generator:
        for ph in coll.phases:
            yield self.net.transfer(ph.usage, ph.bytes_per_member, ph.latency_s)

    def _run_pass(
        self, r: int, j: int, ps: ChunkPass, step: Step, ledger: StageLedger, defer: bool = False
    ) -> Generator:
        """Run one pass. On the fast path the time is only accounted; ``defer`` leaves it owed so the
        next pass's single timeout covers both (recompute then backward: one event, not two)."""
        plan, env, lane = self.plan, self.env, self.lanes[(r, j)]
        cat = CATEGORY_OF_PASS[ps.kind]
        tag = ps.kind  # the micro-batch has its own column: labels stay few and shared
        delay = self._fast_pass(r, j, ps, step, ledger, defer)
        if delay is not None:
            if not defer:
                yield env.timeout(delay)
            return
        owed = self._owed.pop((r, j), 0.0)
        if owed:
            yield env.timeout(owed)
        for seg in ps.segments:
            start = env.now
            if seg.dram_bytes > 0:
                dram = self.net.transfer(self.plan.dram_usage(r, j), seg.dram_bytes)
                yield env.all_of([env.timeout(seg.busy_s), dram])
            else:
                yield env.timeout(seg.busy_s)
            took = env.now - start
            ledger.times[cat] += min(seg.compute_s, took)
            ledger.times["memory_stall"] += max(0.0, took - seg.compute_s)
            self.rec.slice(lane, start, took, cat, f"{seg.label} {tag}", r, step.micro_batch, seg.layer)
            if seg.comm:
                start = env.now
                yield from self._collective(plan.tp_collective(r, j, seg.comm[0], seg.comm[1]))
                ledger.times["tp_comm"] += env.now - start
                self.rec.slice(
                    lane,
                    start,
                    env.now - start,
                    "tp_comm",
                    f"{seg.comm[0]} {seg.label}",
                    r,
                    step.micro_batch,
                    seg.layer,
                )

    def _fast_pass(
        self, r: int, j: int, ps: ChunkPass, step: Step, ledger: StageLedger, defer: bool
    ) -> float | None:
        """Account a pass that needs no flows (private or no tensor-parallel links, no DRAM streams) and
        return how long to wait, or None when it must run segment by segment on the network."""
        if ps.has_dram or not (self.plan.tp == 1 or (r, j) in self.private_tp):
            return None
        now = self.env.now
        t0 = now + self._owed.get((r, j), 0.0)
        cat = CATEGORY_OF_PASS[ps.kind]
        if self.segment_slices:
            t = t0
            for seg in ps.segments:
                t = self._account(r, j, seg, t, cat, ps.kind, step, ledger)
        else:
            busy, compute, comm, label = self._pass_totals(r, j, ps)
            times = ledger.times
            times[cat] += compute
            times["memory_stall"] += busy - compute
            times["tp_comm"] += comm
            t = t0 + busy + comm
            self.rec.timeline.add(self.lanes[(r, j)], t0, t - t0, cat, label, r, step.micro_batch, -1)
        if defer:
            self._owed[(r, j)] = t - now
            return 0.0
        self._owed[(r, j)] = 0.0
        return t - now

    def _pass_totals(self, r: int, j: int, ps: ChunkPass) -> tuple[float, float, float, str]:
        """(busy, compute, tensor-parallel comm seconds, slice label) of a fast-path pass, once."""
        key = (r, j, id(ps))
        hit = self._totals.get(key)
        if hit is None:
            comm = sum(self.plan.tp_time(r, j, *seg.comm) for seg in ps.segments if seg.comm)
            segs = ps.segments
            label = f"{segs[0].label}…{segs[-1].label} {ps.kind}" if segs else ps.kind
            hit = self._totals[key] = (ps.busy_s, ps.compute_s, comm, label)
        return hit

    def _account(self, r, j, seg: Segment, t: float, cat: str, tag: str, step: Step, ledger: StageLedger) -> float:
        lane = self.lanes[(r, j)]
        times = ledger.times
        times[cat] += seg.compute_s
        times["memory_stall"] += seg.busy_s - seg.compute_s
        detail = self.segment_slices
        if detail:
            self.rec.slice(lane, t, seg.busy_s, cat, f"{seg.label} {tag}", r, step.micro_batch, seg.layer)
        t += seg.busy_s
        if seg.comm:
            dur = self.plan.tp_time(r, j, seg.comm[0], seg.comm[1])
            times["tp_comm"] += dur
            if detail:
                self.rec.slice(lane, t, dur, "tp_comm", f"{seg.comm[0]} {seg.label}", r, step.micro_batch, seg.layer)
            t += dur
        return t

    def _wait(self, key: tuple, producer_end: dict, ledger: StageLedger) -> Generator:
        ev = self._event(key)
        start = self.env.now
        if not ev.triggered:
            yield ev
        waited = self.env.now - start
        if waited > 0:
            sent = producer_end.get(key, start)
            comm = min(waited, max(0.0, self.env.now - max(sent, start)))
            ledger.times["pp_comm"] += comm
            ledger.times["bubble"] += waited - comm

    def _send(self, coll: Collective, key: tuple) -> None:
        if len(coll.phases) == 1:  # one flow: its own event is (or triggers) the arrival
            ph = coll.phases[0]
            sent = self.net.transfer(ph.usage, ph.bytes_per_member, ph.latency_s)
            waiting = self.arrivals.get(key)
            if waiting is None:
                self.arrivals[key] = sent
            else:
                sent.callbacks.append(lambda _e: waiting.succeed())
            return
        done = self._event(key)
        if not coll.phases:
            done.succeed()
            return

        def proc():
            yield from self._collective(coll)
            done.succeed()

        self.env.process(proc())

    def stage(self, r: int, j: int, producer_end: dict) -> Generator:
        plan, env = self.plan, self.env
        st = plan.stages[r]
        ledger = self.rec.ledgers[r] if j == self.replicas[0] else StageLedger()
        pp, v = plan.pp, plan.chunks
        for cat in ("weights", "gradients", "optimizer"):
            ledger.memory(0.0, cat, getattr(st.state, cat))
        ledger.memory(0.0, "workspace", st.workspace)
        if self.train:
            order = stage_order(plan.schedule, r, pp, plan.micro_batches, v)
        else:
            order = forward_only_order(r, pp, plan.micro_batches, v)
        remaining_b = {c: plan.micro_batches for c in st.chunk_layers}
        reductions: list[simpy.Event] = []
        if j == self.replicas[0]:
            self.total_steps += len(order)
        prev: tuple | None = None
        for step in order:
            self.steps_done += 1
            dep = predecessor(step, r, pp, v)
            cause = prev
            if dep is not None:
                dep_key = (*dep, j)
                ready = self.arrivals.get(dep_key)
                if ready is None or not ready.processed:
                    before = env.now
                    yield from self._wait(dep_key, producer_end, ledger)
                    if env.now > before:
                        cause = dep_key
                if prev is None:
                    cause = dep_key
            vs = step.virtual_stage(r, pp)
            started = env.now
            if step.kind == "F":
                ledger.memory(env.now, "activations", st.act_bytes[step.chunk])
                ps = st.passes[(step.chunk, "F")]
                delay = self._fast_pass(r, j, ps, step, ledger, False)
                if delay is None:
                    yield from self._run_pass(r, j, ps, step, ledger)
                else:
                    yield env.timeout(delay)
                key = ("F", step.micro_batch, step.chunk, r, j)
                producer_end[key] = env.now
                self.steps_info[key] = (started, env.now, cause)
                prev = key
                if vs < plan.virtual_stages - 1:
                    self._send(plan.p2p(vs, j, False), key)
                else:
                    self._event(key).succeed()
            else:
                if (step.chunk, "R") in st.passes:
                    ledger.memory(env.now, "activations", st.transient_bytes)
                    yield from self._run_pass(r, j, st.passes[(step.chunk, "R")], step, ledger, defer=True)
                ps = st.passes[(step.chunk, "B")]
                if remaining_b[step.chunk] == 1:  # the chunk's last backward: early buckets may start
                    early = plan.dp_buckets(r, step.chunk)[0]
                    if early.phases:
                        reductions.append(self._reduction(r, step.chunk, early, "early"))
                delay = self._fast_pass(r, j, ps, step, ledger, False)
                if delay is None:
                    yield from self._run_pass(r, j, ps, step, ledger)
                else:
                    yield env.timeout(delay)
                ledger.memory(
                    env.now,
                    "activations",
                    -st.act_bytes[step.chunk] - (st.transient_bytes if (step.chunk, "R") in st.passes else 0.0),
                )
                key = ("B", step.micro_batch, step.chunk, r, j)
                producer_end[key] = env.now
                self.steps_info[key] = (started, env.now, cause)
                prev = key
                if vs > 0:
                    self._send(plan.p2p(vs - 1, j, True), key)
                else:
                    self._event(key).succeed()
                remaining_b[step.chunk] -= 1
                if remaining_b[step.chunk] == 0:
                    reductions.append(self._reduction(r, step.chunk, plan.dp_buckets(r, step.chunk)[1], "late"))
        self.last_step[(r, j)] = prev
        if self.train:
            start = env.now
            if reductions:
                yield env.all_of(reductions)
            ledger.times["dp_comm"] += env.now - start
            if reductions:
                self.rec.slice(self.lanes[(r, j)], start, env.now - start, "dp_comm", "gradient reduction", r, -1, -1)
            start = env.now
            yield env.timeout(st.optimizer_s)
            ledger.times["optimizer"] += st.optimizer_s
            self.rec.slice(self.lanes[(r, j)], start, st.optimizer_s, "optimizer", "optimizer step", r, -1, -1)
            start = env.now
            yield from self._collective(plan.zero_gather(r))
            ledger.times["dp_comm"] += env.now - start
        ledger.finish = env.now

    def critical_path(self, r: int) -> list[tuple[str, float, float]]:
        """Steps that set the finish time of stage ``r``, earliest first: from its last step, follow
        whatever each step waited for (its input's producer, or the step before it on its stage)."""
        out: list[tuple[str, float, float]] = []
        key = self.last_step.get((r, self.replicas[0]))
        while key is not None:
            start, end, cause = self.steps_info[key]
            kind, mb, chunk, rank, _j = key
            name = f"{'forward' if kind == 'F' else 'backward'} mb {mb} chunk {chunk} · stage {rank}"
            out.append((name, start, end - start))
            if cause is not None and cause in self.steps_info:
                gap = start - self.steps_info[cause][1]
                if gap > 1e-12:
                    out.append(("transfer / wait", self.steps_info[cause][1], gap))
            key = cause
        out.reverse()
        return out

    def _reduction(self, r: int, chunk: int, coll: Collective, part: str) -> simpy.Event:
        """A gradient reduction (or one bucket of it): starts when every simulated replica reaches it."""
        key = (r, chunk, part)
        arrived = self._arrived.get(key, 0) + 1
        self._arrived[key] = arrived
        if key not in self._reductions:
            self._reductions[key] = self.env.event()
        done = self._reductions[key]
        if arrived == len(self.replicas):
            started = self._start(coll)
            started.callbacks.append(lambda _e: done.succeed())
        return done

    def _start(self, coll: Collective) -> simpy.Event:
        done = self.env.event()

        def proc():
            yield from self._collective(coll)
            done.succeed()

        self.env.process(proc())
        return done

    def run(self, progress: ProgressFn | None = None, cancel: CancelFn | None = None) -> Recorder:
        """Run to the end. Every ``CHECK_EVERY`` events, report the fraction of pipeline steps done and
        stop with ``Cancelled`` if ``cancel()`` says so (the studio's worker uses both)."""
        producer_end: dict = {}
        for r in range(self.plan.pp):
            for j in self.replicas:
                self.env.process(self.stage(r, j, producer_end))
        enabled = gc.isenabled()
        gc.disable()  # the collector costs 40-50 % in long simulations and finds nothing here
        try:
            if progress is None and cancel is None:
                self.env.run()
            else:
                step, peek = self.env.step, self.env.peek
                n = 0
                while peek() != float("inf"):
                    step()
                    n += 1
                    if n % CHECK_EVERY == 0:
                        if cancel is not None and cancel():
                            raise Cancelled("simulation cancelled")
                        if progress is not None:
                            progress(min(1.0, self.steps_done / max(self.total_steps, 1)))
                if progress is not None:
                    progress(1.0)
        finally:
            if enabled:
                gc.enable()
        return self.rec
