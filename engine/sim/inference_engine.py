"""Inference on the event engine: the request's prefill and decode steps (``engine.sim.inference_phases``)
run through the pipeline as simpy processes, with tensor-parallel collectives, pipeline sends and DRAM
streams as flows on the topology — so decode steps contend for links and memory ports like training
passes do, the Gantt shows every step, and the KV cache grows token by token in the memory view.

Stage 0 starts decode step k of a micro-batch when step k − 1 has left the last stage: the sampled token
goes back to the first stage, a few bytes whose transfer is not modelled.
"""

from __future__ import annotations

from collections.abc import Generator

from tilewright.engine.perf.collectives import Collective
from tilewright.engine.plan.plan import Plan
from tilewright.engine.results.result import MemoryTrack, Result
from tilewright.engine.sim.assemble import link_series
from tilewright.engine.sim.event_engine import SEGMENT_SLICE_LIMIT, EventEngine, Unit
from tilewright.engine.sim.inference import RequestTimes, inference_result, phase_pass, pipeline_send, workspace
from tilewright.engine.sim.inference_phases import InferencePhases, inference_phases
from tilewright.engine.sim.schedules import Step


class InferenceEngine(EventEngine):
    def __init__(self, plan: Plan, *, contention: bool = True):
        super().__init__(plan, contention=contention, aggregate=True, train=False)
        self.phases: InferencePhases = inference_phases(plan)
        ph = self.phases
        self.segment_slices = plan.pp * ph.micro_batches * (1 + ph.decode_steps) <= SEGMENT_SLICE_LIMIT
        self._sends: dict[tuple[int, int], Collective] = {}
        self.times = RequestTimes()

    def _send_for(self, r: int, tokens: int) -> Collective:
        hit = self._sends.get((r, tokens))
        if hit is None:
            hit = self._sends[(r, tokens)] = pipeline_send(self.plan, self.phases, r, tokens)
        return hit

    def stage(self, r: int, u: Unit, producer_end: dict) -> Generator:
        plan, env, ph = self.plan, self.env, self.phases
        st = plan.stages[r]
        ledger = self.rec.ledgers[r]
        times = ledger.times
        ledger.memory(0.0, "weights", st.state.weights)
        ledger.memory(0.0, "workspace", workspace(plan, ph, r))
        kv_per_token = ph.kv_bytes_per_token[r]
        last = plan.pp - 1
        self.total_steps += (1 + ph.decode_steps) * ph.micro_batches
        prev = None
        for p in range(1 + ph.decode_steps):
            ps = phase_pass(ph, r, p)
            tokens = ph.prompt if p == 0 else 1
            for mb in range(ph.micro_batches):
                self.steps_done += 1
                if r > 0:
                    dep = ("I", p, mb, r - 1, u)
                elif p > 0:
                    dep = ("I", p - 1, mb, last, u)
                else:
                    dep = None
                cause = prev
                if dep is not None:
                    ready = self._event(dep)
                    before = env.now
                    if not ready.processed:
                        yield ready
                    if env.now > before:
                        cause = dep
                        # the token coming back to stage 0 is not a modelled transfer: all bubble
                        self._split_wait(times, before, producer_end.get(dep, before) if r > 0 else env.now)
                    if prev is None:
                        cause = dep
                started = env.now
                if kv_per_token:
                    ledger.memory(started, "kv_cache", kv_per_token * tokens)
                self.times.flops += ps.flops
                step = Step("F", mb, 0)
                delay = self._fast_pass(r, u, ps, step, ledger, False)
                if delay is None:
                    yield from self._run_pass(r, u, ps, step, ledger)
                else:
                    yield env.timeout(delay)
                key = ("I", p, mb, r, u)
                if r < last:
                    self._send(self._send_for(r, tokens), key)
                else:
                    self._event(key).succeed()
                producer_end[key] = env.now
                self.steps_info[key] = (started, env.now, cause)
                prev = key
            if r == last and p == 0:
                self.times.prefill_end = env.now
            if r == last and p == 1:
                self.times.first_token = env.now
        self.last_step[(r, u)] = prev
        ledger.finish = env.now

    def _step_name(self, key: tuple) -> str:
        _i, p, mb, rank, _u = key
        what = "prefill" if p == 0 else f"decode token {p}"
        return f"{what} mb {mb} · stage {rank}"


def simulate_inference_events(plan: Plan, series: bool = True) -> Result:
    """The event engine's inference result (``series=False``: without per-link series)."""
    eng = InferenceEngine(plan, contention=plan.project.run.contention)
    rec = eng.run()
    last = plan.pp - 1
    led = rec.ledgers[last]
    times = eng.times
    times.end = max(ledger.finish for ledger in rec.ledgers.values())
    breakdown = dict(led.times)
    busy = sum(breakdown.values())
    breakdown["bubble"] = breakdown.get("bubble", 0.0) + max(0.0, times.end - busy)
    times.breakdown = breakdown
    memory = []
    for r, ledger in sorted(rec.ledgers.items()):
        st = plan.stages[r]
        ts, columns = ledger.columns()
        node = plan.hw.devices[st.groups[0][0]].node
        memory.append(MemoryTrack(device=node, capacity_bytes=st.capacity, times=ts, by_category=columns))
    links = link_series(plan, eng.net, times.end, rec) if series else []
    from tilewright.engine.simulate import _events

    return inference_result(
        plan, eng.phases, times, memory, engine="event", timeline=rec.timeline, links=links,
        events=_events(eng), lane_devices=eng.lane_nodes, critical=eng.critical_path(last),
        notes=() if plan.project.run.aggregate else (
            "inference runs one tensor group per stage (aggregated): its members are symmetric, so "
            "--no-aggregate would give the same times",),
    )
