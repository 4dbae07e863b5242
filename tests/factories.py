"""Small projects built in code, so tests do not depend on the presets they check."""

from __future__ import annotations

from tilewright.engine.ir import (
    Component,
    Compute,
    EfficiencyCurve,
    GPTSpec,
    Interconnect,
    Mapping,
    Memory,
    Project,
    RunSettings,
)

GB = 1e9


def gpu(name: str = "gpu", cols: int = 8) -> Component:
    return Component(
        name=name,
        kind="chip",
        cols=cols,
        compute=Compute(
            peak_flops={"bf16": 312e12, "fp32": 19.5e12},
            efficiency=EfficiencyCurve(points=[(1e9, 0.3), (1e12, 0.8)]),
        ),
        memories=[Memory(name="hbm", kind="hbm", capacity_bytes=80 * GB, bandwidth_bytes_per_s=2000 * GB)],
        power_w=400,
        area_mm2=826,
    )


def cluster(nodes: int = 2, growable: bool = False) -> Component:
    node = Component(
        name="node",
        kind="node",
        rows=nodes,
        children=[gpu()],
        interconnect=Interconnect(topology="switch", link_bandwidth_bytes_per_s=300 * GB),
    )
    return Component(
        name="cluster",
        kind="system",
        growable=growable,
        children=[node],
        interconnect=Interconnect(topology="fat-tree", link_bandwidth_bytes_per_s=25 * GB),
    )


def wafer(dies: tuple[int, int] = (2, 2), tiles: tuple[int, int] = (4, 4)) -> Component:
    tile = Component(
        name="tile",
        kind="tile",
        rows=tiles[0],
        cols=tiles[1],
        compute=Compute(peak_flops={"fp16": 16e12}),
        memories=[Memory(name="sram", kind="sram", capacity_bytes=3e6, bandwidth_bytes_per_s=4000 * GB)],
    )
    die = Component(
        name="die",
        kind="die",
        rows=dies[0],
        cols=dies[1],
        children=[tile],
        interconnect=Interconnect(topology="mesh", link_bandwidth_bytes_per_s=1024 * GB),
        memories=[
            Memory(
                name="dram",
                kind="ddr",
                capacity_bytes=16 * GB,
                bandwidth_bytes_per_s=256 * GB,
                attach=["west", "east"],
            )
        ],
    )
    return Component(
        name="wafer",
        kind="wafer",
        children=[die],
        interconnect=Interconnect(topology="mesh", link_bandwidth_bytes_per_s=256 * GB),
    )


def small_gpt() -> GPTSpec:
    return GPTSpec(name="gpt-small", layers=4, hidden=256, heads=8, seq_len=128, vocab=1024)


def small_project(**mapping: int) -> Project:
    m = {"tp": 2, "pp": 2, "dp": 4, "global_batch": 16, "micro_batch": 1} | mapping
    return Project(
        name="test",
        hardware=cluster(),
        workload=small_gpt(),
        mapping=Mapping(**m),
        run=RunSettings(),
    )


def torus(dims: list[int]) -> Component:
    """A torus of prod(dims) 100 TFLOP/s chips (32 GB HBM at 1 TB/s each), 50 GB/s links: the multi-level
    mapper's network dimensions in their simplest form."""
    n = 1
    for d in dims:
        n *= d
    chip = Component(name="chip", kind="chip", cols=n, compute=Compute(peak_flops={"bf16": 100e12}),
                     memories=[Memory(name="hbm", kind="hbm", capacity_bytes=32 * GB, bandwidth_bytes_per_s=1000 * GB)])
    return Component(name="torus", kind="system", children=[chip],
                     interconnect=Interconnect(topology="torus", dims=dims, link_bandwidth_bytes_per_s=50 * GB))
