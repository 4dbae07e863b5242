"""A system's network dimensions: the axes along which tp, pp and dp can be laid out.

DFModel (Ko et al., "DFModel: Design Space Optimization of Large-Scale Systems Exploiting Dataflow
Mappings", 2024, §4) maps each parallelism onto the dimensions of the network: the axes of a torus, the
two tiers of a DGX cluster (NVSwitch inside a node, InfiniBand across), the two tiers of a dragonfly
(inside a group, across groups). This module reads them off the hardware tree, fastest-varying device
index first — the order in which elaboration numbers devices (children contiguous, grids row-major) —
so a device's index is a mixed-radix number over the dimensions and any per-dimension layout can be
written back as explicit device lists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilewright.engine.errors import InputError, Problem
from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.hardware import Component, Topology

GRID = (Topology.mesh, Topology.torus, Topology.ring)


@dataclass(frozen=True)
class Dim:
    name: str
    size: int
    bandwidth: float  # bytes/s a member sends along this dimension (one ring direction)
    hop_latency: float  # seconds per ring step


def _own_sizes(comp: Component, child: Component) -> list[int]:
    """Sizes of the dimensions ``comp``'s interconnect adds, fastest first."""
    ic = comp.interconnect
    n = child.count
    if ic is None or n == 1:
        return [n] if n > 1 else []
    if ic.topology in GRID:
        dims = ic.dims or ([n] if ic.topology is Topology.ring else [child.rows, child.cols])
        return [d for d in reversed(dims) if d > 1]
    if ic.topology is Topology.dragonfly:
        g = ic.group_size or max(1, round(math.sqrt(n)))
        if n % g:
            return [n]
        return [s for s in (g, n // g) if s > 1]
    return [n]


def network_dims(root: Component, hw: HardwareGraph) -> list[Dim]:
    """Dimensions of ``root`` (already grown to the devices the run needs), fastest first."""
    out: list[Dim] = []

    def walk(comp: Component, path: str) -> None:
        computing = [c for c in comp.children if c.device_count() > 0]
        if comp.compute is not None and comp.children:
            raise InputError(path, Problem("", "a device with children cannot be laid out by network dimension"))
        if not computing:
            return
        if len(computing) > 1:
            raise InputError(path, Problem("children", "multi-level mapping needs one kind of device per level"))
        child = computing[0]
        walk(child, f"{path}/{child.name}")
        sizes = _own_sizes(comp, child)
        bw, lat = _link(comp)
        ic = comp.interconnect
        axes = _grid_axes(comp) if ic is not None and ic.topology in GRID else None
        for i, size in enumerate(sizes):
            tier = "" if len(sizes) == 1 else f".{i}"
            if ic is not None and ic.topology is Topology.dragonfly and i == 1 and ic.global_link_bandwidth_bytes_per_s:
                out.append(Dim(f"{path}{tier}", size, ic.global_link_bandwidth_bytes_per_s * ic.efficiency, lat))
            elif axes is not None and len(axes) == len(sizes):
                out.append(Dim(f"{path}{tier}", size, _link(comp, axes[i])[0], lat))
            else:
                out.append(Dim(f"{path}{tier}", size, bw, lat))

    walk(root, root.name)
    if math.prod(d.size for d in out) != len(hw.devices):
        raise InputError(root.name, Problem("", "its devices do not form a product of network dimensions"))
    return out


def _grid_axes(comp: Component) -> list[int]:
    """The grid axes behind ``_own_sizes``' dimensions (fastest first, axes of size 1 dropped)."""
    dims = comp.grid_shape()
    return [a for a in reversed(range(len(dims))) if dims[a] > 1]


def _link(comp: Component, axis: int | None = None) -> tuple[float, float]:
    """(bandwidth, latency per ring step) of a link of ``comp``'s interconnect, as elaboration makes it:
    link bandwidth × parallel links × efficiency × framing (a fat tree's up-links ÷ oversubscription);
    on a grid, ``axis`` picks that axis's bandwidth and links."""
    ic = comp.interconnect
    if ic is None:
        return float("inf"), 0.0
    if axis is None:
        bw = ic.link_bandwidth_bytes_per_s * ic.links * ic.large_message_efficiency()
    else:
        bw = ic.axis_bandwidth(axis) * ic.axis_link_count(axis) * ic.large_message_efficiency()
    if ic.topology is Topology.fat_tree:
        bw /= ic.oversubscription
    steps = 2 if ic.topology in (Topology.switch, Topology.fat_tree) else 1  # in and out of the switch
    return bw, steps * ic.link_latency_s


def coordinates(index: int, dims: list[Dim]) -> list[int]:
    out = []
    for d in dims:
        out.append(index % d.size)
        index //= d.size
    return out


def device_index(coord: list[int], dims: list[Dim]) -> int:
    index, stride = 0, 1
    for c, d in zip(coord, dims, strict=True):
        index += c * stride
        stride *= d.size
    return index
