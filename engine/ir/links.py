"""Link details of an interconnect beyond one bandwidth: packet framing, the links between merged child grids,
and the fixed costs a collective operation pays on the fabric.

They are separate small models so that ``Interconnect`` stays readable and every number can carry its own
``comment`` with a source. All default to "off": an interconnect without them behaves exactly as before.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field
from tilewright.engine.ir.common import BytesPerSecond, QuietDefaultsModel, Seconds, StrictModel

Count = Annotated[int, Field(ge=1)]
LaunchKind = Literal["reduce-scatter", "all-gather"]  # the operations a grid collective is made of


class Algorithm(StrEnum):
    """Collective algorithms on grids (``perf.collective_grid``)."""

    line = "line"
    ring = "ring"
    mesh = "mesh"  # row then column, lines where an axis is open
    torus = "torus"  # row then column, rings on every axis
    tree = "tree"
    hierarchical = "hierarchical"


class Framing(StrictModel):
    """Payload efficiency of a packetised link: a payload of P bytes travels with an H-byte header, and the
    wire carries at most F bytes per frame with O bytes of overhead each (preamble, FEC, CRC, gap), so

        efficiency = P / (P + H + O · ceil((P + H) / F))

    (tt-metal's CCL report gives this formula for Ethernet: 1,500-byte frames with ≥ 50 bytes each). It
    scales every byte a link carries, so it is applied to the link's bandwidth at elaboration."""

    payload_bytes: Count = Field(description="payload bytes per packet")
    header_bytes: Annotated[int, Field(ge=0)] = Field(0, description="packet header bytes")
    frame_bytes: Count | None = Field(None, description="largest wire frame in bytes; None: one frame per packet")
    frame_overhead_bytes: Annotated[int, Field(ge=0)] = Field(0, description="overhead bytes per wire frame")
    comment: str = ""

    def efficiency(self) -> float:
        packet = self.payload_bytes + self.header_bytes
        frames = math.ceil(packet / self.frame_bytes) if self.frame_bytes else 1
        return self.payload_bytes / (packet + self.frame_overhead_bytes * frames)


class BoundaryLinks(StrictModel):
    """The links that join neighbouring children of a grid (at tile granularity: the chip-to-chip or
    die-to-die links once the children's tile grids are merged into one).

    Without it every facing pair of tiles on a block boundary gets the interconnect's own link(s), which
    overstates the capacity between chips that are joined by a few Ethernet ports. With ``links`` set, that
    many physical links cross one facing edge of two children and their capacity is shared evenly by the
    edge's tile pairs (each pair's link gets ``links / pairs`` of a link): routing stays dimension-ordered
    and the bandwidth between two chips is right, although one lone flow then sees only its pair's share
    (a stated simplification; whole tile groups crossing the edge, as collectives and pipeline sends do,
    use all pairs)."""

    bandwidth_bytes_per_s: BytesPerSecond | None = Field(
        None, description="per link, per direction; default the interconnect's (per-axis) bandwidth"
    )
    latency_s: Seconds | None = Field(None, description="per crossing; default the interconnect's link latency")
    links: Count | list[Count] | None = Field(
        None, description="physical links across one facing edge of two children (one per axis if a list); "
        "default one link (× the interconnect's links) per facing tile pair"
    )
    comment: str = ""

    def links_on(self, axis: int) -> int | None:
        if isinstance(self.links, list):
            return self.links[axis]
        return self.links


class Protocol(StrictModel):
    """One wire protocol of a collective library on a switched fabric (NCCL's LL, LL128 and Simple; NCCL's
    tuning model, ``src/graph/tuning.cc``): a collective pays ``fixed_s`` once (kernel launch and protocol
    set-up, NCCL's ``baseLat``), ``step_s`` per algorithm step on this fabric (``hwLat``), and moves its bytes
    at ``payload_fraction`` of the link's rate (LL sends a 4-byte flag with every 4 data bytes: 0.5; LL128
    120 of every 128 bytes). The library picks, per collective, the protocol that finishes first."""

    name: str = Field(min_length=1)
    fixed_s: Seconds = Field(0.0, description="per collective operation: launch and protocol set-up")
    step_s: Seconds = Field(0.0, description="per algorithm step on this fabric")
    payload_fraction: Annotated[float, Field(gt=0, le=1)] = Field(
        1.0, description="share of the bytes on the wire that is data (the rest flags or headers)"
    )
    comment: str = ""


class CollectiveCosts(QuietDefaultsModel):
    """What a collective operation pays on this fabric besides moving its bytes.

    Default (all off): a phase of an algorithm costs its steps × the per-hop latency, as in the α–β model.
    Measured fabrics (tt-metal's CCL report) add, per operation, a program launch and the opening and closing
    of the connection to the neighbour (blocking round trips), cross the algorithm's diameter several times
    (entry barrier round trip + the data pipeline), store-and-forward partial sums at every hop of a
    reduce-scatter, and pause a reduce-scatter for a neighbour handshake every few packets. Where one worker
    core cannot keep a link fed (``workers_to_fill_link``), a line all-gather's link that carries fewer
    members' shards than that runs below its bandwidth (``perf.collective_grid.fed``)."""

    _quiet = ("workers_to_fill_link", "launch_s_by_kind")

    fixed_s: Seconds = Field(0.0, description="per collective operation: program launch")
    handshake_hops: Annotated[float, Field(ge=0)] = Field(
        0.0, description="hop latencies per operation to open and close the connection to the neighbour"
    )
    diameter_crossings: Annotated[float, Field(ge=0)] | None = Field(
        None, description="if set, a phase's latency is this many crossings of the algorithm's diameter "
        "(line: members - 1, ring: members / 2) instead of one hop per step"
    )
    reduce_hop_s: Seconds = Field(0.0, description="extra latency per hop of a reduce-scatter (store-and-forward)")
    launch_s_by_kind: dict[LaunchKind, Seconds] = Field(
        default_factory=dict,
        description="per kind of operation (reduce-scatter, all-gather), its launch on a runtime that launches "
        "every collective call anew (``Compute.runtime_ccl`` generic), in place of fixed_s: the op-to-op "
        "dispatch gap measured before such a call, where the runtime sends the call's kernels to the Ethernet "
        "cores as well as the workers of every member and the members start skewed; a persistent runtime pays "
        "fixed_s. A kind not named pays fixed_s",
    )
    reduce_sync_packets: Count | None = Field(
        None, description="a reduce-scatter waits for a neighbour round trip every this many packets "
        "(packet = framing.payload_bytes)"
    )
    workers_to_fill_link: Count = Field(
        1, description="worker cores it takes to keep one link direction fed; a line all-gather injects each "
        "member's shard with one worker per link (the routers forward the others), so a link carrying fewer "
        "shards than this runs at shards / this of its bandwidth"
    )
    algorithms: list[Algorithm] | None = Field(
        None, description="the algorithms the fabric's runtime offers (default: every one that fits)"
    )
    protocols: list[Protocol] | None = Field(
        None, description="switch and fat-tree fabrics: the collective library's protocols (NCCL LL, LL128, "
        "Simple); a collective's latency is the fastest protocol's fixed cost + steps x its step latency"
    )
    comment: str = ""

    def grid_fields(self) -> list[str]:
        """The fields that describe a grid fabric's collectives (``perf.collective_grid``)."""
        grid = ("fixed_s", "handshake_hops", "diameter_crossings", "reduce_hop_s", "reduce_sync_packets", "algorithms",
                "launch_s_by_kind")
        names = [f for f in grid if f in self.model_fields_set and getattr(self, f) not in (None, 0, 0.0, {})]
        return names + (["workers_to_fill_link"] if self.workers_to_fill_link > 1 else [])
