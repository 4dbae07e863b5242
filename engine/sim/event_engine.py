"""The event-driven engine: simpy processes per pipeline stage, transfers as max-min fair flows.

Coarse tasks only: a segment of a model chunk (the compute between two tensor-parallel collectives), a
collective phase, a point-to-point send, a DRAM stream. A *unit* is what one simpy process stands for:
``(replica, member)``. Aggregated (the default), one unit per stage stands for every data-parallel
replica and every device of its tensor group — its DRAM stream and sends are one flow over all the
members' routes, and its collectives span every replica's links. Not aggregated, every device of every
replica is its own unit with its own DRAM stream and sends, and the members of a tensor group meet at
each collective. Tensor-parallel collectives whose links no other traffic ever touches cannot be
contended, so they are folded into the compute timeout (exact, and far fewer events).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Generator

import simpy
from tilewright.engine.jobs import Cancelled
from tilewright.engine.perf.collectives import Collective
from tilewright.engine.plan.passes import ChunkPass, Segment
from tilewright.engine.plan.plan import Plan
from tilewright.engine.sim.compress import compress_patterns
from tilewright.engine.sim.network import FlowNetwork
from tilewright.engine.sim.recorder import Recorder, StageLedger
from tilewright.engine.sim.schedules import Step, forward_only_order, predecessor, stage_order

CATEGORY_OF_PASS = {"F": "compute", "B": "compute", "R": "recompute"}
CHECK_EVERY = 2000  # events between progress reports and cancel checks
# Above this many passes the Gantt gets one slice per pass instead of one per segment and collective.
SEGMENT_SLICE_LIMIT = 20_000
WHOLE_GROUP = -1  # the member index of an aggregated unit
ProgressFn = Callable[[float], None]
CancelFn = Callable[[], bool]
Unit = tuple[int, int]  # (data-parallel replica, tensor-parallel member or WHOLE_GROUP)


class EventEngine:
    def __init__(self, plan: Plan, *, contention: bool = True, aggregate: bool = True, train: bool = True):
        self.plan = plan
        self.train = train
        self.env = simpy.Environment()
        hw = plan.hw
        if aggregate:
            self.units: list[Unit] = [(0, WHOLE_GROUP)]
        else:
            self.units = [(j, i) for j in range(plan.dp) for i in range(plan.tp)]
        self.primary = self.units[0]
        self.rec = Recorder()
        self.arrivals: dict[tuple, simpy.Event] = {}
        self._owed: dict[tuple[int, Unit], float] = {}  # fast-path time accounted, not yet waited
        self._totals: dict[tuple[int, int, int], tuple[float, float, float, str]] = {}
        self._arrived: dict[tuple, int] = {}
        self._barriers: dict[tuple, simpy.Event] = {}
        self._collective_seq: dict[tuple[int, Unit], int] = {}
        self.total_steps = 0
        self.steps_done = 0
        self.steps_info: dict[tuple, tuple[float, float, tuple | None]] = {}  # step → (start, end, cause)
        self.last_step: dict[tuple[int, Unit], tuple | None] = {}
        self.private_tp, patterns = self._traffic_patterns()
        capacity = [lk.bandwidth for lk in hw.links]
        self.net = FlowNetwork(
            self.env, capacity, contention=contention, reduced=compress_patterns(patterns, capacity)
        )
        passes = plan.pp * plan.chunks * plan.micro_batches * (3 if train else 1) * len(self.units)
        self.segment_slices = passes <= SEGMENT_SLICE_LIMIT
        self.lanes: dict[tuple[int, Unit], int] = {}
        self.lane_nodes: dict[str, list[str]] = {}
        for r in range(plan.pp):
            for u in self.units:
                name, nodes = self._lane_name(r, u)
                self.lanes[(r, u)] = self.rec.timeline.lane(name, "compute", detail=f"{len(nodes)} devices")
                self.lane_nodes[name] = nodes

    # --- set-up ------------------------------------------------------------------------------------
    def _lane_name(self, r: int, u: Unit) -> tuple[str, list[str]]:
        devices = self.plan.hw.devices
        groups = self.plan.stages[r].groups
        if u[1] == WHOLE_GROUP:
            return f"stage {r}", [devices[d].node for g in groups for d in g]
        node = devices[groups[u[0]][u[1]]].node
        return f"stage {r} · replica {u[0]} · {node}", [node]

    def _traffic_patterns(self) -> tuple[set[tuple[int, int]], list[dict[int, float]]]:
        """Every link-usage pattern this run can issue, and the (stage, replica) tensor groups whose
        collectives' links carry no other traffic (those are folded into compute)."""
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
        members = sorted({u[1] for u in self.units})
        for vs in range(plan.virtual_stages - 1):
            for j in range(plan.dp):
                for back in (False, True):
                    for i in members:
                        others += [ph.usage for ph in self._p2p(vs, (j, i), back).phases]
        for r, st in enumerate(plan.stages):
            for c in st.chunk_layers:
                for part in plan.dp_buckets(r, c):
                    others += [ph.usage for ph in part.phases]
            others += [ph.usage for ph in plan.zero_gather(r).phases]
            if any(ps.has_dram for ps in st.passes.values()):
                others += [self._dram_usage(r, (j, i)) for j in range(plan.dp) for i in members]
        for usage in others:
            shared |= usage.keys()
        private = {key for key, links in tp_links.items() if links and not links & shared}
        patterns = others + [u for key, pats in tp_patterns.items() if key not in private for u in pats]
        return private, patterns

    def _dram_usage(self, r: int, u: Unit) -> dict[int, float]:
        if u[1] == WHOLE_GROUP:
            return self.plan.dram_usage(r, u[0])
        return self.plan.dram_usage_member(r, u[0], u[1])

    def _p2p(self, vs: int, u: Unit, backward: bool) -> Collective:
        if u[1] == WHOLE_GROUP:
            return self.plan.p2p(vs, u[0], backward)
        return self.plan.p2p_member(vs, u[0], backward, u[1])

    def _event(self, key: tuple) -> simpy.Event:
        ev = self.arrivals.get(key)
        if ev is None:
            ev = self.arrivals[key] = self.env.event()
        return ev

    # --- collectives and meetings --------------------------------------------------------------------
    def _collective(self, coll: Collective) -> Generator:
        for ph in coll.phases:
            yield self.net.transfer(ph.usage, ph.bytes_per_member, ph.latency_s)

    def _start(self, coll: Collective) -> simpy.Event:
        done = self.env.event()

        def proc():
            yield from self._collective(coll)
            done.succeed()

        self.env.process(proc())
        return done

    def _meet(self, key: tuple, expected: int, coll: Collective) -> simpy.Event:
        """``expected`` units reach the same collective: the last to arrive starts it; all get its end."""
        arrived = self._arrived.get(key, 0) + 1
        self._arrived[key] = arrived
        done = self._barriers.get(key)
        if done is None:
            done = self._barriers[key] = self.env.event()
        if arrived == expected:
            self._start(coll).callbacks.append(lambda _e: done.succeed())
        return done

    def _tensor_collective(self, r: int, u: Unit, coll: Collective) -> Generator:
        if u[1] == WHOLE_GROUP:
            yield from self._collective(coll)
            return
        seq = self._collective_seq.get((r, u), 0)
        self._collective_seq[(r, u)] = seq + 1
        yield self._meet(("tp", r, u[0], seq), self.plan.tp, coll)

    def _reduction(self, r: int, chunk: int, coll: Collective, part: str) -> simpy.Event:
        """A gradient reduction (or one bucket of it): starts when every unit has reached it."""
        return self._meet(("dp", r, chunk, part), len(self.units), coll)

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
                dram = self.net.transfer(self._dram_usage(r, u), seg.dram_bytes)
                yield env.all_of([env.timeout(seg.busy_s), dram])
            else:
                yield env.timeout(seg.busy_s)
            took = env.now - start
            ledger.times[cat] += min(seg.compute_s, took)
            ledger.times["memory_stall"] += max(0.0, took - seg.compute_s)
            self.rec.slice(lane, start, took, cat, f"{seg.label} {tag}", r, step.micro_batch, seg.layer)
            if seg.comm:
                start = env.now
                yield from self._tensor_collective(r, u, plan.tp_collective(r, u[0], seg.comm[0], seg.comm[1]))
                ledger.times["tp_comm"] += env.now - start
                label = f"{seg.comm[0]} {seg.label}"
                self.rec.slice(lane, start, env.now - start, "tp_comm", label, r, step.micro_batch, seg.layer)

    def _fast_pass(self, r: int, u: Unit, ps: ChunkPass, step: Step, ledger: StageLedger, defer: bool) -> float | None:
        """Account a pass that needs no flows (private or no tensor-parallel links, no DRAM streams) and
        return how long to wait, or None when it must run segment by segment on the network."""
        if ps.has_dram or not (self.plan.tp == 1 or (r, u[0]) in self.private_tp):
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
            times[cat] += compute
            times["memory_stall"] += busy - compute
            times["tp_comm"] += comm
            t = t0 + busy + comm
            self.rec.timeline.add(self.lanes[(r, u)], t0, t - t0, cat, label, r, step.micro_batch, -1)
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
            comm = sum(self.plan.tp_time(r, j, *seg.comm) for seg in ps.segments if seg.comm)
            segs = ps.segments
            label = getattr(ps, "name", "") or (f"{segs[0].label}…{segs[-1].label} {ps.kind}" if segs else ps.kind)
            hit = self._totals[key] = (ps.busy_s, ps.compute_s, comm, label)
        return hit

    def _account(self, r, u, seg: Segment, t: float, cat: str, tag: str, step: Step, ledger: StageLedger) -> float:
        lane = self.lanes[(r, u)]
        times = ledger.times
        times[cat] += seg.compute_s
        times["memory_stall"] += seg.busy_s - seg.compute_s
        self.rec.slice(lane, t, seg.busy_s, cat, f"{seg.label} {tag}", r, step.micro_batch, seg.layer)
        t += seg.busy_s
        if seg.comm:
            dur = self.plan.tp_time(r, u[0], seg.comm[0], seg.comm[1])
            times["tp_comm"] += dur
            self.rec.slice(lane, t, dur, "tp_comm", f"{seg.comm[0]} {seg.label}", r, step.micro_batch, seg.layer)
            t += dur
        return t

    # --- pipeline --------------------------------------------------------------------------------------
    def _split_wait(self, times: dict[str, float], before: float, sent: float) -> None:
        """A wait from ``before`` until now for an input its producer finished at ``sent``: the part after
        both is the transfer (pp_comm), the rest waiting for the producer (bubble)."""
        now = self.env.now
        comm = min(now - before, max(0.0, now - max(sent, before)))
        times["pp_comm"] += comm
        times["bubble"] += now - before - comm

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
        self._start(coll).callbacks.append(lambda _e: done.succeed())

    def _step_table(self, r: int, u: Unit) -> list[tuple]:
        """Per step of stage ``r``, everything the loop needs, resolved once: (step, kind, chunk,
        dependency key, own key, pass, pipeline send or None, is-last-virtual-stage)."""
        plan = self.plan
        st = plan.stages[r]
        pp, v = plan.pp, plan.chunks
        if self.train:
            order = stage_order(plan.schedule, r, pp, plan.micro_batches, v)
        else:
            order = forward_only_order(r, pp, plan.micro_batches, v)
        last_vs = plan.virtual_stages - 1
        table = []
        for step in order:
            dep = predecessor(step, r, pp, v)
            vs = step.chunk * pp + r
            key = (step.kind, step.micro_batch, step.chunk, r, u)
            if step.kind == "F":
                send = self._p2p(vs, u, False) if vs < last_vs else None
            else:
                send = self._p2p(vs - 1, u, True) if vs > 0 else None
            table.append(
                (step, step.kind, step.chunk, (*dep, u) if dep is not None else None, key,
                 st.passes[(step.chunk, step.kind)], send)
            )
        return table

    def stage(self, r: int, u: Unit, producer_end: dict) -> Generator:
        plan, env = self.plan, self.env
        st = plan.stages[r]
        primary = u == self.primary
        ledger = self.rec.ledgers[r] if primary else StageLedger()
        for cat in ("weights", "gradients", "optimizer"):
            ledger.memory(0.0, cat, getattr(st.state, cat))
        ledger.memory(0.0, "workspace", st.workspace)
        table = self._step_table(r, u)
        remaining_b = {c: plan.micro_batches for c in st.chunk_layers}
        reductions: list[simpy.Event] = []
        if primary:
            self.total_steps += len(table)
        arrivals, steps_info, memory = self.arrivals, self.steps_info, ledger.memory
        act_bytes, transient = st.act_bytes, st.transient_bytes
        passes = st.passes
        fast_pass, timeout, times = self._fast_pass, env.timeout, ledger.times
        prev: tuple | None = None
        for step, kind, chunk, dep_key, key, ps, send in table:
            if primary:
                self.steps_done += 1
            cause = prev
            if dep_key is not None:
                ready = arrivals.get(dep_key)
                if ready is None or not ready.processed:
                    before = env.now
                    if ready is None:
                        ready = self._event(dep_key)
                    if not ready.triggered:
                        yield ready
                    if env.now > before:  # waited: for the transfer, or for the producer (bubble)
                        cause = dep_key
                        self._split_wait(times, before, producer_end.get(dep_key, before))
                if prev is None:
                    cause = dep_key
            started = env.now
            if kind == "F":
                memory(started, "activations", act_bytes[chunk])
                delay = fast_pass(r, u, ps, step, ledger, False)
                if delay is None:
                    yield from self._run_pass(r, u, ps, step, ledger)
                else:
                    yield timeout(delay)
            else:
                recompute = passes.get((chunk, "R"))
                if recompute is not None:
                    memory(started, "activations", transient)
                    if fast_pass(r, u, recompute, step, ledger, True) is None:
                        yield from self._run_pass(r, u, recompute, step, ledger)
                if remaining_b[chunk] == 1:  # the chunk's last backward: early buckets may start
                    early = plan.dp_buckets(r, chunk)[0]
                    if early.phases:
                        reductions.append(self._reduction(r, chunk, early, "early"))
                delay = fast_pass(r, u, ps, step, ledger, False)
                if delay is None:
                    yield from self._run_pass(r, u, ps, step, ledger)
                else:
                    yield timeout(delay)
                memory(env.now, "activations", -(act_bytes[chunk] + (transient if recompute is not None else 0.0)))
            if send is not None:
                self._send(send, key)
            else:
                self._event(key).succeed()
            if kind == "B":
                remaining_b[chunk] -= 1
                if remaining_b[chunk] == 0:
                    late = plan.dp_buckets(r, chunk)[1]
                    reductions.append(self._reduction(r, chunk, late, "late"))
            now = env.now
            producer_end[key] = now
            steps_info[key] = (started, now, cause)
            prev = key
        self.last_step[(r, u)] = prev
        if self.train:
            yield from self._tail(r, u, reductions, ledger)
        ledger.finish = env.now

    def _tail(self, r: int, u: Unit, reductions: list[simpy.Event], ledger: StageLedger) -> Generator:
        """After the last backward: wait for the gradient reductions, step the optimizer, gather (ZeRO)."""
        env, st, lane = self.env, self.plan.stages[r], self.lanes[(r, u)]
        start = env.now
        if reductions:
            yield env.all_of(reductions)
            self.rec.slice(lane, start, env.now - start, "dp_comm", "gradient reduction", r, -1, -1)
        ledger.times["dp_comm"] += env.now - start
        start = env.now
        yield env.timeout(st.optimizer_s)
        ledger.times["optimizer"] += st.optimizer_s
        self.rec.slice(lane, start, st.optimizer_s, "optimizer", "optimizer step", r, -1, -1)
        start = env.now
        gather = self.plan.zero_gather(r)
        if gather.phases:
            yield self._meet(("zero", r), len(self.units), gather)
        ledger.times["dp_comm"] += env.now - start

    def _step_name(self, key: tuple) -> str:
        kind, mb, chunk, rank, _u = key
        return f"{'forward' if kind == 'F' else 'backward'} mb {mb} chunk {chunk} · stage {rank}"

    def critical_path(self, r: int) -> list[tuple[str, float, float]]:
        """Steps that set the finish time of stage ``r``, earliest first: from its last step, follow
        whatever each step waited for (its input's producer, or the step before it on its stage)."""
        out: list[tuple[str, float, float]] = []
        key = self.last_step.get((r, self.primary))
        while key is not None:
            start, end, cause = self.steps_info[key]
            out.append((self._step_name(key), start, end - start))
            if cause is not None and cause in self.steps_info:
                gap = start - self.steps_info[cause][1]
                if gap > 1e-12:
                    out.append(("transfer / wait", self.steps_info[cause][1], gap))
            key = cause
        out.reverse()
        return out

    # --- driving -----------------------------------------------------------------------------------------
    def run(self, progress: ProgressFn | None = None, cancel: CancelFn | None = None) -> Recorder:
        """Run to the end. Every ``CHECK_EVERY`` events, report the fraction of pipeline steps done and
        stop with ``Cancelled`` if ``cancel()`` says so (the studio's worker uses both)."""
        producer_end: dict = {}
        for r in range(self.plan.pp):
            for u in self.units:
                self.env.process(self.stage(r, u, producer_end))
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
