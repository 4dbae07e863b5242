"""Component templates offered by the library palette.

Each template is a small, valid building block with plausible public figures, so dropping one onto a
level gives something the engine can simulate straight away; the user then edits the numbers. Memories
are templates too (HBM), added to a component rather than under it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tilewright.engine.ir.common import DType
from tilewright.engine.ir.hardware import (
    Component,
    ComponentKind,
    Compute,
    Interconnect,
    Memory,
    MemoryKind,
    Topology,
)


@dataclass(frozen=True)
class Template:
    key: str
    label: str
    icon: str
    target: Literal["child", "memory"]
    description: str


TEMPLATES: list[Template] = [
    Template("node", "Node", "node", "child", "a server: 8 chips on a switch"),
    Template("wafer", "Wafer", "wafer", "child", "a wafer: 8 × 8 tiles on a mesh"),
    Template("chip", "Chip", "chip", "child", "one accelerator chip with HBM"),
    Template("die", "Die", "die", "child", "a die: 4 × 4 tiles on a mesh"),
    Template("tile-array", "Tile array", "tile", "child", "8 × 8 compute tiles with SRAM"),
    Template("hbm", "HBM", "memory", "memory", "an HBM stack added to the selected component"),
    Template("switch", "Switch", "switch", "child", "a network switch (no compute)"),
]


def _chip(name: str = "chip") -> Component:
    return Component(
        name=name,
        kind=ComponentKind.chip,
        compute=Compute(peak_flops={DType.bf16: 312e12, DType.tf32: 156e12, DType.fp32: 19.5e12}),
        memories=[Memory(name="hbm", kind=MemoryKind.hbm, capacity_bytes=80e9, bandwidth_bytes_per_s=2.0e12)],
        power_w=400.0,
    )


def _tile(rows: int, cols: int) -> Component:
    return Component(
        name="tile",
        kind=ComponentKind.tile,
        rows=rows,
        cols=cols,
        compute=Compute(peak_flops={DType.bf16: 4e12, DType.fp32: 1e12}),
        memories=[Memory(name="sram", kind=MemoryKind.sram, capacity_bytes=1.5e6, bandwidth_bytes_per_s=1e12)],
    )


def _mesh(bandwidth: float, latency: float) -> Interconnect:
    return Interconnect(topology=Topology.mesh, link_bandwidth_bytes_per_s=bandwidth, link_latency_s=latency)


def hbm_memory() -> Memory:
    return Memory(name="hbm", kind=MemoryKind.hbm, capacity_bytes=16e9, bandwidth_bytes_per_s=819e9)


def build_component(key: str) -> Component:
    """A fresh component for template ``key`` (a new object each time: models are never shared)."""
    if key == "chip":
        return _chip()
    if key == "node":
        return Component(
            name="node",
            kind=ComponentKind.node,
            interconnect=Interconnect(
                topology=Topology.switch, link_bandwidth_bytes_per_s=300e9, link_latency_s=1e-6
            ),
            children=[_chip("gpu").model_copy(update={"cols": 8})],
        )
    if key == "wafer":
        return Component(
            name="wafer", kind=ComponentKind.wafer, interconnect=_mesh(512e9, 2e-9), children=[_tile(8, 8)]
        )
    if key == "die":
        return Component(
            name="die", kind=ComponentKind.die, interconnect=_mesh(256e9, 1e-9), children=[_tile(4, 4)]
        )
    if key == "tile-array":
        return _tile(8, 8)
    if key == "switch":
        return Component(name="switch", kind=ComponentKind.switch)
    raise KeyError(key)


def template(key: str) -> Template:
    for t in TEMPLATES:
        if t.key == key:
            return t
    raise KeyError(key)
