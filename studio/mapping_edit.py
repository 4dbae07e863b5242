"""Pure edits of the mapping: Auto-map (degrees and a strategy) and placing layers on devices by hand.

Each returns a new, validated ``Mapping`` or raises ``EditRefused`` with a reason an architect can act
on; the undo commands in ``studio.mapping_commands`` are thin wrappers, so these rules are tested
without Qt.

Placing layers [first, last) on a device group makes those layers one pipeline stage (or several, when
the group holds several stage-sized groups) on exactly those devices. Other stages keep their layers
outside the range and their devices, unless they lose them to the new stage (or a stage was cut in two
and both halves want the same devices): those stages move to free devices, taken in the placement
strategy's order. ``pp`` becomes the number of stages; tp and dp are never changed behind the user's back.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from tilewright.engine.ir.mapping import Mapping, PlacementStrategy, Schedule
from tilewright.engine.ir.project import Project
from tilewright.engine.plan.placement import placement_order
from tilewright.studio.mapping import LayerRange, StageLayout, format_ranges
from tilewright.studio.tree_edit import EditRefused, friendly

AUTO_FIELDS = (
    "tp", "pp", "dp", "ep", "expert_tp", "cp", "zero", "fsdp", "micro_batch", "global_batch", "placement",
)
# the engine's cross-part checks an edit of them must pass
CHECKED_FIELDS = ("mapping.ep", "mapping.expert_tp", "mapping.cp")


def _validated(data: dict[str, Any]) -> Mapping:
    try:
        return Mapping.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        text = friendly(str(err.get("msg", "invalid")))
        raise EditRefused(f"{loc}: {text}" if loc else text) from None


def auto_mapping(mapping: Mapping, **degrees: Any) -> Mapping:
    """``mapping`` with new degrees and strategy, explicit stage placements cleared (the strategy
    places every stage again)."""
    unknown = set(degrees) - set(AUTO_FIELDS)
    if unknown:
        raise EditRefused(f"not a mapping degree: {', '.join(sorted(unknown))}")
    data = mapping.model_dump(mode="json")
    data.update({k: (PlacementStrategy(v).value if k == "placement" else v) for k, v in degrees.items()})
    if any(k in degrees and degrees[k] != getattr(mapping, k) for k in ("pp", "interleave")):
        data["pipeline_layers"] = None  # a layout is for one pp × interleave (``mapping.pipeline_layers``)
    if data.get("fsdp") and "zero" not in degrees:
        data["zero"] = 3  # FSDP shards like ZeRO stage 3 (the engine refuses FSDP with stage 1 or 2)
    data["stages"] = []
    return _validated(data)


def parallel_problems(project: Project) -> list[str]:
    """The engine's own verdict on ``project``'s expert and context parallelism (``engine.plan.checks``):
    e.g. ep must divide dp and the routed experts, cp the sequence. Empty when both degrees are 1 (the
    checks build the workload graph; a project without ep or cp need not pay for it here)."""
    m = project.mapping
    if m.ep == 1 and m.cp == 1 and m.expert_tp is None:
        return []
    from tilewright.engine.plan.checks import check_project

    try:
        problems = check_project(project)
    except (ValueError, TypeError, KeyError):  # a workload that does not build: the status bar says why
        return []
    return [str(p) for p in problems if p.path in CHECKED_FIELDS]


def checked_auto_mapping(project: Project, **degrees: Any) -> Mapping:
    """``auto_mapping`` of ``project``'s mapping, refused (``EditRefused``, the engine's message) when it
    brings a problem of expert or context parallelism the project did not have already."""
    mapping = auto_mapping(project.mapping, **degrees)
    new = new_parallel_problems(project, mapping)
    if new:
        raise EditRefused("; ".join(new))
    return mapping


def new_parallel_problems(project: Project, mapping: Mapping) -> list[str]:
    """Problems of expert or context parallelism ``mapping`` brings that ``project`` has not got yet."""
    after = parallel_problems(project.model_copy(update={"mapping": mapping}))
    return [p for p in after if p not in parallel_problems(project)] if after else []


OPTION_FIELDS = (  # set one at a time
    "recompute", "recompute_layers", "overlap_grad_reduce", "overlap_tp_comm", "ep_dispatcher", "overlap_ep_comm",
    "fused_cross_entropy", "pipeline_layers", "recompute_modules", "cuda_graph_scope", "fp8_scaling",
    "delay_wgrad_compute", "fp8_bf16_layers", "grad_reduce_in_fp32", "optimizer_moments", "optimizer_master",
    "overlap_param_gather_with_optimizer_step", "tp_overlap_reduce_scatter", "expert_imbalance", "memory_levels",
    "offload_layers", "overlap_dgrad_comm", "pipeline_p2p", "log_params_norm", "log_num_zeros_in_grad",
    "timing_log_level", "check_for_nan_in_loss_and_grad", "host_framework", "fsdp_copies",
)
# options held inside a part of the mapping: option → (part, field), the engine's problems at mapping.part.field
NESTED_OPTIONS = {"fp8_scaling": ("formats", "fp8_scaling")}
# the fp8 layers kept in bf16, one option of two fields: [first, last] ↔ formats.bf16_first/last_layers
EDGE_FIELDS = ("bf16_first_layers", "bf16_last_layers")
# where the engine's problems of an option are: the fp8 options answer for all of mapping.formats, since
# each constrains the other (Megatron-Core refuses bf16 edge layers under delayed scaling)
PROBLEM_PATHS = {"fp8_scaling": "formats", "fp8_bf16_layers": "formats"}


def option_path(field: str) -> str:
    """Where the option's problems are under ``mapping`` ("recompute", "formats")."""
    return PROBLEM_PATHS.get(field, field)


