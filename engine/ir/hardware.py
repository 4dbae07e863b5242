"""Hardware IR: a recursive, composable component tree with parametric arrays (the MLDSE idea).

A component stands for ``rows × cols`` identical instances of itself, so a 4,096-tile wafer is one
``tile`` component with ``rows=64, cols=64`` — never 4,096 objects. A component's ``interconnect``
joins the instances of its children; its ``memories`` are either local to each instance (``attach``
empty) or ports on the edges of its child grid (e.g. DRAM ports on the west and east die edges).
Components that carry ``compute`` are the devices the engine schedules work on.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from enum import StrEnum
from typing import Annotated

from pydantic import Field, model_validator
from tilewright.engine.ir.common import (
    BytesPerSecond,
    Dollars,
    Fraction,
    PicojoulesPerBit,
    PicojoulesPerByte,
    PositiveBytes,
    QuietDefaultsModel,
    Seconds,
    SquareMillimetres,
    StrictModel,
    Watts,
)
from tilewright.engine.ir.compute import Compute as Compute  # re-exported: Compute lives in ir.compute
from tilewright.engine.ir.compute import EfficiencyCurve as EfficiencyCurve
from tilewright.engine.ir.compute import RuntimeGraphs as RuntimeGraphs
from tilewright.engine.ir.links import BoundaryLinks, CollectiveCosts, Framing

PositiveInt = Annotated[int, Field(ge=1)]
Name = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")]


class ComponentKind(StrEnum):
    system = "system"
    node = "node"
    wafer = "wafer"
    package = "package"
    chip = "chip"
    die = "die"
    tile = "tile"
    core = "core"
    switch = "switch"


class MemoryKind(StrEnum):
    """What technology a memory is, named as its datasheet names it (captions print it: "12 GiB GDDR").
    ``sram`` is on-chip; every other kind is DRAM-class and the engine treats them all alike — the kind
    changes labels, never numbers (bandwidth, latency, energy and efficiency are the memory's own fields).
    ``gddr``: graphics DRAM soldered beside the chip, as on Tenstorrent Wormhole and Blackhole (GDDR6)."""

    sram = "sram"
    hbm = "hbm"
    ddr = "ddr"
    gddr = "gddr"
    lpddr = "lpddr"
    hmc = "hmc"


class Edge(StrEnum):
    west = "west"
    east = "east"
    north = "north"
    south = "south"


class Interleave(StrEnum):
    """How a device's bytes are spread over the ports of a ported memory."""

    interleaved = "interleaved"  # pages round-robin over every port: each device sees all of them
    nearest = "nearest"  # each device's tensors sit behind its nearest port (bank-local placement)


Cell = tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]]


class PortPlacement(StrictModel):
    """Where ports sit inside the owner's child grid, beyond its edges: whole columns or rows (a chip's
    interior DRAM column, as on Tenstorrent Wormhole, column 5 of its 10-column grid) or single cells.
    Indices are 0-based in the child grid; each listed column or row carries ``ports_per_edge`` ports
    spread along it, each listed cell one port."""

    columns: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list)
    rows: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list)
    cells: list[Cell] = Field(default_factory=list, description="(row, column) of a port each")
    comment: str = ""

    @property
    def empty(self) -> bool:
        return not (self.columns or self.rows or self.cells)


