"""One event simulation of a plan's program: a simpy process per pipeline stage and unit, sends and
reductions as max-min fair flows.

Coarse tasks only: a segment of a model chunk (the compute between two tensor-parallel collectives), a
collective phase, a point-to-point send, a DRAM stream. Each stage process walks its rows of the
program's step table (``engine.plan.steps``) — the same table the analytic recurrence walks — for a
training iteration and an inference request alike; training then waits for the stage's gradient
reductions, steps the optimizer and, with ZeRO, gathers the weights. Aggregated (the default), one unit
per stage stands for every replica and every member of its tensor group (``engine.engines.event.traffic``).
"""

from __future__ import annotations

import gc
from collections.abc import Generator
from heapq import heappop

import simpy
from tilewright.engine.engines.event.compress import compress_patterns
from tilewright.engine.engines.event.network import FlowNetwork
from tilewright.engine.engines.event.passes import PassRunner
from tilewright.engine.engines.event.recorder import Recorder, StageLedger
from tilewright.engine.engines.event.traffic import WHOLE_GROUP, Unit, member_of, traffic_patterns
from tilewright.engine.jobs import Reporter
from tilewright.engine.perf.collectives import Collective
from tilewright.engine.plan.program import Program
from tilewright.engine.plan.recurrence import split_wait
from tilewright.engine.plan.steps import step_name
from tilewright.engine.results.text import counted

CHECK_EVERY = 2000  # events between progress reports and cancel checks
# Above this many passes the Gantt gets one slice per pass instead of one per segment and collective.
SEGMENT_SLICE_LIMIT = 20_000