def option_value(mapping: Mapping, field: str) -> Any:
    """The option's value as the mapping holds it (the nested ones read from their part; the bf16 edge layers
    as [first, last], None when neither is set)."""
    if field == "fp8_bf16_layers":
        pair = [getattr(mapping.formats, name) for name in EDGE_FIELDS]
        return pair if any(pair) else None
    if field in NESTED_OPTIONS:
        part, name = NESTED_OPTIONS[field]
        return getattr(getattr(mapping, part), name)
    return getattr(mapping, field)


def _problems_at(project: Project, field: str) -> list[str]:
    """The engine's problems (``engine.plan.checks``) at ``mapping.<field>``; a workload that does not build
    gives none here (the status bar says why)."""
    from tilewright.engine.plan.checks import check_project

    try:
        problems = check_project(project)
    except (ValueError, TypeError, KeyError):
        return []
    path = f"mapping.{option_path(field)}"
    return [str(p) for p in problems if p.path == path or p.path.startswith(f"{path}.")]


def checked_option(project: Project, field: str, value: Any) -> Mapping:
    """``project``'s mapping with one option set: a field no degree or placement depends on, so it applies
    at once rather than through Auto-map. Refused (``EditRefused``) with the model's own message, or the
    engine's when the option brings a problem at ``mapping.<field>`` the project had not (a HyPar partition
    runs without recomputation, say): the editor shows the very words a run would fail with."""
    if field not in OPTION_FIELDS:
        raise EditRefused(f"not a mapping option: {field}")
    data = project.mapping.model_dump(mode="json")
    if field == "fp8_scaling" and value == "tensor":  # the default recipe stays unset: the file saves as before
        value = None
    if field == "fp8_bf16_layers":
        first, last = value or (0, 0)
        data["formats"] = dict(data.get("formats") or {}) | dict(zip(EDGE_FIELDS, (first, last), strict=True))
    elif field in NESTED_OPTIONS:
        part, name = NESTED_OPTIONS[field]
        data[part] = dict(data.get(part) or {}) | {name: value}
    else:
        data[field] = value
    if field == "recompute" and value != "full":  # a count of whole layers to re-run means nothing then
        data["recompute_layers"] = None
    if field == "recompute" and value != "selective":  # nor the modules selective recomputation re-runs
        data["recompute_modules"] = None
    if field == "overlap_ep_comm" and not value:  # the delayed weight gradients hide the overlapped all-to-all
        data["delay_wgrad_compute"] = False
    mapping = _validated(data)
    after = _problems_at(project.model_copy(update={"mapping": mapping}), field)
    new = [p for p in after if p not in _problems_at(project, field)] if after else []
    if new:
        raise EditRefused("; ".join(new))
    return mapping


