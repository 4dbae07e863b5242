"""Step tables: what each pipeline stage runs, in which order, what each step waits for and what it sends.

A training iteration (a schedule of forwards and backwards per model chunk) and an inference request
(a prefill, then one decode step per output token after the first, for each micro-batch) are both tables
of ``StepRow``s, one tuple of rows per stage. The event engine's stage process and the uncontended recurrence
(``engine.plan.recurrence``) iterate the same table, so the two engines cannot disagree on the order.

Keys are plain tuples: ``(kind, micro_batch, chunk, rank)`` for training, ``("I", phase, micro_batch,
rank)`` for inference (phase 0 is the prefill, phase p ≥ 1 decode step p − 1). Tables depend only on
the pipeline's shape, so they are cached across plans (a search asks for many shapes).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from tilewright.engine.ir.mapping import Schedule
from tilewright.engine.plan.schedules import predecessor, stage_order

INFERENCE = "I"  # the first element of an inference step's key


@dataclass(frozen=True, slots=True)
class StepRow:
    """One step of one stage."""

    kind: str  # "F" | "B": forward (inference steps are forwards) or backward
    micro_batch: int
    chunk: int  # model chunk (interleaved schedules); 0 for inference
    phase: int  # inference: 0 prefill, p ≥ 1 decode step p − 1; training: -1
    key: tuple  # this step's output
    dep: tuple | None  # the output it consumes, if any
    send: tuple | None  # the pipeline send of its output: (virtual stage, backward) or (stage, tokens)
    dkey: tuple  # what its duration is looked up by: (rank, chunk, kind), (rank, chunk, kind, True) or (rank, phase)
    last_backward: bool = False  # the chunk's last backward: its gradient reduction may start
    # a combined-1F1B warmup forward or cooldown backward (``schedules.Step.alone``): the chunk's unpaired pass
    # (``StagePlan.alone``), its dkey (rank, chunk, kind, True)
    alone: bool = False


Table = tuple[tuple[StepRow, ...], ...]  # per stage, in the order the stage runs them


@lru_cache(maxsize=64)
def training_table(schedule: Schedule, pp: int, micro_batches: int, chunks: int, overlap_ep: bool = False) -> Table:
    """One training iteration: each stage's schedule, a backward's recompute counted in its duration;
    ``overlap_ep``: Megatron-Core's combined 1F1B (``schedules``), its unpaired steps marked ``alone``."""
    last_vs = pp * chunks - 1
    table = []
    for r in range(pp):
        rows = []
        backwards = dict.fromkeys(range(chunks), 0)
        for step in stage_order(schedule, r, pp, micro_batches, chunks, overlap_ep):
            vs = step.chunk * pp + r
            last_backward = False
            if step.kind == "F":
                send = (vs, False) if vs < last_vs else None
            else:
                send = (vs - 1, True) if vs > 0 else None
                backwards[step.chunk] += 1
                last_backward = backwards[step.chunk] == micro_batches
            rows.append(StepRow(
                step.kind, step.micro_batch, step.chunk, -1, (step.kind, step.micro_batch, step.chunk, r),
                predecessor(step, r, pp, chunks), send,
                (r, step.chunk, step.kind, True) if step.alone else (r, step.chunk, step.kind), last_backward,
                step.alone,
            ))
        table.append(tuple(rows))
    return tuple(table)


@lru_cache(maxsize=16)
def inference_table(pp: int, micro_batches: int, phases: int, prompt: int) -> Table:
    """One inference request: per phase, every micro-batch through every stage. Decode step k of a
    micro-batch starts on stage 0 once its step k − 1 has left the last stage (the sampled token goes
    back: a few bytes whose transfer is not modelled, so it is no send)."""
    last = pp - 1
    table = []
    for r in range(pp):
        rows = []
        for p in range(phases):
            tokens = prompt if p == 0 else 1
            for mb in range(micro_batches):
                if r > 0:
                    dep: tuple | None = (INFERENCE, p, mb, r - 1)
                elif p > 0:
                    dep = (INFERENCE, p - 1, mb, last)
                else:
                    dep = None
                send = (r, tokens) if r < last else None
                rows.append(StepRow("F", mb, 0, p, (INFERENCE, p, mb, r), dep, send, (r, p)))
        table.append(tuple(rows))
    return tuple(table)


def phase_name(phase: int) -> str:
    """Phase 0 is the prefill (it produces output token 1); decode step p − 1 produces token p + 1."""
    return "prefill" if phase == 0 else f"decode token {phase + 1}"


def step_name(key: tuple) -> str:
    """How the critical path names a step (its key, optionally followed by a simulation unit)."""
    if key[0] == INFERENCE:
        _i, phase, mb, rank = key[:4]
        return f"{phase_name(phase)} mb {mb} · stage {rank}"
    kind, mb, chunk, rank = key[:4]
    return f"{'forward' if kind == 'F' else 'backward'} mb {mb} chunk {chunk} · stage {rank}"
