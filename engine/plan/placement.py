"""Placement: which devices form each pipeline stage, tensor group and data-parallel replica.

Devices are first put in *placement order* by the strategy (row-major; snake — boustrophedon over grid
coordinates so consecutive stages stay neighbours; block — compact rectangles of one stage each), then
global ranks are laid over that order with the mapping's rank order (Megatron: tp fastest, then dp,
then pp), or taken from explicit stage placements.
"""

from __future__ import annotations

from tilewright.engine.hardware.model import Device
from tilewright.engine.ir.mapping import Mapping, PlacementStrategy


def _grid_shape(devices: list[Device]) -> tuple[int, int] | None:
    coords = [d.coord for d in devices]
    if any(c is None or len(c) != 2 for c in coords):
        return None
    rows = 1 + max(c[0] for c in coords)  # type: ignore[index]
    cols = 1 + max(c[1] for c in coords)  # type: ignore[index]
    return (rows, cols) if rows * cols == len(devices) else None


def _block_order(devices: list[Device], rows: int, cols: int, group: int) -> list[Device] | None:
    """Rectangles of ``group`` devices (closest to square that tile the grid), row-major inside each."""
    best: tuple[int, int] | None = None
    for h in range(1, rows + 1):
        if group % h or rows % h:
            continue
        w = group // h
        if cols % w:
            continue
        if best is None or abs(h - w) < abs(best[0] - best[1]):
            best = (h, w)
    if best is None:
        return None
    h, w = best
    by_coord = {d.coord: d for d in devices}
    out: list[Device] = []
    for br in range(0, rows, h):
        for bc in range(0, cols, w):
            out += [by_coord[(r, c)] for r in range(br, br + h) for c in range(bc, bc + w)]
    return out


def placement_order(devices: list[Device], strategy: PlacementStrategy, group: int) -> list[Device]:
    shape = _grid_shape(devices)
    if shape is None or strategy is PlacementStrategy.row_major:
        return list(devices)
    rows, cols = shape
    if strategy is PlacementStrategy.block:
        blocks = _block_order(devices, rows, cols, group)
        if blocks is not None:
            return blocks
    return sorted(devices, key=lambda d: (d.coord[0], d.coord[1] if d.coord[0] % 2 == 0 else -d.coord[1]))  # type: ignore[index]


def stage_groups(devices: list[Device], mapping: Mapping) -> list[list[list[int]]]:
    """``groups[stage][replica]`` = device indices of that stage's tensor group in that dp replica."""
    tp, pp, dp = mapping.tp, mapping.pp, mapping.dp
    if mapping.stages and all(s.devices for s in mapping.stages):
        ordered = sorted(mapping.stages, key=lambda s: s.stage)
        return [[st.devices[j * tp : (j + 1) * tp] for j in range(dp)] for st in ordered]
    order = placement_order(devices, mapping.placement, tp * dp)
    needed = tp * pp * dp
    if len(order) < needed:
        raise ValueError(f"{needed} devices needed, {len(order)} available")
    ranks = [d.index for d in order[:needed]]
    groups: list[list[list[int]]] = []
    for r in range(pp):
        replicas = []
        for j in range(dp):
            if mapping.rank_order == "tp-dp-pp":
                base = tp * (j + dp * r)
            else:
                base = tp * (r + pp * j)
            replicas.append(ranks[base : base + tp])
        groups.append(replicas)
    return groups


def virtual_stage_layers(
    blocks: list[int], others: list[int], parts: int, layout: list[int] | None = None
) -> list[list[int]]:
    """Layers of each of ``parts`` virtual stages: the repeated blocks in order, ``layout[k]`` of them on
    virtual stage k (``mapping.pipeline_layers``, Megatron-Core's pipeline layout) or an even split (the
    earlier stages one more); the other layers (embedding, head) to the first and the last virtual stage."""
    if layout is None:
        per_virtual = split_layers(blocks, parts)
    else:
        starts = [sum(layout[:k]) for k in range(len(layout))]
        per_virtual = [blocks[s : s + n] for s, n in zip(starts, layout, strict=True)]
    for idx in others:  # embedding to the first virtual stage, head to the last
        (per_virtual[0] if idx < blocks[0] else per_virtual[-1]).append(idx)
    return [sorted(lst) for lst in per_virtual]


def split_layers(blocks: list[int], parts: int) -> list[list[int]]:
    """Consecutive blocks per virtual stage; when uneven, the earlier stages take one more."""
    base, extra = divmod(len(blocks), parts)
    out, start = [], 0
    for i in range(parts):
        size = base + (1 if i < extra else 0)
        out.append(blocks[start : start + size])
        start += size
    return out
