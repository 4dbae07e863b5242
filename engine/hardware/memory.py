"""Memory ports: memory traffic is a flow over links like any other, so every memory becomes nodes.

- Local memory (``attach`` empty): one port node per owning instance, ``<owner>/<memory>``, joined to the
  device by a channel link pair of the memory's effective bandwidth. A local memory of an instance that
  does not compute itself (a node's host memory, say) hangs off its switch, or else its gateway device.
- Edge memory: ``ports_per_edge`` ports on each listed edge of the owner's child grid, spread evenly:
  the edge's devices (or child gateways) are split into that many contiguous segments. Each port is a
  memory node ``<owner>/<memory>@<edge>[k]`` behind a controller node ``.../ctrl``; the channel pair
  (controller ↔ memory, effective bandwidth) is shared by every user of the port, and attach wires at the
  memory's raw bandwidth join the controller to each device of its segment.

Both directions of a channel are separate links, so a port reads and writes concurrently at full
bandwidth each (full duplex); real DRAM buses turn around, a simplification the efficiency absorbs.
"""

from __future__ import annotations

import numpy as np
from tilewright.engine.hardware import fabrics as fab
from tilewright.engine.hardware.builder import Builder, Instance
from tilewright.engine.hardware.grid import edge_line, segments
from tilewright.engine.hardware.model import MemoryPort
from tilewright.engine.ir.hardware import Memory


def add_memory_ports(b: Builder) -> list[MemoryPort]:
    ports: list[MemoryPort] = []
    for inst in b.instances:
        for m in inst.comp.memories:
            if m.attach:
                _edge_ports(b, inst, m, ports)
            else:
                _local_port(b, inst, m, ports)
    return ports


def _channel(b: Builder, a: str, port: str, m: Memory, level: str) -> tuple[int, int]:
    first = len(b.links)
    b.add_pairs(
        [a], [port], bw=m.effective_bandwidth, peak=m.bandwidth_bytes_per_s, lat=m.latency_s,
        energy=m.energy_pj_per_byte / 8.0, level=level, kind="memory",
    )
    return first, first + 1  # (towards the memory, from the memory)


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


def _edge_ports(b: Builder, inst: Instance, m: Memory, ports: list[MemoryPort]) -> None:
    arr = _child_array(inst)
    for edge in m.attach:
        line = edge_line(arr, edge)
        for k, seg in enumerate(segments(len(line), m.ports_per_edge)):
            node = f"{inst.path}/{m.name}@{edge.value}[{k}]"
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
