"""The serving instances of a project: one per data-parallel replica, or a prefill and a decode group.

With expert parallelism (``mapping.ep`` > 1) a replica is one ep rank of an ep group that shares the experts and
exchanges tokens all-to-all in every MoE layer (data-parallel attention, ``plan.served_experts``): the plan is
made on the group's devices and every rank keeps its own batch and KV pages.

An instance is a plan (the project's mapping on its devices), its iteration cost model and its KV pages.
Replicas of one plan are identical, so they share one cost model. ``--disaggregate P:D`` serves prompts on
the first P devices and decodes on the next D (Splitwise, Patel et al. ISCA 2024; DistServe, Zhong et al.
OSDI 2024): each group keeps the project's pipeline depth and takes tensor parallelism
``devices / pp``. A prompt's KV cache then moves from the prefill group's devices to the decode group's
(stage by stage, tensor rank by tensor rank) as parallel point-to-point sends over the real links of the
project's hardware (``perf.collectives.point_to_point``, uncontended).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.engine.hardware import elaborate
from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.mapping import tp_axes_for
from tilewright.engine.ir.project import Project
from tilewright.engine.perf.collectives import point_to_point
from tilewright.engine.plan.checks import check_project
from tilewright.engine.plan.placement import stage_groups
from tilewright.engine.plan.plan import Plan
from tilewright.engine.plan.served_experts import served_ep
from tilewright.engine.results.text import counted
from tilewright.engine.serving.config import ServingSetupError
from tilewright.engine.serving.cost_model import IterationCostModel
from tilewright.engine.serving.kv import KVCapacity, kv_capacity
from tilewright.engine.simulate import make_plan
from tilewright.engine.workloads.transformer_inference import kv_cache_bytes


@dataclass
class InstanceModel:
    name: str  # "serve", "prefill" or "decode"
    plan: Plan
    cost: IterationCostModel
    kv: KVCapacity
    replicas: int


def instance_model(name: str, project: Project, max_tokens: int, replicas: int) -> InstanceModel:
    plan = make_plan(project)
    cost = IterationCostModel(plan, max_tokens)
    kv = kv_capacity(plan, cost.kv_bytes_per_token(), max_tokens)
    if kv.blocks < 1:
        raise ServingSetupError(
            "disaggregate" if name != "serve" else "memory",
            f"the {name} instance has no room for a single KV page: {kv.free_bytes / 2**30:.3g} GiB per device "
            f"left after {kv.weights_bytes / 2**30:.3g} GiB of weights and {kv.workspace_bytes / 2**30:.3g} GiB of "
            f"workspace, {kv.bytes_per_block / 2**20:.3g} MiB per page",
        )
    return InstanceModel(name, plan, cost, kv, replicas)


def _group_project(project: Project, devices: int, what: str) -> Project:
    m = project.mapping
    if devices % m.pp:
        raise ServingSetupError(
            "disaggregate",
            f"the {what} group's {counted(devices, 'device')} are not a multiple of the pipeline depth pp = {m.pp}",
        )
    tp = devices // m.pp
    mapping = m.model_copy(
        update={"tp": tp, "tp_axes": tp_axes_for(m.tp_axes, tp), "dp": 1, "global_batch": 1, "micro_batch": 1}
    )
    group = project.model_copy(update={"mapping": mapping})
    problems = check_project(group, allow_large=True)  # e.g. a tp that does not divide the heads
    if problems:
        reasons = "; ".join(f"{p.path}: {p.reason}" if p.path else p.reason for p in problems)
        raise ServingSetupError(
            "disaggregate", f"the {what} group's {counted(devices, 'device')} (tp {tp}, pp {m.pp}): {reasons}"
        )
    return group


def refuse_expert_parallel(project: Project, disaggregate: bool) -> None:
    """Refuse expert parallelism (``mapping.ep`` > 1) that serving does not run: an ep that does not divide the
    data-parallel replicas (it fits only by folding the experts over the tensor ranks, ``mapping.expert_tp``,
    a training layout: ``plan.served_experts.served_ep``), and any ep with disaggregated serving, whose prefill
    and decode groups are re-cut by tensor parallelism over the group's devices (``_group_project``), which
    leaves no replicas to share the experts over."""
    m = project.mapping
    if m.ep <= 1:
        return
    if served_ep(m) != m.ep:
        raise ServingSetupError(
            "mapping.ep",
            f"{m.ep}: does not divide the {counted(m.dp, 'data-parallel replica')} (it fits by folding the experts "
            "over the tensor ranks, mapping.expert_tp, which serving does not run); serving spreads the experts "
            "over data-parallel ranks: set mapping.dp to a multiple of ep, or ep 1",
        )
    if not disaggregate:
        return
    raise ServingSetupError(
        "mapping.ep",
        f"{m.ep}: --disaggregate re-cuts the devices into a prefill and a decode group of tp × pp each, and expert "
        f"parallelism spreads the experts over {m.ep} data-parallel ranks; serve with ep 1 (--set mapping.ep=1) "
        "or without --disaggregate",
    )


def build_instances(
    project: Project,
    max_tokens: int,
    disaggregate: tuple[int, int] | None,
) -> list[InstanceModel]:
    """The instances that serve ``project``: one model for its ``dp`` replicas, or a prefill and a decode
    group. With expert parallelism (``mapping.ep`` > 1) the model is planned on one ep group (dp = ep: the
    experts spread over its ranks, the all-to-alls on its links) and each of the ``dp`` ranks is a replica of
    its own: its own requests, batch and KV pages (data-parallel attention), its iterations priced with the MoE
    layers seeing ep × its tokens (``plan.served_experts``, every rank with the same batch)."""
    refuse_expert_parallel(project, disaggregate is not None)
    if disaggregate is None:
        m = project.mapping
        single = project.model_copy(update={"mapping": m.model_copy(update={"dp": m.ep})}) if m.dp > m.ep else project
        return [instance_model("serve", single, max_tokens, m.dp)]
    p, d = disaggregate
    total = project.mapping.devices
    if p + d != total:
        raise ServingSetupError("disaggregate", f"{p} + {d} devices ≠ the project's {total} (tp·pp·dp)")
    return [
        instance_model("prefill", _group_project(project, p, "prefill"), max_tokens, 1),
        instance_model("decode", _group_project(project, d, "decode"), max_tokens, 1),
    ]


class KVTransfer:
    """Seconds to move one prompt's KV cache from the prefill group to the decode group."""

    def __init__(self, project: Project, prefill: InstanceModel, decode: InstanceModel) -> None:
        hw: HardwareGraph = elaborate(project.hardware, devices_needed=project.mapping.devices)
        devices = len(hw.devices)
        p = prefill.plan.project.mapping
        d = decode.plan.project.mapping
        need = p.devices + d.devices
        if devices < need:
            raise ServingSetupError("disaggregate", f"{need} devices needed, the hardware has {devices}")
        order = [dev.index for dev in hw.devices]
        src_groups = stage_groups([hw.devices[i] for i in order[: p.devices]], p)
        dst_groups = stage_groups([hw.devices[i] for i in order[p.devices : need]], d)
        self.hw = hw
        self.pairs: list[list[tuple[int, int]]] = []  # per stage: (prefill device, decode device)
        for r in range(p.pp):
            a, b = src_groups[r][0], dst_groups[r][0]
            self.pairs.append(
                [(a[i % len(a)], b[i]) for i in range(len(b))]
                if len(b) >= len(a)
                else [(a[i], b[i % len(b)]) for i in range(len(a))]
            )
        self.dims = prefill.cost.dims
        self.layers = [int(n) for n in prefill.cost.attention_layers]
        self.elem = prefill.cost.kv_elem_bytes
        self._memo: dict[int, float] = {}

    def seconds(self, tokens: int) -> float:
        """The stages' sends run at once; each pair carries its share of its stage's cache."""
        hit = self._memo.get(tokens)
        if hit is None:
            hit = 0.0
            for pairs, layers in zip(self.pairs, self.layers, strict=True):
                stage_bytes = kv_cache_bytes(self.dims, layers, 1, 1, tokens, self.elem)
                hit = max(hit, point_to_point(self.hw, pairs, stage_bytes / len(pairs)).time(self.hw))
            self._memo[tokens] = hit
        return hit
