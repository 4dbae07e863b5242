"""Memory ports: memory traffic is a flow over links like any other, so every memory becomes nodes.

- Local memory (``attach`` empty): one port node per owning instance, ``<owner>/<memory>``, joined to the
  device by a channel link pair of the memory's effective bandwidth. A local memory of an instance that
  does not compute itself (a node's host memory, say) hangs off its switch, or else its gateway device.
- Ported memory: ``ports_per_edge`` ports on each listed edge of the owner's child grid, and on each
  column or row its ``placement`` lists (an interior DRAM column, as Wormhole has), spread evenly: the
  line's devices (or child gateways) are split into that many contiguous segments; a listed cell is one
  port on that grid node. Each port is a memory node ``<owner>/<memory>@<where>[k]`` (``@west[0]``,
  ``@col5[1]``, ``@row0[0]``, ``@cell[2,3]``) behind a controller node ``.../ctrl``; the channel pair
  (controller ↔ memory) is shared by every user of the port, and attach wires at the memory's raw
  bandwidth join the controller to each device of its segment.

Both directions of a channel are separate links, so a port reads and writes concurrently (full duplex;
real DRAM buses turn around, a simplification the efficiency absorbs). Each direction gets the achievable
fraction of its kind of access: interleaved pages read or written by arbitrary devices
(``efficiency_interleaved_read`` / ``_write``), bank-local access ``efficiency``.
"""

from __future__ import annotations

import numpy as np
from tilewright.engine.hardware import fabrics as fab
from tilewright.engine.hardware.builder import Builder, Instance
from tilewright.engine.hardware.grid import edge_line, segments
from tilewright.engine.hardware.model import Link, MemoryPort
from tilewright.engine.ir.hardware import Edge, Memory


def add_memory_ports(b: Builder) -> list[MemoryPort]:
    ports: list[MemoryPort] = []
    for inst in b.instances:
        for m in inst.comp.memories:
            if m.ported:
                _grid_ports(b, inst, m, ports)
            else:
                _local_port(b, inst, m, ports)
    return ports


def _channel(b: Builder, a: str, port: str, m: Memory, level: str) -> tuple[int, int]:
    """The channel pair: (towards the memory = writes, from the memory = reads)."""
    first = len(b.links)
    peak, lat, energy = m.bandwidth_bytes_per_s, m.latency_s, m.energy_pj_per_byte / 8.0
    b.links.append(Link(first, a, port, peak * m.channel_efficiency(read=False), lat, energy, level, "memory", peak))
    b.links.append(Link(first + 1, port, a, peak * m.channel_efficiency(read=True), lat, energy, level, "memory", peak))
    return first, first + 1


def _local_port(b: Builder, inst: Instance, m: Memory, ports: list[MemoryPort]) -> None:
    if inst.node is not None:
        anchor = inst.node
    elif isinstance(inst.fabric, fab.SwitchFabric):
        anchor = inst.fabric.switch
    else:
        anchor = inst.gateway
    node = f"{inst.path}/{m.name}"
    b.add_node(node, "memory", port=len(ports))
    cin, cout = _channel(b, anchor, node, m, inst.comp_path)
    ports.append(MemoryPort(len(ports), node, m, inst.path, None, (anchor,), None, cin, cout))


def _child_array(inst: Instance) -> np.ndarray:
    """The owner's child grid: its mesh (device grid or gateway grid) if it has one, otherwise its child
    instances laid out as rows × cols (one child component) or one row (several)."""
    if isinstance(inst.fabric, fab.GridFabric):
        return inst.fabric.domain.nodes
    gws = np.array([k.gateway for k in inst.children], dtype=object)
    kids = inst.comp.children
    if len(kids) == 1:
        return gws.reshape(kids[0].rows, kids[0].cols)
    return gws.reshape(1, len(gws))


def _lines(arr: np.ndarray, m: Memory) -> list[tuple[str, list[str], Edge | None, bool]]:
    """(label, grid nodes, edge, split into ports_per_edge segments?) for every place the memory's ports sit."""
    out: list[tuple[str, list[str], Edge | None, bool]] = [(e.value, edge_line(arr, e), e, True) for e in m.attach]
    pl = m.placement
    if pl is None or pl.empty:
        return out
    grid = arr.reshape(1, -1) if arr.ndim == 1 else arr
    if grid.ndim != 2:
        raise ValueError(f"memories.{m.name}.placement: needs a 2-D child grid, this one is {grid.ndim}-D")
    rows, cols = grid.shape
    for c in pl.columns:
        if c >= cols:
            raise ValueError(f"memories.{m.name}.placement.columns: {c} is outside the {rows} x {cols} grid")
        out.append((f"col{c}", grid[:, c].tolist(), None, True))
    for r in pl.rows:
        if r >= rows:
            raise ValueError(f"memories.{m.name}.placement.rows: {r} is outside the {rows} x {cols} grid")
        out.append((f"row{r}", grid[r, :].tolist(), None, True))
    for r, c in pl.cells:
        if r >= rows or c >= cols:
            raise ValueError(f"memories.{m.name}.placement.cells: ({r}, {c}) is outside the {rows} x {cols} grid")
        out.append((f"cell[{r},{c}]", [grid[r, c]], None, False))
    return out


def _grid_ports(b: Builder, inst: Instance, m: Memory, ports: list[MemoryPort]) -> None:
    for label, line, edge, split in _lines(_child_array(inst), m):
        parts = segments(len(line), m.ports_per_edge) if split else [range(1)]
        for k, seg in enumerate(parts):
            node = f"{inst.path}/{m.name}@{label}" + (f"[{k}]" if split else "")
            ctrl = f"{node}/ctrl"
            b.add_node(node, "memory", port=len(ports))
            b.add_node(ctrl, "memctrl")
            cin, cout = _channel(b, ctrl, node, m, inst.comp_path)
            attached = tuple(line[i] for i in seg)
            b.add_pairs(
                list(attached), [ctrl] * len(attached), bw=m.bandwidth_bytes_per_s,
                peak=m.bandwidth_bytes_per_s, lat=0.0, energy=0.0, level=inst.comp_path, kind="memory",
            )
            ports.append(MemoryPort(len(ports), node, m, inst.path, edge, attached, ctrl, cin, cout))
