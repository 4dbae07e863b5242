"""Pipeline schedules: the order in which each stage runs forward and backward passes.

Follows Megatron-LM (Narayanan et al., SC'21 §2.2): GPipe runs every forward then every backward;
1F1B warms up with ``pp - rank - 1`` forwards then alternates; interleaved 1F1B gives each device
``v`` model chunks (virtual stages ``chunk * pp + rank``) and warms up with
``2·(pp - rank - 1) + (v - 1)·pp`` virtual micro-batches. Pure functions, no simulation state:
``engine.plan.steps`` turns them into the step tables both engines iterate.

Megatron-Core's combined 1F1B (``overlap_ep``: ``--overlap-moe-expert-parallel-comm``, ``plan.pass_comms``) runs
each steady-state forward together with the backward beside it, their expert all-to-alls hidden behind each other's
nodes; the warmup's forwards and the cooldown's backwards run alone (``Step.alone``). Its interleaved schedule warms
up one virtual micro-batch more ("we schedule one extra micro-batch forward step before the 1f1b stages ... to
ensure the forward and backward computations are independent in all 1f1b steps", ``get_pp_rank_microbatches`` of
megatron/core/pipeline_parallel/schedules.py, feeding ``combined_1f1b_schedule_for_interleaved_pipelining``), and
without a pipeline ``combined_1f1b_schedule_for_no_pipelining`` runs the first forward alone, then each forward
with the previous micro-batch's backward, then the last backward alone (combined_1f1b.py): the same shape, one
forward of warmup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tilewright.engine.ir.mapping import Schedule

Pass = Literal["F", "B"]


@dataclass(frozen=True, slots=True)
class Step:
    """One pass of one micro-batch through one model chunk on one pipeline rank."""

    kind: Pass
    micro_batch: int
    chunk: int
    alone: bool = False  # under the combined 1F1B, a warmup forward or cooldown backward: no pass beside it

    def virtual_stage(self, rank: int, pp: int) -> int:
        return self.chunk * pp + rank


def _interleaved_ids(k: int, pp: int, chunks: int, forward: bool) -> tuple[int, int]:
    """Megatron's mapping of the k-th virtual micro-batch to (micro-batch, chunk)."""
    group = pp * chunks
    in_group = k % group
    chunk = in_group // pp
    if not forward:
        chunk = chunks - chunk - 1
    micro_batch = (k // group) * pp + in_group % pp
    return micro_batch, chunk


def stage_order(schedule: Schedule, rank: int, pp: int, micro_batches: int, chunks: int = 1,
                overlap_ep: bool = False) -> list[Step]:
    """The steps rank ``rank`` runs, in order, for one training iteration; ``overlap_ep``: Megatron-Core's
    combined 1F1B (module docstring), one more forward of warmup and the unpaired steps marked."""
    m = micro_batches
    if schedule is Schedule.gpipe:
        return [Step("F", i, 0, overlap_ep) for i in range(m)] + [Step("B", i, 0, overlap_ep) for i in range(m)]
    if schedule is Schedule.one_f_one_b or chunks == 1:
        warm = min(pp - rank - 1 + overlap_ep, m)
        steps = [Step("F", i, 0, overlap_ep) for i in range(warm)]
        for i in range(m - warm):
            steps += [Step("F", warm + i, 0), Step("B", i, 0)]
        steps += [Step("B", i, 0, overlap_ep) for i in range(m - warm, m)]
        return steps
    total = m * chunks
    if m == pp:
        warm = total
    else:
        warm = min((pp - rank - 1) * 2 + (chunks - 1) * pp + overlap_ep, total)
    steps = [Step("F", *_interleaved_ids(k, pp, chunks, True), overlap_ep) for k in range(warm)]
    for i in range(total - warm):
        steps.append(Step("F", *_interleaved_ids(warm + i, pp, chunks, True)))
        steps.append(Step("B", *_interleaved_ids(i, pp, chunks, False)))
    steps += [Step("B", *_interleaved_ids(k, pp, chunks, False), overlap_ep) for k in range(total - warm, total)]
    return steps


def predecessor(step: Step, rank: int, pp: int, chunks: int) -> tuple[Pass, int, int, int] | None:
    """(kind, micro_batch, chunk, rank) of the step whose output this step consumes, if any."""
    vs = step.virtual_stage(rank, pp)
    last = pp * chunks - 1
    if step.kind == "F":
        if vs == 0:
            return None
        prev = vs - 1
        return ("F", step.micro_batch, prev // pp, prev % pp)
    if vs == last:
        return ("F", step.micro_batch, step.chunk, rank)
    nxt = vs + 1
    return ("B", step.micro_batch, nxt // pp, nxt % pp)

