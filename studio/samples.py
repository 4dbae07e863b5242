"""Projects built in code: the "New" project, and sample systems the tests and screenshots use while the
preset files are still being written (and that do not change when the presets are retuned).
"""

from __future__ import annotations

from tilewright.engine.ir.common import DType
from tilewright.engine.ir.hardware import (
    Component,
    ComponentKind,
    Compute,
    Edge,
    Interconnect,
    Memory,
    MemoryKind,
    SwitchAttach,
    Topology,
)
from tilewright.engine.ir.mapping import Mapping
from tilewright.engine.ir.project import Project
from tilewright.engine.ir.workload import GPTSpec, MLPSpec
from tilewright.studio.templates import build_component


def _gpt(name: str = "gpt-1.3b") -> GPTSpec:
    return GPTSpec(name=name, layers=24, hidden=2048, heads=16, seq_len=2048)


def new_project() -> Project:
    """An empty-looking but valid project: one chip and a tiny MLP, ready to be edited."""
    hardware = Component(name="system", kind=ComponentKind.system, children=[build_component("chip")])
    return Project(name="untitled", hardware=hardware, workload=MLPSpec(name="mlp", layer_sizes=[1024, 1024]))


def dgx_project() -> Project:
    """Two DGX-A100-like nodes: 8 GPUs on NVSwitch per node, nodes on an InfiniBand switch."""
    gpu = Component(
        name="gpu",
        kind=ComponentKind.chip,
        cols=8,
        compute=Compute(peak_flops={DType.bf16: 312e12, DType.tf32: 156e12, DType.fp32: 19.5e12}),
        memories=[
            Memory(name="hbm", kind=MemoryKind.hbm, capacity_bytes=80e9, bandwidth_bytes_per_s=2.039e12)
        ],
        power_w=400.0,
    )
    node = Component(
        name="node",
        kind=ComponentKind.node,
        rows=2,
        interconnect=Interconnect(
            topology=Topology.switch, link_bandwidth_bytes_per_s=300e9, link_latency_s=1e-6,
            comment="NVSwitch (NVLink 3)",
        ),
        children=[gpu],
    )
    cluster = Component(
        name="cluster",
        kind=ComponentKind.system,
        interconnect=Interconnect(
            topology=Topology.switch, link_bandwidth_bytes_per_s=25e9, link_latency_s=5e-6,
            attach=SwitchAttach.every_device, comment="InfiniBand HDR, one HCA per GPU",
        ),
        children=[node],
    )
    return Project(
        name="gpt-1.3b on 2 × DGX", hardware=cluster, workload=_gpt(),
        mapping=Mapping(tp=8, dp=2, global_batch=16, micro_batch=1),
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


def wafer_project() -> Project:
    """A wafer of 2 × 2 dies on a die-to-die mesh, each die 4 × 4 tiles on a NoC, DRAM on two edges."""
    die = Component(
        name="die",
        kind=ComponentKind.die,
        rows=2,
        cols=2,
        interconnect=Interconnect(topology=Topology.mesh, link_bandwidth_bytes_per_s=256e9, link_latency_s=1e-9),
        children=[_tile(4, 4)],
    )
    wafer = Component(
        name="wafer",
        kind=ComponentKind.wafer,
        interconnect=Interconnect(topology=Topology.mesh, link_bandwidth_bytes_per_s=1e12, link_latency_s=10e-9),
        memories=[
            Memory(
                name="dram", kind=MemoryKind.ddr, capacity_bytes=64e9, bandwidth_bytes_per_s=100e9,
                attach=[Edge.west, Edge.east], ports_per_edge=2,
            )
        ],
        children=[die],
    )
    return Project(name="wafer 2 × 2 dies", hardware=wafer, workload=_gpt(), mapping=Mapping(tp=4, pp=4))


def big_wafer_project(n: int = 64) -> Project:
    """One ``n × n`` tile array on a mesh: the level-of-detail and smooth-zoom case."""
    wafer = Component(
        name="wafer",
        kind=ComponentKind.wafer,
        interconnect=Interconnect(topology=Topology.mesh, link_bandwidth_bytes_per_s=512e9, link_latency_s=2e-9),
        children=[_tile(n, n)],
    )
    return Project(name=f"wafer {n} × {n}", hardware=wafer, workload=_gpt(), mapping=Mapping(tp=16, pp=16))