class Memory(QuietDefaultsModel):
    """A memory level. ``attach`` empty: private to each instance of the owning component (which must
    compute or contain devices); otherwise ports on those edges of the owner's child grid, each port
    reached over the interconnect — so DRAM traffic of an SRAM-only tile crosses the NoC.

    ``efficiency`` is what well-placed readers achieve (each bank read by the core next to it). Tensors
    interleaved page by page over every bank and read by arbitrary cores achieve less — NoC paths to the
    banks collide (Tenstorrent's DRAM microbenchmarks: ~0.69 of peak for reads, ~0.5 for writes on
    Wormhole); ``efficiency_interleaved_read/write`` say how much (None: the same as ``efficiency``).

    ``stream_ramp_s`` is what a kernel that streams from this memory pays once beyond its bytes at the
    achievable bandwidth and the device's per-kernel floor (``Compute.fixed_op_s``): the first loads wait a
    full DRAM latency before the bandwidth ramps up, and the last wave's writes drain after the last loads —
    the intercept of a streaming kernel's time against its bytes, less a tiny kernel's launch to launch. A
    kernel too small to get past the ramp pays less of it (the bandwidth still rising: ``DeviceModel.stream_s``).
    It makes a kernel of a few MB reach less than the sustained (large-array) bandwidth; 0: not modelled."""

    _quiet = (
        "efficiency_interleaved_read", "efficiency_interleaved_write", "placement", "interleave",
        "host_link_bandwidth_bytes_per_s", "stream_ramp_s", "host_adam_params_per_s",
    )

    name: Name
    kind: MemoryKind
    capacity_bytes: PositiveBytes
    bandwidth_bytes_per_s: BytesPerSecond = Field(description="per port, bytes/s")
    latency_s: Seconds = 0.0
    energy_pj_per_byte: PicojoulesPerByte = 0.0
    efficiency: Fraction = Field(1.0, description="achievable fraction of the bandwidth")
    stream_ramp_s: Seconds = Field(
        0.0, description="time a memory-bound kernel streaming from this memory loses once against its bytes at "
        "the achievable bandwidth, beyond the per-kernel floor (DRAM latency ramp, last wave's drain; less for a "
        "kernel too small to get past it)",
    )
    efficiency_interleaved_read: Fraction | None = Field(
        None, description="achievable fraction for interleaved pages read by arbitrary cores"
    )
    efficiency_interleaved_write: Fraction | None = Field(
        None, description="achievable fraction for interleaved pages written by arbitrary cores"
    )
    attach: list[Edge] = Field(default_factory=list, description="edges carrying ports; empty = local")
    ports_per_edge: Annotated[int, Field(ge=1)] = Field(1, description="ports per listed edge, column or row")
    placement: PortPlacement | None = Field(
        None, description="ports at columns, rows or cells of the child grid (with or instead of edges)"
    )
    interleave: Interleave = Field(
        Interleave.interleaved,
        description="ported memories: a device's bytes spread over every port (runtimes' default), or each "
        "device served by its nearest port",
    )
    host_link_bandwidth_bytes_per_s: BytesPerSecond | None = Field(
        None,
        description="a memory of a component above the devices (host DDR): each device's own link to it "
        "(PCIe), per direction; the memory's bandwidth shared by the devices below it caps it too. Needed to "
        "hold state there (mapping.memory_levels)",
    )
    host_adam_params_per_s: float | None = Field(
        None, gt=0,
        description="a host memory: parameters per second the CPUs beside it update with a vectorised Adam "
        "(DeepSpeed's CPU-Adam, torch's fused AdamW) when the optimizer is offloaded there, for the whole host; "
        "the devices below it share it. None: bounded by the memory's bandwidth alone (plan.host_step)",
    )
    comment: str = ""

    @property
    def effective_bandwidth(self) -> float:
        return self.bandwidth_bytes_per_s * self.efficiency

    @property
    def ported(self) -> bool:
        """Reached through ports on the owner's child grid (edges, columns, rows, cells), not private to
        each instance of its owner."""
        return bool(self.attach) or (self.placement is not None and not self.placement.empty)

    def channel_efficiency(self, read: bool) -> float:
        """Achievable fraction of a port's bandwidth in one direction: interleaved pages read or written by
        arbitrary devices achieve ``efficiency_interleaved_*`` (when given), bank-local access ``efficiency``."""
        if self.ported and self.interleave is Interleave.interleaved:
            eff = self.efficiency_interleaved_read if read else self.efficiency_interleaved_write
            if eff is not None:
                return eff
        return self.efficiency


