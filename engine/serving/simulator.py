"""The serving simulation on simpy: arrivals, one engine process per instance, KV transfers between groups.

Each instance runs iterations back to back while it has work: the scheduler (``serving.scheduler``)
picks the batch, the cost model (``serving.cost_model``) says how long it takes, and the batch's tokens
exist at its end. An idle instance sleeps until a request reaches its queue. With disaggregation a
request whose prompt is done leaves the prefill group; its KV cache moves over the links between the
groups (``serving.instances.KVTransfer``; transfers queue behind each other, one link set), the prefill
group frees its pages when the transfer ends, and the decode group admits it like any request, its
prompt already cached.
"""

from __future__ import annotations

import gc
import time
from collections import deque

import numpy as np
import simpy
from tilewright.engine.ir.project import Project
from tilewright.engine.jobs import CancelFn, ProgressFn, Reporter
from tilewright.engine.results.text import counted, number
from tilewright.engine.serving.config import ServingConfig, ServingSetupError
from tilewright.engine.serving.cost_model import decode
from tilewright.engine.serving.instances import InstanceModel, KVTransfer, build_instances
from tilewright.engine.serving.kv import BlockPool
from tilewright.engine.serving.requests import RequestSpec, poisson_requests
from tilewright.engine.serving.result import RequestRecord, ServingResult
from tilewright.engine.serving.scheduler import Iteration, Scheduler, Sequence, pages

REPORT_EVERY = 64  # iterations between progress reports (and cancel checks)


def request_specs(project: Project, config: ServingConfig) -> list[RequestSpec]:
    """The trace, or Poisson arrivals with the project's (or the config's) prompt and output lengths."""
    if config.requests is not None:
        return list(config.requests)
    inf = project.run.inference
    return poisson_requests(
        config.rate,
        config.count,
        config.prompt_tokens or inf.prompt_tokens,
        config.output_tokens or inf.output_tokens,
        config.seed,
    )


class _Engine:
    def __init__(self, sim: _Simulation, model: InstanceModel, waiting: deque[Sequence], prefill_only: bool):
        cfg = sim.config
        spec = cfg.spec
        self.sim, self.model = sim, model
        self.pool = BlockPool(model.kv.blocks)
        self.scheduler = Scheduler(
            self.pool,
            waiting,
            max_batch=cfg.max_batch,
            token_budget=cfg.token_budget,
            chunk=cfg.chunk,
            block_tokens=model.kv.block_tokens,
            step_tokens=spec.k + 1 if spec else 1,
            accepted_per_step=spec.tokens_per_step if spec else 1.0,
            prefill_only=prefill_only,
        )
        self.wake: simpy.Event | None = None

    def notify(self) -> None:
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()

    def seconds(self, it: Iteration) -> float:
        t = self.model.cost.iteration_seconds(it.work)
        spec = self.sim.config.spec
        if spec is not None and it.decodes and spec.draft_cost > 0:  # the draft's k autoregressive steps
            drafts = [
                decode(w.context - w.tokens + 1)
                for w, s in zip(it.work, it.seqs, strict=True)
                if w.logits == w.tokens and w.tokens == spec.k + 1 and not s.prefilling
            ]
            if drafts:
                t += spec.k * spec.draft_cost * self.model.cost.iteration_seconds(drafts)
        return t

    def run(self):
        env, sim = self.sim.env, self.sim
        idle_rounds = 0
        while True:
            preempted = self.scheduler.preemptions
            it = self.scheduler.next_iteration(env.now)
            sim.sample_kv(self.model.name)
            if self.scheduler.preemptions != preempted:  # an idle replica may take the preempted
                sim.notify(self.scheduler.waiting)
            if not it.work:
                if self.scheduler.running and idle_rounds == 0:  # admitted with their KV: decode next round
                    idle_rounds += 1
                    continue
                if self.scheduler.running:
                    raise RuntimeError("running sequences but nothing to schedule")
                self.wake = env.event()
                yield self.wake
                self.wake = None
                idle_rounds = 0
                continue
            idle_rounds = 0
            yield env.timeout(self.seconds(it))
            finished, handoffs = self.scheduler.finish_iteration(it, env.now)
            sim.sample_kv(self.model.name)
            for s in finished:
                sim.finish(s)
            for s in handoffs:
                env.process(sim.transfer(s, self))
            sim.iteration_done()