class Simulation(PassRunner):
    def __init__(self, program: Program, *, contention: bool = True, aggregate: bool = True):
        plan = self.plan = program.plan
        self.program = program
        self.env = simpy.Environment()
        if aggregate or not program.train:  # inference: one tensor group per stage (members are symmetric)
            self.units: list[Unit] = [(0, WHOLE_GROUP)]
        else:
            self.units = [(j, i) for j in range(plan.dp) for i in range(plan.tp)]
        self.primary = self.units[0]
        self.rec = Recorder()
        self.arrivals: dict[tuple, simpy.Event] = {}
        self._init_passes()
        self.total_steps = 0
        self.steps_done = 0
        self.steps_info: dict[tuple, tuple[float, float, tuple | None]] = {}  # step → (start, end, cause)
        self.last_step: dict[tuple[int, Unit], tuple | None] = {}
        self.producer_end: dict[tuple, float] = {}
        self.events = 0
        self._tied_start = 0.0  # when the last unit reached the tied embedding's all-reduce (``_tied``)
        self.private_tp, patterns = traffic_patterns(plan, self.units, contention)
        capacity = [lk.bandwidth for lk in plan.hw.links]
        self.net = FlowNetwork(
            self.env, capacity, contention=contention, reduced=compress_patterns(patterns, capacity)
        )
        self.segment_slices = program.pass_count * len(self.units) <= SEGMENT_SLICE_LIMIT
        self.lanes: dict[tuple[int, Unit], int] = {}
        self.lane_nodes: dict[str, list[str]] = {}
        for r in range(plan.pp):
            for u in self.units:
                name, nodes = self._lane_name(r, u)
                self.lanes[(r, u)] = self.rec.timeline.lane(name, "compute", detail=counted(len(nodes), "device"))
                self.lane_nodes[name] = nodes

    def _lane_name(self, r: int, u: Unit) -> tuple[str, list[str]]:
        devices = self.plan.hw.devices
        groups = self.plan.stages[r].groups
        if u[1] == WHOLE_GROUP:
            return f"stage {r}", [devices[d].node for g in groups for d in g]
        node = devices[groups[u[0]][u[1]]].node
        return f"stage {r} · replica {u[0]} · {node}", [node]

    def _event(self, key: tuple) -> simpy.Event:
        ev = self.arrivals.get(key)
        if ev is None:
            ev = self.arrivals[key] = self.env.event()
        return ev

    def _reduction(self, r: int, chunk: int, coll: Collective, part: str) -> simpy.Event:
        """A gradient reduction (or one bucket of it): starts when every unit has reached it."""
        return self._meet(("dp", r, chunk, part), len(self.units), coll, "dp_comm")

    def _send(self, coll: Collective, key: tuple) -> simpy.Event:
        """Start a pipeline send; returns the event of its arrival (a blocking sender waits for it)."""
        if len(coll.phases) == 1:  # one flow: its own event is (or triggers) the arrival
            ph = coll.phases[0]
            sent = self.net.transfer(ph.usage, ph.bytes_per_member, ph.latency_s, "pp_comm")
            waiting = self.arrivals.get(key)
            if waiting is None:
                self.arrivals[key] = sent
            else:
                sent.callbacks.append(lambda _e: waiting.succeed())
            return sent
        done = self._event(key)
        if not coll.phases:
            done.succeed()
            return done
        self._start(coll, "pp_comm").callbacks.append(lambda _e: done.succeed())
        return done

    def _unit_table(self, r: int, u: Unit) -> list[tuple]:
        """Per row of stage ``r``, what the loop needs for unit ``u``, resolved once: (row, dependency
        key, own key, pipeline send or None)."""
        program, member = self.program, member_of(u)
        sends: dict[tuple, Collective] = {}
        table = []
        for row in program.table[r]:
            send = None
            if row.send is not None:
                send = sends.get(row.send)
                if send is None:
                    send = sends[row.send] = program.send(row.send, u[0], member)
            dep = (*row.dep, u) if row.dep is not None else None
            table.append((row, dep, (*row.key, u), send))
        return table

    # --- pipeline --------------------------------------------------------------------------------------
    def stage(self, r: int, u: Unit) -> Generator:
        plan, env, program = self.plan, self.env, self.program
        primary = u == self.primary
        ledger = self.rec.ledgers[r] if primary else StageLedger()
        for cat, nbytes in program.initial_memory(r).items():
            ledger.memory(0.0, cat, nbytes)
        table = self._unit_table(r, u)
        reductions: list[simpy.Event] = []
        if primary:
            self.total_steps += len(table)
        arrivals, steps_info, producer_end, memory = self.arrivals, self.steps_info, self.producer_end, ledger.memory
        fast_pass, run_pass, timeout, times = self._fast_pass, self._run_pass, env.timeout, ledger.times
        blocking, after_schedule = program.blocking, plan.dp_after_schedule
        prev: tuple | None = None
        # ``env._now``: simpy's clock without its ``now`` property, read several times per step (as in passes
        # and the flow network)
        for (row, dep_key, key, send), (pre, ps, grow, free) in zip(table, program.work(r), strict=True):
            if primary:
                self.steps_done += 1
            cause = prev
            if dep_key is not None:
                ready = arrivals.get(dep_key)
                if ready is None or not ready.processed:
                    before = env._now
                    if ready is None:
                        ready = self._event(dep_key)
                    if not ready.processed:  # a transfer's timeout is triggered when created: wait for it
                        yield ready
                    if env._now > before:  # waited: for the transfer, or for the producer (bubble)
                        cause = dep_key
                        split_wait(times, before, env._now, producer_end.get(dep_key, before))
                if prev is None:
                    cause = dep_key
            started = env._now
            if grow is not None:
                memory(started, *grow)
            if pre is not None and fast_pass(r, u, pre, row, ledger, True) is None:
                yield from run_pass(r, u, pre, row, ledger)
            if row.last_backward:  # the chunk's last backward: its early buckets may start
                early = plan.dp_buckets(r, row.chunk)[0]
                if early.phases:
                    reductions.append(self._reduction(r, row.chunk, early, "early"))
            delay = fast_pass(r, u, ps, row, ledger, False)
            if delay is None:
                yield from run_pass(r, u, ps, row, ledger)
            else:
                yield timeout(delay)
            if free is not None:
                memory(env._now, *free)
            now = producer_end[key] = env._now  # before a blocking wait: the consumer splits its own by it
            if send is not None:
                sent = self._send(send, key)
                if blocking and not sent.processed:  # the stage waits for its send (plan.pipeline_p2p)
                    yield sent
                    times["pp_comm"] += env._now - now
                    self.rec.slice(self.lanes[(r, u)], now, env._now - now, "pp_comm", "pipeline send (blocking)",
                                   r, row.micro_batch, -1)
            else:
                self._event(key).succeed()
            if row.last_backward and not after_schedule:  # else ``_tail`` reduces the chunks in turn
                late = plan.dp_buckets(r, row.chunk)[1]
                lost = plan.dp_overlap_loss(r, row.chunk)  # the backward slowed beside the early bucket
                if lost > 0:
                    reductions.append(env.process(self._late(r, row.chunk, late, lost)))
                else:
                    reductions.append(self._reduction(r, row.chunk, late, "late"))
            steps_info[key] = (started, now, cause)
            prev = key
        self.last_step[(r, u)] = prev
        if program.train:
            yield from self._tail(r, u, reductions, ledger)
        ledger.finish = env._now

    def _late(self, r: int, chunk: int, coll: Collective, lost: float) -> Generator:
        """The chunk's late bucket, launched once its last backward has made up the ``lost`` seconds the
        early bucket's SMs took from it (``Plan.dp_overlap_loss``): the stage's own process goes on."""
        yield self.env.timeout(lost)
        yield self._reduction(r, chunk, coll, "late")

    def _tail(self, r: int, u: Unit, reductions: list[simpy.Event], ledger: StageLedger) -> Generator:
        """After the last backward: make up what the backwards lost beside the early buckets (charged on the
        stage after its last step, as the analytic engine), wait for the gradient reductions (without
        ``overlap_grad_reduce`` run them here, each chunk's after the one before: ``gradients_reduced``), step
        the optimizer, gather (ZeRO)."""
        env, st, lane = self.env, self.plan.stages[r], self.lanes[(r, u)]
        lost = sum(self.plan.dp_overlap_loss(r, c) for c in st.chunk_layers)
        if lost > 0:
            start = env.now
            yield env.timeout(lost)
            ledger.times["compute"] += lost
            self.rec.slice(lane, start, lost, "compute", "backward slowed beside the gradient reduction", r, -1, -1)
        start = env.now
        if reductions:
            yield env.all_of(reductions)
        if self.plan.dp_after_schedule:
            for c in st.chunk_layers:
                whole = self.plan.dp_buckets(r, c)[1]
                if whole.phases:
                    yield self._reduction(r, c, whole, "late")
        self.rec.slice(lane, start, env.now - start, "dp_comm", "gradient reduction", r, -1, -1)
        ledger.times["dp_comm"] += env.now - start
        if r in self.plan.tied_ranks():
            yield from self._tied(r, u, ledger)
        start = env.now
        yield env.timeout(st.optimizer_s)
        ledger.times["optimizer"] += st.optimizer_s
        self.rec.slice(lane, start, st.optimizer_s, "optimizer", "optimizer step", r, -1, -1)
        start = env.now
        for part, gather in enumerate(self.plan.zero_gather_exposed(r)):  # overlap: only what shows
            if gather.phases:
                yield self._meet(("zero", r, part), len(self.units), gather, "dp_comm")
        if env.now > start:  # drawn as the analytic engine draws it: else the stage's lane ends before the step
            self.rec.slice(lane, start, env.now - start, "dp_comm", "ZeRO weight gather", r, -1, -1)
        ledger.times["dp_comm"] += env.now - start

    def _tied(self, r: int, u: Unit, ledger: StageLedger) -> Generator:
        """The tied embedding's all-reduce (``plan.tied``): every unit of the first and the last stage meets
        it; the last to arrive starts it. Waiting for the other stage is bubble, the all-reduce ``dp_comm``."""
        env, key = self.env, ("tied",)
        arrived = env.now
        self._tied_start = max(self._tied_start, arrived)
        done = self._meet(key, 2 * len(self.units), self.plan.tied_collective(), "dp_comm")
        yield done
        start = self._tied_start
        ledger.times["bubble"] += start - arrived
        ledger.times["dp_comm"] += env.now - start
        self.rec.slice(self.lanes[(r, u)], start, env.now - start, "dp_comm", "tied embedding all-reduce", r, -1, -1)

    def critical_path(self, r: int) -> list[tuple[str, float, float]]:
        """Steps that set the finish time of stage ``r``, earliest first: from its last step, follow
        whatever each step waited for (its input's producer, or the step before it on its stage)."""
        out: list[tuple[str, float, float]] = []
        key = self.last_step.get((r, self.primary))
        while key is not None:
            start, end, cause = self.steps_info[key]
            out.append((step_name(key), start, end - start))
            if cause is not None and cause in self.steps_info:
                gap = start - self.steps_info[cause][1]
                if gap > 1e-12:
                    out.append(("transfer / wait", self.steps_info[cause][1], gap))
            key = cause
        out.reverse()
        return out

    def phase_end(self, key: tuple) -> float:
        """When the primary unit's step ``key`` (a program step key) ended."""
        return self.producer_end.get((*key, self.primary), 0.0)

    # --- driving -----------------------------------------------------------------------------------------
    def run(self, report: Reporter | None = None) -> Recorder:
        """Run to the end. Every ``CHECK_EVERY`` events, report the fraction of pipeline steps done (and
        stop with ``Cancelled`` if the caller asked to); ``events`` then holds how many were scheduled."""
        for r in range(self.plan.pp):
            for u in self.units:
                self.env.process(self.stage(r, u))
        enabled = gc.isenabled()
        gc.disable()  # the collector costs 40-50 % in long simulations and finds nothing here
        try:
            if report is None or report.silent:
                _run_to_end(self.env)
            else:
                step, peek = self.env.step, self.env.peek
                n = 0
                while peek() != float("inf"):
                    step()
                    n += 1
                    if n % CHECK_EVERY == 0:
                        report(min(1.0, self.steps_done / max(self.total_steps, 1)), "simulating")
                report(1.0, "simulated")
        finally:
            if enabled:
                gc.enable()
        self.events = _scheduled(self.env)
        return self.rec


def _run_to_end(env: simpy.Environment) -> None:
    """``env.run()`` without ``until``: ``Environment.step`` inlined, the same events in the same order. A
    large run steps half a million events, and the method call and its ``try`` per event are ~5 % of it.
    Like ``step``, a failed event nobody defused crashes the run with a copy of its exception."""
    queue = env._queue
    while queue:
        env._now, _, _, event = heappop(queue)
        callbacks, event.callbacks = event.callbacks, None
        for callback in callbacks:
            callback(event)
        if not event._ok and not hasattr(event, "_defused"):
            exc = type(event._value)(*event._value.args)
            exc.__cause__ = event._value
            raise exc


def _scheduled(env: simpy.Environment) -> int:
    """simpy numbers every event it schedules; the next number is how many it scheduled."""
    eid = getattr(env, "_eid", None)
    try:
        return next(eid) if eid is not None else 0
    except TypeError:
        return 0
