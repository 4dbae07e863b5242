"""What the pipeline runs for a plan — a training iteration or an inference request — as both engines need it.

A program is a step table (``engine.plan.steps``) plus, per step, the passes it runs, the memory it
takes and frees, and its pipeline send; and per stage the memory held from the start. The event engine
runs the steps as simpy processes on the network, the analytic engine times them by the uncontended
recurrence; neither knows whether it is training or serving beyond ``train`` (training ends each stage
with its gradient reduction and optimizer step).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import cached_property

from tilewright.engine.ir.project import Mode
from tilewright.engine.perf.collectives import Collective
from tilewright.engine.plan.inference_phases import InferencePhases, inference_phases
from tilewright.engine.plan.passes import ChunkPass
from tilewright.engine.plan.plan import Plan
from tilewright.engine.plan.steps import INFERENCE, Table, inference_table, training_table

MemoryChange = tuple[str, float]  # (memory category, bytes added; negative frees)
# Per step: (a pass run first — a backward's recompute —, the step's pass, memory taken as it starts,
# memory freed as it ends)
StepWork = tuple[ChunkPass | None, ChunkPass, MemoryChange | None, MemoryChange | None]


class TrainingProgram:
    """One training iteration of ``plan.schedule``."""

    train = True

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.blocking = plan.pipeline.blocking  # a stage waits for its sends (``plan.pipeline_p2p``)
        self.table: Table = training_table(plan.schedule, plan.pp, plan.micro_batches, plan.chunks,
                                           plan.combined_1f1b)
        self._work: dict[int, list[StepWork]] = {}

    @property
    def pass_count(self) -> int:
        """Forward, backward and recompute passes of one simulation unit (sizes the Gantt's detail)."""
        plan = self.plan
        return plan.pp * plan.chunks * plan.micro_batches * 3

    def initial_memory(self, r: int) -> dict[str, float]:
        st = self.plan.stages[r]
        state = st.state
        return {"weights": state.weights, "gradients": state.gradients, "optimizer": state.optimizer,
                "workspace": st.workspace}

    def work(self, r: int) -> Iterable[StepWork]:
        """Per row of ``table[r]``: forwards store their activations; a backward runs its recompute
        first (a transient layer on top) and frees them."""
        hit = self._work.get(r)
        if hit is None:
            st = self.plan.stages[r]
            act, transient, passes = st.act_bytes, st.transient_bytes, st.passes
            hit = []
            for row in self.table[r]:
                ps = (st.alone if row.alone else passes)[(row.chunk, row.kind)]  # plan.schedules
                if row.kind == "F":
                    hit.append((None, ps, ("activations", act[row.chunk]), None))
                    continue
                pre = passes.get((row.chunk, "R"))
                grow = ("activations", transient) if pre is not None else None
                free = -(act[row.chunk] + (transient if pre is not None else 0.0))
                hit.append((pre, ps, grow, ("activations", free)))
            self._work[r] = hit
        return hit

    def send(self, key: tuple, replica: int, member: int | None) -> Collective:
        """The pipeline send ``key`` = (virtual stage, backward) of one replica's tensor group, or of
        one ``member`` of it."""
        vs, backward = key
        if member is None:
            return self.plan.p2p(vs, replica, backward)
        return self.plan.p2p_member(vs, replica, backward, member)

    def send_times(self) -> dict[tuple, float]:
        plan = self.plan
        out = {}
        for vs in range(plan.virtual_stages - 1):
            out[(vs, False)] = plan.p2p(vs, 0, False).time(plan.hw)
            out[(vs, True)] = plan.p2p(vs, 0, True).time(plan.hw)
        return out

    def reported_stage(self, finishes: list[float]) -> int:
        """The stage whose breakdown the result reports: the one that finishes last."""
        return max(range(len(finishes)), key=finishes.__getitem__)


class InferenceProgram:
    """One batch of inference requests (``run.inference``): a prefill (it produces the first output
    token), then ``output_tokens − 1`` decode steps, for each micro-batch in flight (definitions in
    ``engine.plan.inference_phases``). Runs one tensor group per stage (its members are symmetric)."""

    train = False
    blocking = False  # a serving runtime's sends: the stage computes on

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.phases: InferencePhases = inference_phases(plan)
        ph = self.phases
        self.table: Table = inference_table(plan.pp, ph.micro_batches, 1 + ph.decode_steps, ph.prompt)
        self._sends: dict[tuple, Collective] = {}

    @property
    def pass_count(self) -> int:
        ph = self.phases
        return self.plan.pp * ph.micro_batches * (1 + ph.decode_steps)

    @cached_property
    def phase_ends(self) -> dict[str, tuple]:
        """Keys of the steps that end the prefill of the last and of the first micro-batch on the last stage:
        the batch's first output tokens exist then (time to first token, ``InferencePhases.first_token_s``)."""
        ph, last = self.phases, self.plan.pp - 1
        return {"prefill": (INFERENCE, 0, ph.micro_batches - 1, last), "first_prefill": (INFERENCE, 0, 0, last)}

    def initial_memory(self, r: int) -> dict[str, float]:
        return {"weights": self.plan.stages[r].state.weights, "gradients": 0.0, "optimizer": 0.0,
                "workspace": self.phases.workspace(r)}

    def work(self, r: int) -> Iterator[StepWork]:
        """Per row of ``table[r]``, made as the stage gets there: each step's pass, and the KV-cache pages
        its tokens add (the whole prompt at the prefill, one token per decode step: a page when the
        sequences cross into a new one)."""
        ph = self.phases
        for p in range(1 + ph.decode_steps):
            ps = ph.pass_for(r, p)
            kv = ph.kv_grow(r, p)
            grow = ("kv_cache", kv) if kv else None
            for _mb in range(ph.micro_batches):
                yield None, ps, grow, None

    def send(self, key: tuple, replica: int, member: int | None) -> Collective:  # one group per stage
        hit = self._sends.get(key)
        if hit is None:
            hit = self._sends[key] = self.phases.send(*key)
        return hit

    def send_times(self) -> dict[tuple, float]:
        ph, plan = self.phases, self.plan
        return {(r, tokens): ph.send(r, tokens).time(plan.hw) for r in range(plan.pp - 1)
                for tokens in (ph.prompt, 1)}

    def reported_stage(self, finishes: list[float]) -> int:
        """The last stage: the request's tokens leave there."""
        return len(finishes) - 1


Program = TrainingProgram | InferenceProgram


def program_for(plan: Plan) -> Program:
    return InferenceProgram(plan) if plan.project.run.mode is Mode.infer else TrainingProgram(plan)