class _Simulation:
    def __init__(
        self,
        project: Project,
        config: ServingConfig,
        models: list[InstanceModel],
        specs: list[RequestSpec],
        report: Reporter,
    ) -> None:
        self.config, self.report = config, report
        self.env = simpy.Environment()
        self.specs = specs
        self.sequences = [Sequence(s) for s in sorted(specs, key=lambda s: (s.arrival_s, s.id))]
        self.arrivals: deque[Sequence] = deque()
        self.engines: list[_Engine] = []
        self.kv_series: dict[str, list[tuple[float, float]]] = {m.name: [] for m in models}
        self.kv_transfer: KVTransfer | None = None
        if len(models) == 2:
            to_decode: deque[Sequence] = deque()
            self.prefill = _Engine(self, models[0], self.arrivals, True)
            self.decode = _Engine(self, models[1], to_decode, False)
            self.engines = [self.prefill, self.decode]
            self.entry = [self.prefill]
            self.kv_transfer = KVTransfer(project, models[0], models[1])
            self.link = simpy.Resource(self.env, capacity=1)
        else:
            self.engines = [_Engine(self, models[0], self.arrivals, False) for _ in range(models[0].replicas)]
            self.entry = self.engines
        self.done = 0
        self.iterations = 0
        self.in_system = 0
        self._last_change = 0.0
        self.in_flight_s = 0.0

    def _count(self, delta: int) -> None:
        now = self.env.now
        self.in_flight_s += self.in_system * (now - self._last_change)
        self._last_change = now
        self.in_system += delta

    def arrive(self):
        for s in self.sequences:
            if s.spec.arrival_s > self.env.now:
                yield self.env.timeout(s.spec.arrival_s - self.env.now)
            self._count(+1)
            self.arrivals.append(s)
            for e in self.entry:
                e.notify()

    def transfer(self, s: Sequence, source: _Engine):
        assert self.kv_transfer is not None
        with self.link.request() as turn:
            yield turn
            seconds = self.kv_transfer.seconds(s.computed)
            yield self.env.timeout(seconds)
        s.transfer_s += seconds
        source.pool.give(s.blocks)
        s.blocks = 0
        s.handed_over = True
        self.decode.scheduler.waiting.append(s)
        self.sample_kv(source.model.name)
        self.decode.notify()
        source.notify()  # its freed pages may admit a waiting prompt

    def notify(self, queue: deque[Sequence]) -> None:
        """Wake the idle engines that pull from ``queue``."""
        for e in self.engines:
            if e.scheduler.waiting is queue:
                e.notify()

    def finish(self, s: Sequence) -> None:
        self._count(-1)
        self.done += 1

    def iteration_done(self) -> None:
        self.iterations += 1
        if self.iterations % REPORT_EVERY == 0 and not self.report.silent:
            n = len(self.sequences)
            self.report(self.done / n, f"{self.done}/{n} requests served, {self.env.now:.4g} s simulated")

    def sample_kv(self, kind: str) -> None:
        used = total = 0
        for e in self.engines:
            if e.model.name == kind:
                used += e.pool.used
                total += e.pool.total
        series = self.kv_series[kind]
        value = used / total if total else 0.0
        if series and series[-1][0] == self.env.now:
            series[-1] = (self.env.now, max(series[-1][1], value))
        else:
            series.append((self.env.now, value))

    def run(self) -> None:
        self.env.process(self.arrive())
        for e in self.engines:
            self.env.process(e.run())
        self.env.run()
        if self.done != len(self.sequences):
            raise RuntimeError(f"{len(self.sequences) - self.done} requests never finished")