class Topology(StrEnum):
    mesh = "mesh"
    torus = "torus"
    ring = "ring"
    switch = "switch"
    fat_tree = "fat-tree"
    fully_connected = "fully-connected"
    dragonfly = "dragonfly"
    htree = "htree"
    edges = "edges"


class SwitchAttach(StrEnum):
    every_device = "every-device"
    one_per_child = "one-per-child"


GRID_TOPOLOGIES = (Topology.mesh, Topology.torus, Topology.ring)


class Interconnect(QuietDefaultsModel):
    """How the instances of a component's children are joined. Bandwidth is per link, per direction.

    Grids (mesh, torus, ring) may differ per axis — a Galaxy-style 4 × 8 mesh of chips has 3 Ethernet links
    between neighbours along one axis and 4 along the other — may wrap on some axes only, and may give the
    links between merged child grids their own figures (``boundary``). ``framing`` and ``collective`` hold
    what packets and collective operations cost on the fabric. All of these default to off, so a file that
    does not name them elaborates exactly as before (and is saved without them)."""

    _quiet = ("axis_bandwidth_bytes_per_s", "axis_links", "axis_wrap", "boundary", "framing", "collective")

    topology: Topology
    link_bandwidth_bytes_per_s: BytesPerSecond
    link_latency_s: Seconds = 0.0
    energy_pj_per_bit: PicojoulesPerBit = 0.0
    links: Annotated[int, Field(ge=1)] = Field(1, description="parallel links between each connected pair")
    efficiency: Fraction = Field(1.0, description="achievable fraction of link bandwidth for large messages")
    efficiency_curve: EfficiencyCurve | None = Field(
        None, description="achievable fraction versus message size in bytes (overrides efficiency)"
    )
    dims: list[Annotated[int, Field(ge=1)]] | None = Field(
        None, description="torus/mesh shape over the child instances (1–3 dims); default rows × cols"
    )
    attach: SwitchAttach = Field(
        SwitchAttach.every_device, description="switch/fat-tree: a link per device, or one per child"
    )
    oversubscription: Annotated[float, Field(ge=1)] = Field(1.0, description="fat-tree up-link taper")
    group_size: Annotated[int, Field(ge=1)] | None = Field(None, description="dragonfly: instances per group")
    global_link_bandwidth_bytes_per_s: BytesPerSecond | None = Field(
        None, description="dragonfly: bandwidth of the links between groups"
    )
    edge_list: list[tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]]] | None = Field(
        None, description="topology 'edges': pairs of child-instance indices (row-major), both directions"
    )
    axis_bandwidth_bytes_per_s: list[BytesPerSecond] | None = Field(
        None, description="grids: bandwidth per link per direction along each axis (rows axis first)"
    )
    axis_links: list[Annotated[int, Field(ge=1)]] | None = Field(
        None, description="grids: parallel links between neighbours along each axis (rows axis first)"
    )
    axis_wrap: list[bool] | None = Field(
        None, description="torus: which axes have wrap-around links (default all)"
    )
    boundary: BoundaryLinks | None = Field(
        None, description="grids: the links between neighbouring children when their grids are merged"
    )
    framing: Framing | None = Field(None, description="packet framing: scales every link's payload bandwidth")
    collective: CollectiveCosts | None = Field(
        None, description="fixed costs of a collective operation on this fabric (default: steps x hop latency)"
    )
    comment: str = ""

    @model_validator(mode="after")
    def _shape(self) -> Interconnect:
        if self.dims is not None and not 1 <= len(self.dims) <= 3:
            raise ValueError("dims: 1 to 3 dimensions")
        if self.topology is Topology.edges and not self.edge_list:
            raise ValueError("edge_list: required when topology is 'edges'")
        per_axis = {
            "axis_bandwidth_bytes_per_s": self.axis_bandwidth_bytes_per_s,
            "axis_links": self.axis_links,
            "axis_wrap": self.axis_wrap,
        }
        if isinstance(self.boundary, BoundaryLinks) and isinstance(self.boundary.links, list):
            per_axis["boundary.links"] = self.boundary.links
        given = {k: len(v) for k, v in per_axis.items() if v is not None}
        if (given or self.boundary is not None) and self.topology not in GRID_TOPOLOGIES:
            names = ", ".join([*given, *(["boundary"] if self.boundary is not None else [])])
            raise ValueError(f"{names}: only for mesh, torus or ring interconnects, not {self.topology.value}")
        if self.axis_wrap is not None and self.topology is not Topology.torus:
            raise ValueError("axis_wrap: only for a torus (a mesh has no wrap links, a ring always wraps)")
        expected = len(self.dims) if self.dims else (1 if self.topology is Topology.ring else None)
        for name, n in given.items():
            if expected is not None and n != expected:
                raise ValueError(f"{name}: {n} values for {expected} grid axes")
        if len(set(given.values())) > 1:
            raise ValueError(f"per-axis lists disagree on the number of axes: {given}")
        c = self.collective
        if c is not None and self.topology not in GRID_TOPOLOGIES and c.grid_fields():
            names = ", ".join(c.grid_fields())
            raise ValueError(f"collective.{names}: apply to mesh, torus or ring fabrics, not {self.topology.value}")
        if c is not None and c.protocols and self.topology in GRID_TOPOLOGIES:
            raise ValueError("collective.protocols: for switch and fat-tree fabrics; grids use fixed_s and the hops")
        if c is not None and c.protocols and len({p.name for p in c.protocols}) != len(c.protocols):
            raise ValueError("collective.protocols: names must be unique")
        if c is not None and c.reduce_sync_packets is not None and self.framing is None:
            raise ValueError("collective.reduce_sync_packets: needs framing.payload_bytes (the packet size)")
        return self

    def check_axes(self, n_axes: int) -> None:
        """Per-axis lists must have one value per axis of the grid this interconnect builds."""
        lists = {
            "axis_bandwidth_bytes_per_s": self.axis_bandwidth_bytes_per_s,
            "axis_links": self.axis_links,
            "axis_wrap": self.axis_wrap,
            "boundary.links": self.boundary.links if self.boundary and isinstance(self.boundary.links, list) else None,
        }
        for name, v in lists.items():
            if v is not None and len(v) != n_axes:
                raise ValueError(f"interconnect.{name}: {len(v)} values, but the grid has {n_axes} axes")

    def axis_bandwidth(self, axis: int) -> float:
        """Bandwidth per link per direction along ``axis`` (the interconnect's own when not per axis)."""
        v = self.axis_bandwidth_bytes_per_s
        return v[axis] if v is not None else self.link_bandwidth_bytes_per_s

    def axis_link_count(self, axis: int) -> int:
        return self.axis_links[axis] if self.axis_links is not None else self.links

    def wraps(self, n_axes: int) -> tuple[bool, ...]:
        """Which axes wrap around: every axis of a torus or ring unless ``axis_wrap`` says otherwise."""
        if self.topology is Topology.mesh:
            return (False,) * n_axes
        if self.axis_wrap is not None:
            return tuple(self.axis_wrap)
        return (True,) * n_axes

    @property
    def payload_efficiency(self) -> float:
        """Framing efficiency (1.0 without framing)."""
        return self.framing.efficiency() if self.framing is not None else 1.0

    def efficiency_at(self, message_bytes: float) -> float:
        if self.efficiency_curve is not None:
            return float(self.efficiency_curve.at(message_bytes)) * self.payload_efficiency
        return self.efficiency * self.payload_efficiency

    def large_message_efficiency(self) -> float:
        """What large transfers achieve: the efficiency (or the curve's largest-message point) × framing."""
        eff = self.efficiency_curve.points[-1][1] if self.efficiency_curve else self.efficiency
        return eff * self.payload_efficiency


