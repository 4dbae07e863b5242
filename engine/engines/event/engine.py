"""The event engine behind the engine contract: simulate the plan's program, measure, build the result."""

from __future__ import annotations

from tilewright.engine.engines.event.links import link_series
from tilewright.engine.engines.event.simulation import Simulation
from tilewright.engine.engines.result_builder import Measurement, build_result, close_breakdown
from tilewright.engine.jobs import CancelFn, ProgressFn, Reporter
from tilewright.engine.plan.plan import Plan
from tilewright.engine.plan.program import InferenceProgram, program_for
from tilewright.engine.plan.timing import dram_floor, floor_note
from tilewright.engine.release import release_attributes
from tilewright.engine.results.result import Result

SYMMETRIC_NOTE = ("inference runs one tensor group per stage (aggregated): its members are symmetric, so "
                  "--no-aggregate would give the same times")


class EventEngine:
    """Links shared max-min fairly (``contention``), or each transfer at its route's bottleneck; one
    process per stage (``aggregate``) or per device. ``series=False`` skips the per-link utilisation
    series and lanes (a command that prints only metrics)."""

    name = "event"

    def __init__(self, *, contention: bool = True, aggregate: bool = True, series: bool = True) -> None:
        self.contention, self.aggregate, self.series = contention, aggregate, series

    def run(self, plan: Plan, *, progress: ProgressFn | None = None, cancel: CancelFn | None = None) -> Result:
        report = Reporter(progress, cancel)
        report.check()
        sim = Simulation(program_for(plan), contention=self.contention, aggregate=self.aggregate)
        sim.run(report)
        result = build_result(sim.program, self.measure(sim))
        release_attributes(sim)  # its recorder, network and queues freed piece by piece (engine.release)
        return result

    def measure(self, sim: Simulation) -> Measurement:
        """What the simulation recorded, as the result builder takes it."""
        plan, program, rec = sim.plan, sim.program, sim.rec
        finishes = [rec.ledgers[r].finish for r in range(plan.pp)]
        end = max(finishes, default=0.0)
        reported = program.reported_stage(finishes)
        ledger = rec.ledgers[reported]
        breakdown = dict(ledger.times)
        notes, extra = [], 0.0
        if program.train and not self.contention:  # as the analytic engine: shared DRAM ports bound the end
            floor_s, _ = dram_floor(plan)
            if floor_s > end:
                notes.append(floor_note(plan, end))
                extra = floor_s - end
                breakdown["memory_stall"] = breakdown.get("memory_stall", 0.0) + extra
                end = floor_s
        # training: the stage idles after its own end; inference: whatever its categories leave
        close_breakdown(breakdown, end, ledger.finish + extra if program.train else sum(breakdown.values()))
        memory = [rec.ledgers[r].columns() for r in range(plan.pp)]
        links = link_series(plan, sim.net, end, rec) if self.series else []
        critical = sim.critical_path(reported)
        steps_end = critical[-1][1] + critical[-1][2] if critical else 0.0
        if end - steps_end > 1e-12:
            critical.append(("gradient reduction + optimizer step", steps_end, end - steps_end))
        phase_ends = {}
        if isinstance(program, InferenceProgram):
            phase_ends = {name: sim.phase_end(key) for name, key in program.phase_ends.items()}
            notes = [] if self.aggregate else [SYMMETRIC_NOTE]
        return Measurement(
            engine=self.name, end=end, breakdown=breakdown, memory=memory, timeline=rec.timeline,
            lane_devices=dict(sim.lane_nodes), links=links, critical=critical, events=sim.events,
            phase_ends=phase_ends, notes=notes,
        )
