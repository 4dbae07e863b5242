"""Continuous batching on one serving instance: which sequences run in the next iteration, and what it did.

The policy is vLLM's with chunked prefill (Sarathi-Serve, Agrawal et al. OSDI 2024): every iteration
first gives each running sequence past its prompt a decode step (one token, or a k + 1-token verify step
with speculative decoding), then continues the prompts being prefilled, then admits waiting requests in
arrival order, while the batch has seats (``max_batch`` running sequences) and the iteration has tokens
(``token_budget``); a prompt is prefilled at most ``chunk`` tokens per iteration.

KV pages (paged attention): a request is admitted only when pages for its whole prompt are free (they are
taken then, vLLM v0's rule: a prefill never waits for pages); a decode step takes a page when its
sequence crosses into a new one. When none is free the most recently admitted running sequence is
preempted by recompute: its pages are freed, and it waits again at the head of the queue to prefill its
prompt and the tokens it generated so far (that prefill's last position yields its next token).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from tilewright.engine.serving.cost_model import Work
from tilewright.engine.serving.kv import BlockPool
from tilewright.engine.serving.requests import RequestSpec


@dataclass(eq=False)  # compared by identity: the same request, not equal counters
class Sequence:
    """A request as it runs. ``computed``: tokens whose K and V are cached; ``target``: tokens the current
    prefill must compute (the prompt, or prompt + generated after a preemption)."""

    spec: RequestSpec
    target: int = 0
    computed: int = 0
    generated: int = 0
    blocks: int = 0
    credit: float = 0.0  # speculative decoding: expected accepted tokens not yet emitted
    first_token_s: float | None = None
    finish_s: float | None = None
    scheduled_s: float | None = None  # first admitted
    last_token_s: float | None = None
    preemptions: int = 0
    transfer_s: float = 0.0  # disaggregated: the KV transfer to the decode group
    handed_over: bool = False  # disaggregated: arrives at the decode group with its prompt's KV

    def __post_init__(self) -> None:
        self.target = self.target or self.spec.prompt_tokens

    @property
    def prefilling(self) -> bool:
        return self.computed < self.target

    @property
    def done(self) -> bool:
        return self.generated >= self.spec.output_tokens


@dataclass
class Iteration:
    work: list[Work] = field(default_factory=list)
    seqs: list[Sequence] = field(default_factory=list)
    decodes: int = 0  # sequences in a decode (or verify) step
    prefill_tokens: int = 0


def pages(tokens: int, block: int) -> int:
    return math.ceil(tokens / block) if tokens > 0 else 0


class Scheduler:
    """One instance's batch. ``waiting`` may be shared by several instances (data-parallel replicas pull
    from one queue). ``prefill_only``: a disaggregated prefill group, whose sequences leave after their
    first token (``handoffs``)."""

    def __init__(
        self,
        pool: BlockPool,
        waiting: deque[Sequence],
        *,
        max_batch: int,
        token_budget: int,
        chunk: int,
        block_tokens: int,
        step_tokens: int = 1,
        accepted_per_step: float = 1.0,
        prefill_only: bool = False,
    ) -> None:
        self.pool, self.waiting = pool, waiting
        self.max_batch, self.token_budget, self.chunk = max_batch, token_budget, chunk
        self.block = block_tokens
        self.step_tokens, self.accepted = step_tokens, accepted_per_step
        self.prefill_only = prefill_only
        self.running: list[Sequence] = []
        self.preemptions = 0
        self.gaps: list[float] = []  # seconds between a sequence's consecutive tokens (time between tokens)

    @property
    def busy(self) -> bool:
        return bool(self.running or self.waiting)

    def _preempt(self, victim: Sequence) -> None:
        self.running.remove(victim)
        self.pool.give(victim.blocks)
        victim.blocks = 0
        victim.computed = 0
        victim.target = victim.spec.prompt_tokens + victim.generated
        victim.credit = 0.0
        victim.preemptions += 1
        victim.handed_over = False
        self.preemptions += 1
        self.waiting.appendleft(victim)

    def next_iteration(self, now: float = 0.0) -> Iteration:
        """The batch of the iteration that starts at ``now`` (pages taken, preemptions done)."""
        it = Iteration()
        budget = self.token_budget
        scheduled: set[int] = set()
        for s in list(self.running):  # 1. decode steps, oldest first
            if s.prefilling or s.blocks == 0:  # blocks == 0: preempted in this loop
                continue
            tokens = self.step_tokens
            if tokens > budget:
                break
            need = pages(s.computed + tokens, self.block) - s.blocks
            while need > self.pool.free:
                victim = next((v for v in reversed(self.running) if id(v) not in scheduled), None)
                assert victim is not None
                self._preempt(victim)
                if victim is s:
                    break
            if s.blocks == 0 and s.computed == 0:  # preempted itself
                continue
            self.pool.take(need)
            s.blocks += need
            it.work.append(Work(tokens, s.computed + tokens, tokens))
            it.seqs.append(s)
            it.decodes += 1
            scheduled.add(id(s))
            budget -= tokens
        for s in self.running:  # 2. prompts being prefilled
            if budget <= 0:
                break
            if s.prefilling and id(s) not in scheduled:
                budget -= self._add_chunk(it, s, budget)
                scheduled.add(id(s))
        while self.waiting and budget > 0 and len(self.running) < self.max_batch:  # 3. admissions
            s = self.waiting[0]
            need = pages(s.target, self.block)
            if need > self.pool.free:
                break
            self.waiting.popleft()
            self.pool.take(need)
            s.blocks = need
            self.running.append(s)
            if s.scheduled_s is None:
                s.scheduled_s = now
            if s.handed_over:  # its prompt's KV arrived from the prefill group: straight to decode
                continue
            budget -= self._add_chunk(it, s, budget)
            scheduled.add(id(s))
        return it

    def _add_chunk(self, it: Iteration, s: Sequence, budget: int) -> int:
        q = min(self.chunk, s.target - s.computed, budget)
        last = s.computed + q == s.target
        it.work.append(Work(q, s.computed + q, 1 if last else 0))
        it.seqs.append(s)
        it.prefill_tokens += q
        return q

    def finish_iteration(self, it: Iteration, now: float) -> tuple[list[Sequence], list[Sequence]]:
        """Apply an iteration that ended at ``now``: (finished sequences, sequences handed to the decode
        group)."""
        finished, handoffs = [], []
        for w, s in zip(it.work, it.seqs, strict=True):
            if s.prefilling:
                s.computed += w.tokens
                if s.prefilling:
                    continue
                s.generated += 1  # the prompt's last position yields the next token
                if s.first_token_s is None:
                    s.first_token_s = now
            else:
                s.credit += self.accepted
                got = min(int(s.credit + 1e-9), s.spec.output_tokens - s.generated)
                s.credit -= got
                s.computed += got
                s.generated += got
                spare = s.blocks - pages(s.computed, self.block)  # rejected drafts' pages go back
                if spare > 0:
                    self.pool.give(spare)
                    s.blocks -= spare
            if s.last_token_s is not None:  # a token after the first: the gap a user sees
                self.gaps.append(now - s.last_token_s)
            s.last_token_s = now
            if s.done:
                s.finish_s = now
                self.running.remove(s)
                self.pool.give(s.blocks)
                s.blocks = 0
                finished.append(s)
            elif self.prefill_only:
                self.running.remove(s)
                handoffs.append(s)  # keeps its pages until the transfer ends
        return finished, handoffs