class Component(StrictModel):
    """One level of the hierarchy, standing for ``rows × cols`` identical instances."""

    name: Name
    kind: ComponentKind
    rows: Annotated[int, Field(ge=1)] = 1
    cols: Annotated[int, Field(ge=1)] = 1
    growable: bool = Field(False, description="rows grow to fit the devices a run needs (e.g. DGX nodes)")
    compute: Compute | None = None
    memories: list[Memory] = Field(default_factory=list)
    interconnect: Interconnect | None = None
    children: list[Component] = Field(default_factory=list)
    area_mm2: SquareMillimetres | None = None
    power_w: Watts | None = None
    cost_usd: Dollars | None = None
    comment: str = ""

    @model_validator(mode="after")
    def _structure(self) -> Component:
        names = [c.name for c in self.children]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"children: duplicate names {sorted(dup)}")
        mem_names = [m.name for m in self.memories]
        if len(set(mem_names)) != len(mem_names):
            raise ValueError("memories: duplicate names")
        if self.children and self.instances_of_children() > 1 and self.interconnect is None:
            raise ValueError("interconnect: required to join more than one child instance")
        if self.compute is None and not self.children and self.kind is not ComponentKind.switch:
            raise ValueError("compute: a component without children must compute (or be a switch)")
        ic = self.interconnect
        if ic is not None and ic.dims is not None and math.prod(ic.dims) != self.instances_of_children():
            raise ValueError(
                f"interconnect.dims: {ic.dims} hold {math.prod(ic.dims)} instances, "
                f"children have {self.instances_of_children()}"
            )
        if ic is not None and ic.topology in GRID_TOPOLOGIES and self.children:
            ic.check_axes(len(self.grid_shape()))
        if ic is not None and ic.edge_list:
            n = self.instances_of_children()
            for a, b in ic.edge_list:
                if a >= n or b >= n or a == b:
                    raise ValueError(f"interconnect.edge_list: link ({a}, {b}) joins no existing pair of {n}")
        for m in self.memories:
            if m.ported and not self.children:
                where = "attach" if m.attach else "placement"
                raise ValueError(f"memories.{m.name}.{where}: ports need children to sit between")
        return self

    @property
    def count(self) -> int:
        return self.rows * self.cols

    def grid_shape(self) -> tuple[int, ...]:
        """Shape of the grid a mesh/torus/ring interconnect lays the child instances on: ``dims`` if given,
        a ring's one axis, the rows × cols of a single child component, else one line of all instances."""
        n = self.instances_of_children()
        ic = self.interconnect
        if ic is not None and ic.topology is Topology.ring:
            return (n,)
        if ic is not None and ic.dims:
            return tuple(ic.dims)
        if len(self.children) == 1:
            return (self.children[0].rows, self.children[0].cols)
        return (n,)

    def instances_of_children(self) -> int:
        return sum(c.count for c in self.children)

    def devices_per_instance(self) -> int:
        """Devices (computing leaves) inside one instance of this component."""
        own = 1 if self.compute is not None else 0
        return own + sum(c.count * c.devices_per_instance() for c in self.children)

    def device_count(self) -> int:
        return self.count * self.devices_per_instance()

    def walk(self, prefix: str = "") -> Iterator[tuple[str, Component]]:
        """Depth-first (path, component) pairs; paths join names with '/'."""
        path = f"{prefix}/{self.name}" if prefix else self.name
        yield path, self
        for child in self.children:
            yield from child.walk(path)

    def find(self, path: str) -> Component | None:
        for p, comp in self.walk():
            if p == path:
                return comp
        return None

    def device_template(self) -> Compute | None:
        """The first compute found depth-first: the device type of a homogeneous system."""
        for _, comp in self.walk():
            if comp.compute is not None:
                return comp.compute
        return None

    def all_memories(self) -> list[Memory]:
        return [m for _, comp in self.walk() for m in comp.memories]

    def total(self, attr: str) -> float:
        """Sum of area/power/cost over every instance (a parent's own figure excludes its children's)."""
        own = getattr(self, attr) or 0.0
        return self.count * (own + sum(c.total(attr) for c in self.children))
