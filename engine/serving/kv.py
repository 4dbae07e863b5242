"""The paged KV cache of one serving instance: how many pages fit, and who holds them.

Capacity per device is what ``tilewright run`` leaves for the cache: the memory that holds the KV cache
(the device's own capacity, ``StagePlan.capacity``, or the level ``mapping.memory_levels`` puts the cache
in) minus the weights and the inference workspace placed there. The workspace is
``plan.inference_phases``' (the largest op transient) for a prefill of a whole iteration's token budget.
A page holds ``run.inference.kv_block_tokens`` tokens of one sequence in every layer of its stage; the
instance has as many pages as its tightest stage fits (every stage stores every token's K and V).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from tilewright.engine.plan.inference_phases import inference_phases
from tilewright.engine.plan.plan import Plan


@dataclass(frozen=True)
class KVCapacity:
    blocks: int  # pages the instance holds
    block_tokens: int
    bytes_per_block: float  # per device, on the tightest stage
    free_bytes: float  # per device, on the tightest stage, before any page
    workspace_bytes: float  # per device, on the tightest stage
    weights_bytes: float  # per device, on the tightest stage

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_tokens


def kv_capacity(plan: Plan, kv_bytes_per_token: list[float], max_tokens: int) -> KVCapacity:
    """Pages of ``run.inference.kv_block_tokens`` tokens that fit on every stage at once."""
    project = plan.project
    inf = project.run.inference.model_copy(update={"batch": 1, "prompt_tokens": max(max_tokens, 1), "output_tokens": 1})
    probe = project.model_copy(update={"run": project.run.model_copy(update={"inference": inf})})
    phases = inference_phases(dataclasses.replace(plan, project=probe))
    block = inf.kv_block_tokens
    best: KVCapacity | None = None
    for r, st in enumerate(plan.stages):
        workspace = phases.workspace(r)
        weights = st.state.weights
        capacity = st.capacity
        res = st.residency
        if res is not None:
            level = res.placed.get("kv_cache")
            info = res.levels.get(level) if level is not None else None
            if info is not None:
                capacity = info.capacity
                weights = weights if res.placed.get("weights") == level else 0.0
                workspace = workspace if res.placed.get("activations") == level else 0.0
        free = capacity - weights - workspace
        per_block = kv_bytes_per_token[r] * block
        blocks = math.floor(free / per_block) if per_block > 0 and free > 0 else (0 if per_block > 0 else 10**12)
        cap = KVCapacity(max(blocks, 0), block, per_block, free, workspace, weights)
        if best is None or cap.blocks < best.blocks:
            best = cap
    assert best is not None
    return best


class BlockPool:
    """Free pages of one instance; the peak and the time-weighted use are read by the report."""

    def __init__(self, blocks: int) -> None:
        self.total = blocks
        self.used = 0

    @property
    def free(self) -> int:
        return self.total - self.used

    def take(self, n: int) -> bool:
        if n > self.free:
            return False
        self.used += n
        return True

    def give(self, n: int) -> None:
        if n > self.used:
            raise RuntimeError(f"freeing {n} KV pages with {self.used} in use")
        self.used -= n