def group_around(layout: StageLayout, device: int, mapping: Mapping) -> list[int]:
    """The stage-sized group (tp × cp × dp devices, in the strategy's order) holding ``device``: a drop on
    one tile of a stage that needs sixteen takes the sixteen the strategy would put together."""
    size = mapping.stage_devices
    order = [d.index for d in placement_order(layout.devices, mapping.placement, size)]
    pos = order.index(device)
    start = pos - pos % size
    group = order[start : start + size]
    if len(group) < size:
        raise EditRefused(f"a stage needs {mapping.stage_split_text} = {size} devices; only {len(group)} remain "
                          "from here")
    return group


def _free_groups(layout: StageLayout, mapping: Mapping, taken: set[int]) -> list[list[int]]:
    size = mapping.stage_devices
    free = [d.index for d in placement_order(layout.devices, mapping.placement, size) if d.index not in taken]
    return [free[i : i + size] for i in range(0, len(free) - size + 1, size)]


def place_layers(mapping: Mapping, layout: StageLayout, layers: LayerRange, devices: list[int]) -> Mapping:
    """``mapping`` with ``layers`` placed on ``devices`` as explicit stages (see the module notes)."""
    first, last = layers
    n_layers = layout.layers
    if layout.problem:
        raise EditRefused(f"the mapping has no layout yet: {layout.problem}")
    if not 0 <= first < last <= n_layers:
        raise EditRefused(f"layers {first}–{last - 1}: the model has layers 0–{n_layers - 1}")
    size = mapping.stage_devices
    devices = list(dict.fromkeys(devices))
    if not devices or len(devices) % size:
        raise EditRefused(
            f"a stage needs {mapping.stage_split_text} = {size} devices; the drop target has {len(devices)} "
            "(drop onto a tile or chip to take the strategy's group around it, or select a group of that size)"
        )
    current = layout.contiguous_stages()
    if not current:  # interleaved: start from one chunk per stage
        raise EditRefused("interleaved stages hold several layer ranges: Auto-map with interleave 1 first")
    parts = min(len(devices) // size, last - first)
    new_stages: list[tuple[LayerRange, list[int] | None]] = []
    base, extra = divmod(last - first, parts)
    start = first
    for j in range(parts):
        end = start + base + (1 if j < extra else 0)
        new_stages.append(((start, end), devices[j * size : (j + 1) * size]))
        start = end
    placed = {d for _, devs in new_stages for d in devs or []}
    kept: list[tuple[LayerRange, list[int] | None]] = []
    held: set[int] = set()
    for (a, b), devs in current:
        for piece in ((a, min(b, first)), (max(a, last), b)):
            if piece[0] >= piece[1]:
                continue
            clash = bool(placed & set(devs)) or bool(held & set(devs))
            kept.append((piece, None if clash else devs))
            if not clash:
                held |= set(devs)
    free = iter(_free_groups(layout, mapping, placed | held))
    stages = []
    for (a, b), devs in sorted(kept + new_stages, key=lambda s: s[0][0]):
        if devs is None:
            devs = next(free, None)
            if devs is None:
                raise EditRefused(
                    f"no free group of {size} devices is left for {format_ranges([(a, b)])}: "
                    "place fewer stages, or add hardware"
                )
        stages.append({"stage": len(stages), "layers": [a, b], "devices": devs})
    data = mapping.model_dump(mode="json")
    data.update(stages=stages, pp=len(stages), interleave=1, pipeline_layers=None)
    if mapping.schedule is Schedule.interleaved:
        data["schedule"] = Schedule.one_f_one_b.value
    return _validated(data)