def _check_fits(specs: list[RequestSpec], models: list[InstanceModel], config: ServingConfig) -> None:
    extra = config.spec.k if config.spec else 0
    for m in models:
        for s in specs:
            tokens = s.prompt_tokens + (s.output_tokens + extra if m.name != "prefill" else 0)
            if pages(tokens, m.kv.block_tokens) > m.kv.blocks:
                raise ServingSetupError(
                    "requests",
                    f"request {s.id + 1} needs {counted(tokens, 'token')} of KV cache; the {m.name} instance holds "
                    f"{counted(m.kv.tokens, 'token')} "
                    f"({counted(m.kv.blocks, 'page')} of {counted(m.kv.block_tokens, 'token')})",
                )


def simulate_serving(
    project: Project,
    config: ServingConfig,
    *,
    progress: ProgressFn | None = None,
    cancel: CancelFn | None = None,
    models: list[InstanceModel] | None = None,
) -> ServingResult:
    """Serve ``config``'s requests on ``project``'s devices; ``models`` (from ``build_instances``) may be
    passed to reuse the cost tables across calls (a sweep over rates)."""
    problems = config.problems()
    if problems:
        raise ServingSetupError(*problems[0])
    start = time.perf_counter()
    report = Reporter(progress, cancel)
    if not report.silent:
        report(0.0, "pricing the iterations")
    models = models or build_instances(project, config.token_budget, config.disaggregate)
    specs = request_specs(project, config)
    _check_fits(specs, models, config)
    sim = _Simulation(project, config, models, specs, report.part(0.02, 1.0))
    enabled = gc.isenabled()
    gc.disable()  # the event loop allocates many small objects and frees none of them cyclically
    try:
        sim.run()
    finally:
        if enabled:
            gc.enable()
    records = sorted((_record(s, config) for s in sim.sequences), key=lambda r: r.id)
    notes = _notes(models, sim)
    result = ServingResult(
        config=config,
        records=records,
        kv_series=sim.kv_series,
        kv_pages={m.name: m.kv.blocks * m.replicas for m in models},
        kv_page_tokens=models[0].kv.block_tokens,
        in_flight_s=sim.in_flight_s,
        tbt_s=np.concatenate([np.asarray(e.scheduler.gaps, dtype=float) for e in sim.engines]),
        iterations=sim.iterations,
        preemptions=sum(e.scheduler.preemptions for e in sim.engines),
        notes=notes,
    )
    result.wall_time_s = time.perf_counter() - start
    if not report.silent:
        report(1.0, "served")
    return result


def _record(s: Sequence, config: ServingConfig) -> RequestRecord:
    assert s.first_token_s is not None and s.finish_s is not None
    rec = RequestRecord(
        s.spec.id,
        s.spec.arrival_s,
        s.spec.prompt_tokens,
        s.spec.output_tokens,
        s.scheduled_s if s.scheduled_s is not None else s.spec.arrival_s,
        s.first_token_s,
        s.finish_s,
        s.preemptions,
        s.transfer_s,
    )
    if not config.has_slo:
        return rec  # meets_slo stays None: no target, nothing to meet
    ok = True
    if config.slo_ttft_s is not None:
        ok = rec.ttft_s <= config.slo_ttft_s
    tpot = rec.tpot_s
    if config.slo_tpot_s is not None and tpot is not None:
        ok = ok and tpot <= config.slo_tpot_s
    rec.meets_slo = ok
    return rec


def _ep(ep: int) -> str:
    """An instance's expert parallelism in its note: its replicas are ep ranks sharing the experts."""
    return f", ep {ep}: data-parallel attention, experts over {ep} ranks" if ep > 1 else ""


def _notes(models: list[InstanceModel], sim: _Simulation) -> list[str]:
    out = []
    for m in models:
        kv = m.kv
        mp = m.plan.project.mapping
        out.append(
            f"{m.name}: {m.replicas} × (tp {mp.tp}, pp {mp.pp}{_ep(mp.ep)}); KV cache {counted(kv.blocks, 'page')} of "
            f"{counted(kv.block_tokens, 'token')} ({counted(kv.tokens, 'token')}) per replica, "
            f"{number(kv.free_bytes / 2**30)} GiB per device after {number(kv.weights_bytes / 2**30)} GiB "
            f"weights and {number(kv.workspace_bytes / 2**30)} GiB workspace"
        )
    out.append(
        "iterations are timed uncontended (the analytic engine's pass times); link and port contention "
        "of the event engine is not applied"
    )
    return out
