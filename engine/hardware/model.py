"""The plain records an elaborated system is made of: devices, directed links and memory ports.

They are frozen dataclasses, not pydantic models, because a wafer has tens of thousands of links and
elaboration must stay well under a second; they are produced once and never validated again.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.engine.ir.hardware import Compute, Edge, Memory

#: Link kinds. "noc": on-chip/on-package/on-wafer grids and graphs; "network": the same between boxes
#: (systems, nodes); "switch": a link to or from a switch; "memory": a memory channel or its attach wires.
LINK_KINDS = ("noc", "network", "switch", "memory")

#: Node types stored as the ``type`` attribute of every graph node.
NODE_TYPES = ("device", "switch", "router", "memory", "memctrl")


@dataclass(frozen=True, slots=True)
class Device:
    """One computing instance. ``coord`` is its position in the widest grid domain that holds it
    (global coordinates across a mesh of meshes), or None when it sits behind a switch or a graph."""

    index: int
    node: str
    path: str
    compute: Compute
    memories: tuple[Memory, ...]
    coord: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class Link:
    """One direction of a physical connection.

    ``bandwidth`` is what large transfers achieve (link bandwidth × parallel links × efficiency);
    ``peak_bandwidth`` is the same without the efficiency, so a message-size curve can be applied to it
    (see ``HardwareGraph.link_bandwidth``); ``lanes`` is how many physical links that bandwidth spans (a
    reduce-scatter's neighbour handshakes run per physical link). ``level`` is the path of the component
    whose interconnect or memory made the link, e.g. ``palm-wafer/die`` for a NoC link and ``palm-wafer``
    for a die-to-die one.
    """

    id: int
    src: str
    dst: str
    bandwidth: float
    latency_s: float
    energy_pj_per_bit: float
    level: str
    kind: str
    peak_bandwidth: float
    lanes: float = 1.0  # physical links this one stands for (parallel links; a share of one on a boundary)


@dataclass(frozen=True, slots=True)
class MemoryPort:
    """Where a memory can be reached. Local memories have one port per owning instance, joined to it by
    a channel link pair. Edge memories have ``ports_per_edge`` ports per listed edge; each port is a
    memory node behind a controller node (``ctrl``), the controller wired to the devices of its edge
    segment (``attached``), so that every user of the port shares the one channel link pair and the
    port's bandwidth is never exceeded, whichever tile reads it."""

    index: int
    node: str
    memory: Memory
    owner: str
    edge: Edge | None
    attached: tuple[str, ...]
    ctrl: str | None
    channel_in: int
    channel_out: int

    @property
    def capacity_bytes(self) -> float:
        return self.memory.capacity_bytes


def index_label(rows: int, cols: int, r: int, c: int) -> str:
    """``[r,c]`` for a true grid (rows > 1 and cols > 1), ``[i]`` for a line of instances, so a DGX
    cluster grown to 384 rows of nodes still reads ``dgx/node[3]/gpu[5]``."""
    return f"[{r},{c}]" if rows > 1 and cols > 1 else f"[{r * cols + c}]"
