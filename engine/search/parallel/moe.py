"""Mixture-of-experts in the search: a memory lower bound at every expert-parallel degree, the seeds it picks
for the second stage, and the second-stage variants it rules out before they are planned.

The first stage (``first_stage.walk_space``) times the dense space at ep 1, where every device holds all
routed experts of its stage. For a large MoE model (DeepSeek-V3: 256 routed experts of 44 M parameters in each of
58 blocks, ~97 % of its 671 B parameters) that either misses memory or forces tp·pp high enough to hold
all experts — while the mapping its authors trained with (pp 16, ep 64 over 8 nodes, ZeRO-1 dp; DeepSeek-V3
technical report, arXiv 2412.19437, §3.2) needs dp ≥ 64 to carve ep 64 from and holds 1/64 of the experts.
Seeding the second stage only with the fastest candidates *at ep 1* therefore never reaches it: ep must
divide dp, and the kept seeds are those with the small dp that tp·pp large enough to hold all experts
leaves.

Why one seed per ep degree. Expert parallelism does not change a device's work (a balanced router sends
each ep rank as many token-slots as its own tokens have; ``plan.experts``), so the first stage's
communication-free time ``Estimator.lower_bound`` is the same at every ep. What ep changes is (a) memory —
routed-expert weights, gradients and optimizer state divided by ep — and (b) communication: the dispatch
and combine all-to-alls, whose cost grows with how far the ep group reaches (NVLink inside a node, the
network beyond), against a routed-expert gradient reduction that shrinks by ep. The first stage cannot
time (b) without planning, so it does not choose ep; instead, for every degree e the user allows, it keeps
the fastest (communication-free) candidate whose dp e divides and that fits in memory *if* its experts are
spread over e ranks (``ExpertBound.fits``: the plan's state accounting with the routed experts divided by e,
beside the first stage's activation peak). The second stage then plans each of those seeds at its e, so the
all-to-all's price at each reach — one node, 8 nodes, the whole cluster — is compared at the best dense
layout that reach permits. The communication-free time cannot see what tp does to the routed experts'
gradient reduction (tp halves the expert bytes each device reduces over its dp / ep group, often over the
network) nor tp's own all-reduces, so each degree keeps the fastest candidate of each of its
``SHAPES_PER_DEGREE`` fastest (tp, pp) shapes, not one: on a 64-GPU DeepSeek-like model the third shape (tp 8
at ep 2) was 5 % faster than anything the first two reached. That is at most 3 seeds per degree > 1 (24 for
256 experts) whatever the space's size, each planned at ZeRO 0–3/FSDP and with the overlapped gradient
reduction.

The bound is a lower bound on what the plan charges (the same state formula, ``perf.memory.model_state``,
with ZeRO-3's gathered layers, all-to-all buffers and workspace beyond it not counted), so it is also used
to drop second-stage variants that cannot fit before they are planned (``ExpertBound.may_fit``): with MoE
most variants of a seed that missed memory are such, and planning one of a 2,048-GPU model costs ~1 s.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from tilewright.engine.ir.workload import TransformerDims
from tilewright.engine.perf.memory import model_state, params_on_device
from tilewright.engine.plan.experts import expert_dp, routed_experts
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.search.parallel.estimate import Estimator
from tilewright.engine.search.parallel.stage_sums import Chunks


class ExpertBound:
    """Memory lower bounds of candidates with their routed experts spread over ep ranks."""

    def __init__(self, est: Estimator, experts: int) -> None:
        self.est = est
        self.experts = experts
        self._expert: dict[int, np.ndarray] = {}
        self._stage: dict[tuple[int, int, int], list[float]] = {}

    def _expert_params(self, tp: int) -> np.ndarray:
        """Routed-expert parameters per device of each layer at ep 1 (``plan.experts.routed_experts``)."""
        p = self._expert.get(tp)
        if p is None:
            ops = self.est.costs.ops
            p = self._expert[tp] = np.array([params_on_device(routed_experts(o), tp) for o in ops], dtype=float)
        return p

    def stage_expert_params(self, tp: int, pp: int, v: int) -> list[float]:
        k = (tp, pp, v)
        s = self._stage.get(k)
        if s is None:
            s = self._stage[k] = self.est._sum(self._expert_params(tp), pp, v).sum(axis=0).tolist()
        return s

    def eps(self, dp: int, allowed: list[int]) -> list[int]:
        """The degrees > 1 a candidate with ``dp`` replicas can use (ep divides dp and the experts)."""
        return [e for e in allowed if e > 1 and dp % e == 0 and self.experts % e == 0]

    def need(
        self,
        c: Candidate,
        m: int,
        chunks: Chunks,
        ep: int,
        zero: int,
        offload: bool = False,
        parts: list[tuple[float, float]] | None = None,
    ) -> float:
        """Bytes of the fullest stage with the routed experts over ``ep`` ranks under ZeRO ``zero`` (3 for
        FSDP), optimizer state elsewhere with ``offload``: state by ``model_state`` plus the first stage's
        activation peak and workspace (``parts``: ``Estimator.memory_parts``, if known). Below the plan's
        peak (module docstring)."""
        # bytes per parameter, linear in parameters: the experts' state is sharded over the ranks that hold
        # the same experts (dp / ep replicas; tp·dp / (ep·etp) ranks with expert tp below tp, ``plan.experts``),
        # the rest over all dp (``perf.memory.expert_model_state``)
        etp = c.expert_tp if c.expert_tp is not None else c.tp  # ep 1 folds too (``experts.expert_tp_of``)
        s = model_state(1.0, self.est.state_per(zero), zero, c.dp * c.cp)  # dp · cp replicas, as plan.build_plan
        x = model_state(1.0, self.est.state_per(zero), zero, expert_dp(c.tp, c.dp * c.cp, ep, etp))  # plan.build_plan
        per = s.weights + s.gradients + (0.0 if offload else s.optimizer)
        per_expert = x.weights + x.gradients + (0.0 if offload else x.optimizer)
        total = self.est.stage_params(c.tp, c.pp, c.interleave)
        expert = self.stage_expert_params(c.tp, c.pp, c.interleave)
        if parts is None:
            parts = self.est.memory_parts(c, m, chunks)  # (params, activations + workspace): no ZeRO in it
        stages = self.est.stages_to_check(c.pp)
        edge = self.est.edge_bytes(c.tp, c.pp, c.interleave, zero)[0]  # bf16 edge layers' weights, sharded as
        shard = c.dp * c.cp if zero >= 3 else 1  # the dense weights are (``model_state``)
        return max(
            per * (total[r] - expert[r]) + per_expert * expert[r] * c.tp / etp / ep + rest + edge[r] / shard
            for r, (_p, rest) in zip(stages, parts, strict=True)
        )

    def fits(
        self, c: Candidate, m: int, chunks: Chunks, ep: int, parts: list[tuple[float, float]] | None = None
    ) -> bool:
        """``c`` (ZeRO 0/1 as the first stage walks it) may fit with its experts over ``ep`` ranks."""
        zero = 1 if c.dp > 1 else 0
        return self.need(c, m, chunks, ep, zero, parts=parts) <= self.est.capacity

    def may_fit(self, c: Candidate, m: int, chunks: Chunks) -> bool:
        """A second-stage variant ``c`` (its own ep, ZeRO, FSDP, offload; cp 1) may fit: False only when
        its lower bound already exceeds the device's memory. ``chunks``: its dense layout's."""
        if c.cp > 1 or self.est.levels:  # cp shrinks activations; memory_levels place state elsewhere
            return True
        zero = 3 if c.fsdp else c.zero
        return self.need(c, m, chunks, c.ep, zero, offload=c.offload is not None) <= self.est.capacity


# seeds kept per ep degree, each of its own (tp, pp) shape (module docstring)
SHAPES_PER_DEGREE = 3


class MoESeeds:
    """Per ep degree, the fastest first-stage candidates (communication-free time) that fit with their
    routed experts over that many ranks, one per (tp, pp) shape: the second stage's seeds for expert
    parallelism."""

    def __init__(self, bound: ExpertBound, eps: list[int], keep: int = SHAPES_PER_DEGREE) -> None:
        self.bound = bound
        self.allowed = sorted(e for e in eps if e > 1)
        self.keep = keep
        self.best: dict[int, list[tuple[float, Candidate]]] = {e: [] for e in self.allowed}

    def offer(self, c: Candidate, m: int, chunks: Chunks, time_s: float) -> bool:
        """Record ``c`` (ep 1) at each degree it can use and fits with; True if it fits at any."""
        eps = self.bound.eps(c.dp, self.allowed)
        if not eps:
            return False
        parts = self.bound.est.memory_parts(c, m, chunks)
        fits_any = False
        for e in reversed(eps):  # memory falls with e: the first that misses ends it
            if not self.bound.fits(c, m, chunks, e, parts):
                break
            fits_any = True
            kept = self.best[e]
            same = next((i for i, (_t, k) in enumerate(kept) if (k.tp, k.pp) == (c.tp, c.pp)), None)
            if same is not None:  # one seed per shape: its micro-batch and recompute variants are the
                if time_s < kept[same][0]:  # second stage's to try
                    kept[same] = (time_s, c)
                    kept.sort(key=lambda t: t[0])
            elif len(kept) < self.keep or time_s < kept[-1][0]:
                kept.append((time_s, c))
                kept.sort(key=lambda t: t[0])
                del kept[self.keep :]
        return fits_any

    def seeds(self) -> list[Candidate]:
        """Each kept candidate at its degree (ep set), the smallest degree first."""
        return [replace(c, ep=e) for e in self.allowed for _, c in self.best[e]]


def moe_experts(spec: object) -> int:
    """Routed experts of a MoE transformer, 0 otherwise."""
    moe = spec.moe if isinstance(spec, TransformerDims) else None
    return moe.experts if moe is not None else 0
