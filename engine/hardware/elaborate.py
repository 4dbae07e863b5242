"""``elaborate``: the one entry point from the hardware IR to a routable ``HardwareGraph``."""

from __future__ import annotations

import networkx as nx
import numpy as np
from tilewright.engine.hardware import fabrics as fab
from tilewright.engine.hardware.builder import Builder
from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.hardware.grow import grow
from tilewright.engine.hardware.memory import add_memory_ports
from tilewright.engine.hardware.model import Device
from tilewright.engine.ir.hardware import Component
from tilewright.engine.release import release_lists


def elaborate(root: Component, devices_needed: int | None = None) -> HardwareGraph:
    """Build the device/link graph of ``root``, first growing it to ``devices_needed`` devices if given.

    Raises ValueError when the root stands for several instances (nothing would join them) or when the
    system cannot hold the devices needed."""
    if devices_needed is not None:
        root = grow(root, devices_needed)
        if root.device_count() < devices_needed:
            raise ValueError(
                f"{root.name}: holds {root.device_count()} devices, {devices_needed} needed, "
                "and nothing in it is growable"
            )
    if root.count != 1:
        raise ValueError(f"{root.name}: the root must be a single instance (rows = cols = 1)")
    b = Builder()
    b.walk(root, root.name, root.name, None, 0)
    ports = add_memory_ports(b)

    coords = _coords(b)
    devices = [
        Device(i, node, path, compute, mems, coords.get(node))
        for i, (node, path, compute, mems) in enumerate(b.device_rows)
    ]
    g = nx.DiGraph()
    g.add_nodes_from(b.nodes)
    g.add_edges_from((lk.src, lk.dst, {"id": lk.id, "link": lk}) for lk in b.links)
    # Counted off the adjacency: ``number_of_edges`` caches a degree view on the graph that refers back
    # to it, a reference cycle that left the whole graph to the cyclic collector.
    if sum(map(len, g.succ.values())) != len(b.links):  # two links for one ordered pair would hide one of them
        raise RuntimeError(f"{root.name}: duplicate links between the same pair of nodes")
    hg = HardwareGraph(root, g, devices, b.links, ports, b.device_inst, b.interconnects)
    for inst in b.instances:  # the tree's downward links served the walk; kept, each parent <-> child
        inst.children = []  # pair is a reference cycle, and the tree garbage only the collector frees
    release_lists(b.nodes, b.device_rows, b.instances)  # not in one GIL hold (a studio worker elaborates)
    return hg


def _coords(b: Builder) -> dict[str, tuple[int, ...]]:
    """Each device's position in the outermost grid that covers it (instances are in pre-order, so an
    outer mesh of meshes is seen before the die grids inside it)."""
    out: dict[str, tuple[int, ...]] = {}
    for inst in b.instances:
        f = inst.fabric
        if isinstance(f, fab.GridFabric) and f.direct:
            nodes = f.domain.nodes
            if nodes.size and nodes.flat[0] in out:
                continue
            flat = nodes.ravel().tolist()
            idx = np.unravel_index(np.arange(len(flat)), nodes.shape)
            for node, c in zip(flat, zip(*(a.tolist() for a in idx), strict=True), strict=True):
                out.setdefault(node, c)
    return out
