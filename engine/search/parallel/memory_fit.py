"""Memory of a candidate in the parallelism search: whether it fits, and what each memory level holds.

The search evaluates memory first, because most of a large search space does not fit and costs nothing more
to reject. Per stage that can be the fullest (with identical blocks, stage 0 and the head's last stage:
``stages_to_check``), the model state per parameter under the candidate's ZeRO stage (the plan's
``perf.memory.bytes_per_param``, ``state_per``) plus the schedule's activation peak (``inflight``) and the
workspace. With ``mapping.memory_levels`` the candidate's residency is resolved by the plan's rule
(``plan.residency.resolve``) from its stage-0 sizes, and each level is checked against its own capacity.

Separate from ``estimate`` because it has one job of its own and mirrors one part of the plan (``StagePlan``'s
state, activations and workspace, ``plan.residency``). The ``Estimator`` inherits it; the attributes and
methods declared below are the estimator's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.project import Project
from tilewright.engine.perf.device import DeviceModel
from tilewright.engine.perf.memory import StateBytes
from tilewright.engine.plan.memo import memo_method
from tilewright.engine.plan.residency import StageResidency, resolve, workspace_level
from tilewright.engine.search.comm import CommModel, Layout
from tilewright.engine.search.parallel.candidate import Candidate, replicas
from tilewright.engine.search.parallel.inflight import peak_activation
from tilewright.engine.search.parallel.stage_sums import Chunks


class MemoryFit:
    """A candidate's bytes per device: per stage, per category, per memory level, against the capacities."""

    project: Project
    hw: HardwareGraph
    dev: DeviceModel
    comm: CommModel
    capacity: float  # the device's memory (``perf.device.device_capacity``)
    levels: bool  # ``mapping.memory_levels`` is set
    uniform: bool  # the blocks are identical (``LayerCosts.uniform_blocks``)
    _per_zero: dict[int, StateBytes]  # model state per parameter, by ZeRO stage
    _param_copy: dict[int, float]  # fp8 training's bf16 parameter copy per parameter, by ZeRO stage
    _residency: dict[tuple, StageResidency | None]

    if TYPE_CHECKING:  # the Estimator's layer → stage sums (``stage_sums``)

        def stage_params(self, tp: int, pp: int, v: int) -> list[float]: ...

        def edge_bytes(self, tp: int, pp: int, v: int, zero: int) -> tuple[list[float], list[float]]: ...

    # --- residency (mapping.memory_levels) ------------------------------------------------------------

    def stage_sizes(self, c: Candidate, m: int, chunks: Chunks, r: int = 0) -> dict[str, float]:
        """Bytes per device of each category on stage ``r``, as ``plan.residency.stage_sizes`` counts them
        (1F1B holds at most pp micro-batches' activations, plus the largest workspace)."""
        params = self.stage_params(c.tp, c.pp, c.interleave)[r]
        per = self.state_per(c.zero)
        acts = float(chunks.workspace[r]) + chunks.act_stage[r] * min(m, c.pp)
        return {
            "weights": params * per.weights + self.edge_bytes(c.tp, c.pp, c.interleave, c.zero)[0][r],
            "gradients": params * per.gradients,
            "optimizer": params * per.optimizer / (replicas(c) if c.zero >= 1 else 1),
            "activations": acts,
            "kv_cache": 0.0,
        }

    def residency(self, c: Candidate, m: int, chunks: Chunks) -> StageResidency | None:
        """``mapping.memory_levels`` resolved for ``c`` from its stage-0 sizes (the plan resolves each stage;
        with named levels they all agree, with ``auto`` stage 0 — the fullest of identical blocks — stands
        for all); None without ``memory_levels``."""
        if not self.levels:
            return None
        key = (c.tp, c.pp, c.dp, c.cp, c.micro_batch, c.interleave, c.recompute, c.recompute_modules,
               c.sequence_parallel, c.zero, m)
        hit = self._residency.get(key)
        if hit is None:
            device = self.comm.tensor_group(Layout(c.placement, c.rank_order), c.tp, c.pp, c.dp, 0, 0)[0]
            sizes = self.stage_sizes(c, m, chunks)
            refused = c.recompute is not Recompute.none or c.pp > 1  # as the plan (plan.residency.stage_residency)
            off_host = frozenset({"activations"}) if refused else frozenset()
            hit = self._residency[key] = resolve(self.project.mapping, self.hw, device, self.dev, sizes, off_host)
        return hit

    def fits(self, c: Candidate, m: int, chunks: Chunks) -> tuple[bool, float]:
        """(fits, bytes of its fullest memory): the device's memory, or with ``memory_levels`` each level
        against its own capacity (as the engines' one track per level), with the schedule's activation
        peak (``memory_parts``) beside the state each level holds."""
        placed = self.residency(c, m, chunks)
        if placed is None:
            need = self.memory(c, m, chunks)
            return need <= self.capacity, need
        per = self.state_per(c.zero)
        worst, need = 0.0, 0.0
        parts = zip(self.stages_to_check(c.pp), self.memory_parts(c, m, chunks), self.edge_weights(c), strict=True)
        for r, (params, acts), edge in parts:
            ws = float(chunks.workspace[r])  # beside the activations, or on the device when they are offloaded
            # activation offload keeps the last transformer layers' activations on the device, beside the workspace
            stored = chunks.act_stage[r]
            offloading = placed.placed.get("activations") == "host" and chunks.offloaded is not None and stored > 0
            share = chunks.offloaded[r] / stored if offloading else 1.0  # type: ignore[index]
            sizes = {
                "weights": params * per.weights + edge,
                "gradients": params * per.gradients,
                "optimizer": params * per.optimizer / (replicas(c) if c.zero >= 1 else 1),
                "activations": (acts - ws) * share,
                "kept": (acts - ws) * (1.0 - share),
                "workspace": ws,
            }
            used = dict.fromkeys(placed.levels, 0.0)
            for cat, nbytes in sizes.items():
                lv = workspace_level(placed) if cat in ("workspace", "kept") else placed.placed.get(cat)
                if lv in used:
                    used[lv] += nbytes
            for lv, info in placed.levels.items():
                fill = used[lv] / info.capacity if info.capacity > 0 else float("inf")
                if fill > worst:
                    worst, need = fill, used[lv]
        return worst <= 1.0, need

    # --- memory ---------------------------------------------------------------------------------------

    @memo_method
    def stages_to_check(self, pp: int) -> tuple[int, ...]:
        """Stage 0 holds the most in-flight micro-batches and the most blocks, so with identical blocks
        only it and the last stage (the head) can be the largest. Kept per pp: the walk asks for every
        candidate's memory."""
        return tuple(sorted({0, pp - 1}) if self.uniform else range(pp))

    def memory_parts(self, c: Candidate, m: int, chunks: Chunks) -> list[tuple[float, float]]:
        """Per stage that can be the fullest: (parameters, activation peak + workspace) in bytes/params."""
        params = self.stage_params(c.tp, c.pp, c.interleave)
        out = []
        for r in self.stages_to_check(c.pp):
            recompute = float(chunks.transient[r]) if c.recompute is Recompute.full else 0.0
            if c.interleave == 1:
                live = min(c.pp - r, m)  # 1F1B (Narayanan et al. §2.2); see ``inflight``
                act = live * chunks.act_stage[r] + recompute
            else:
                act = peak_activation(c.schedule, c.pp, m, c.interleave, r, chunks.act[:, r], recompute)
            out.append((params[r], act + float(chunks.workspace[r])))
        return out

    @memo_method
    def state_per(self, zero: int) -> StateBytes:
        """Model-state bytes per parameter under ZeRO stage ``zero`` (the plan's ``bytes_per_param``, with the
        bf16 parameters of an fp8 run unless ``fp8_param_gather`` drops them: ``perf.memory``); kept per stage
        (frozen), since the walk asks for it per candidate."""
        copy, per = self._param_copy[zero], self._per_zero[zero]
        return replace(per, weights=per.weights + copy) if copy else per

    def state_bytes_per_param(self, zero: int, dp: int) -> float:
        p = self.state_per(zero)
        return p.weights + p.gradients + p.optimizer / (dp if zero >= 1 else 1)

    def memory(self, c: Candidate, m: int, chunks: Chunks) -> float:
        """Peak bytes of the fullest device (weights, gradients, optimizer, activations, workspace)."""
        per = self.state_bytes_per_param(c.zero, replicas(c))
        parts = self.memory_parts(c, m, chunks)
        return max(p * per + rest + e for (p, rest), e in zip(parts, self.edge_weights(c), strict=True))

    def edge_weights(self, c: Candidate, zero: int | None = None) -> tuple[float, ...]:
        """``edge_bytes``' held weights of each stage ``stages_to_check`` lists, in its order (``memory_parts``')."""
        return self._edge_held(c.tp, c.pp, c.interleave, c.zero if zero is None else zero)

    @memo_method
    def _edge_held(self, tp: int, pp: int, v: int, zero: int) -> tuple[float, ...]:
        held = self.edge_bytes(tp, pp, v, zero)[0]
        return tuple(held[r] for r in self.stages_to_check(pp))
