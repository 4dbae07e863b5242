"""The elaborated system: a directed graph of devices, switches, routers and memory ports, plus routing.

Routing is hierarchical. Two devices talk over the interconnect of their lowest common ancestor instance
(GPUs of one DGX node over NVSwitch, of two nodes over InfiniBand; tiles of one die over its NoC, of two
dies over the wafer's global grid). Each fabric routes between its entry points (see ``fabrics.py``);
getting from a device to its entry point is the same problem one level down. Routes are computed on
demand and cached, so elaborating a large system costs nothing for pairs that never talk.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise

import networkx as nx
from tilewright.engine.hardware import fabrics as fab
from tilewright.engine.hardware.builder import Instance
from tilewright.engine.hardware.builder import lca as common_ancestor
from tilewright.engine.hardware.model import Device, Link, MemoryPort
from tilewright.engine.hardware.nearest import NearestPort
from tilewright.engine.ir.hardware import Component, Interconnect


class HardwareGraph:
    """``graph`` nodes carry ``type`` (device, switch, router, memory, memctrl); edges carry ``id`` (the
    index into ``links``) and ``link``."""

    def __init__(
        self,
        root: Component,
        graph: nx.DiGraph,
        devices: list[Device],
        links: list[Link],
        memory_ports: list[MemoryPort],
        device_inst: list[Instance],
        interconnects: dict[str, Interconnect],
    ) -> None:
        self.root = root
        self.graph = graph
        self.devices = devices
        self.links = links
        self.memory_ports = memory_ports
        self.interconnects = interconnects
        self._device_inst = device_inst
        self._dev_by_node = {d.node: d.index for d in devices}
        self._port_by_node = {p.node: p for p in memory_ports}
        self._ports_by_owner: dict[tuple[str, str], list[MemoryPort]] = defaultdict(list)
        for p in memory_ports:
            self._ports_by_owner[(p.owner, p.memory.name)].append(p)
        self._succ = graph.succ
        self._routes: dict[tuple[str, str], tuple[int, ...]] = {}
        self._mem_routes: dict[tuple[int, str, bool], tuple[MemoryPort, tuple[int, ...]]] = {}
        self._nearest = NearestPort()

    # --- lookups ----------------------------------------------------------------------------------------

    def device_index(self, node: str) -> int:
        return self._dev_by_node[node]

    def is_device(self, node: str) -> bool:
        return node in self._dev_by_node

    def instance_of(self, node: str) -> Instance:
        """The component instance a device node stands for (its ``path``, ``comp``, ``parent``...)."""
        return self._device_inst[self._dev_by_node[node]]

    def link_between(self, src: str, dst: str) -> int:
        return self._succ[src][dst]["id"]

    def link_bandwidth(self, link_id: int, message_bytes: float | None = None) -> float:
        """Achievable bytes/s of a link for one message: the interconnect's efficiency curve applied to
        the peak when it has one and a size is given, otherwise the large-message bandwidth."""
        link = self.links[link_id]
        ic = self.interconnects.get(link.level) if link.kind != "memory" else None
        if message_bytes is None or ic is None or ic.efficiency_curve is None:
            return link.bandwidth
        return link.peak_bandwidth * ic.efficiency_at(message_bytes)

    def common_level(self, a: int, b: int) -> str:
        """Path of the component whose interconnect carries traffic between devices ``a`` and ``b``."""
        lca, _, _ = common_ancestor(self._device_inst[a], self._device_inst[b])
        return lca.comp_path

    # --- routing ----------------------------------------------------------------------------------------

    def route(self, src: str, dst: str) -> list[int]:
        """Link ids from node ``src`` to node ``dst`` (devices, memory ports, or any node)."""
        key = (src, dst)
        r = self._routes.get(key)
        if r is None:
            r = tuple(self._compute_route(src, dst))
            self._routes[key] = r
        return list(r)

    def device_route(self, a: int, b: int) -> list[int]:
        return self.route(self.devices[a].node, self.devices[b].node)

    def hops(self, src: str, dst: str) -> int:
        """Length of ``route(src, dst)``, computed without building it where the topology allows."""
        if src in self._dev_by_node and dst in self._dev_by_node:
            return self._hops(src, dst)
        return len(self.route(src, dst))

    def memory_route(self, device: int, memory_name: str, read: bool = False) -> tuple[MemoryPort, list[int]]:
        """The nearest port (by hops, ties to the lower port index) of the memory called ``memory_name``
        owned by the device or its closest ancestor, and the route to it (``read=True``: from it)."""
        key = (device, memory_name, read)
        hit = self._mem_routes.get(key)
        if hit is None:
            node = self.devices[device].node
            port, via = self._nearest.find(self, node, self.ports_of(device, memory_name))
            if via is None:
                r = self.route(port.node, node) if read else self.route(node, port.node)
            else:
                via_port = [port.ctrl, port.node] if port.ctrl else [port.node]
                if read:  # data leaves the port and is routed forward (x first) from the attach point
                    nodes = via_port[::-1] + self._device_nodes(via, node)
                else:
                    nodes = self._device_nodes(node, via) + via_port
                r = self._links_along(nodes)
            hit = (port, tuple(r))
            self._mem_routes[key] = hit
        return hit[0], list(hit[1])

    def ports_of(self, device: int, memory_name: str) -> list[MemoryPort]:
        """Every port of the memory called ``memory_name`` owned by the device or its closest ancestor."""
        inst: Instance | None = self._device_inst[device]
        while inst is not None:
            ports = self._ports_by_owner.get((inst.path, memory_name))
            if ports:
                return ports
            inst = inst.parent
        raise KeyError(f"no memory {memory_name!r} reachable from device {self.devices[device].node}")

    # --- internals ----------------------------------------------------------------------------------------

    def _links_along(self, nodes: list[str]) -> list[int]:
        succ = self._succ
        return [succ[u][v]["id"] for u, v in pairwise(nodes)]

    def _compute_route(self, src: str, dst: str) -> list[int]:
        for node in (src, dst):
            if node not in self.graph:
                raise KeyError(f"no node {node!r} in {self.root.name}")
        if src == dst:
            return []
        devs = self._dev_by_node
        if src in devs and dst in devs:
            return self._links_along(self._device_nodes(src, dst))
        heads = self._anchors(src, towards=False)
        tails = self._anchors(dst, towards=True)
        if heads is None or tails is None:  # switches, routers, odd anchors: plain shortest path,
            nodes = self.graph.nodes  # never cutting through a memory controller on the way

            def usable(n: str) -> bool:
                return n == src or n == dst or nodes[n]["type"] not in ("memory", "memctrl")

            view = nx.subgraph_view(self.graph, filter_node=usable)
            return self._links_along(nx.shortest_path(view, src, dst))
        best = None
        for s, head in heads:
            for d, tail in tails:
                cost = len(head) + self._hops(s, d) + len(tail)
                if best is None or cost < best[0]:
                    best = (cost, head, s, d, tail)
        _, head, s, d, tail = best
        return self._links_along(head + self._device_nodes(s, d) + tail)

    def _anchors(self, node: str, towards: bool) -> list[tuple[str, list[str]]] | None:
        """Ways between a node and the devices it hangs off: (device, nodes between, in travel order)."""
        if node in self._dev_by_node:
            return [(node, [])]
        port = self._port_by_node.get(node)
        if port is None or any(a not in self._dev_by_node for a in port.attached):
            return None
        via = [port.ctrl, node] if port.ctrl else [node]
        if towards:  # device → … → port: nodes after the device
            return [(a, via) for a in port.attached]
        return [(a, via[::-1]) for a in port.attached]  # port → … → device: nodes before the device

    def _entries(self, lca: Instance, child: Instance | None, dev: str) -> str | None:
        """Where ``dev`` (inside ``child`` of ``lca``, or ``lca``'s own device) enters ``lca``'s fabric;
        None means it is ``lca``'s own device joined by its own link."""
        f = lca.fabric
        if child is None:
            return dev if isinstance(f, fab.SwitchFabric) and f.direct else None
        return dev if f is not None and f.direct else child.gateway

    def _device_nodes(self, a: str, b: str) -> list[str]:
        if a == b:
            return [a]
        inst = self._device_inst
        devs = self._dev_by_node
        lca, ca, cb = common_ancestor(inst[devs[a]], inst[devs[b]])
        ea = self._entries(lca, ca, a)
        if ea is None:
            return [a, *self._device_nodes(lca.own_entry, b)]
        eb = self._entries(lca, cb, b)
        if eb is None:
            return [*self._device_nodes(a, lca.own_entry), b]
        head = self._device_nodes(a, ea)[:-1] if ea != a else []
        tail = self._device_nodes(eb, b)[1:] if eb != b else []
        return head + lca.fabric.path(ea, eb) + tail

    def _hops(self, a: str, b: str) -> int:
        if a == b:
            return 0
        inst = self._device_inst
        devs = self._dev_by_node
        lca, ca, cb = common_ancestor(inst[devs[a]], inst[devs[b]])
        ea = self._entries(lca, ca, a)
        if ea is None:
            return 1 + self._hops(lca.own_entry, b)
        eb = self._entries(lca, cb, b)
        if eb is None:
            return self._hops(a, lca.own_entry) + 1
        return self._hops(a, ea) + lca.fabric.distance(ea, eb) + self._hops(eb, b)

    # --- summary ----------------------------------------------------------------------------------------

    def summary(self) -> dict:
        """Counts of what was built and totals of what it costs (area, power, money over all instances)."""
        types: dict[str, int] = defaultdict(int)
        for _, t in self.graph.nodes(data="type"):
            types[t] += 1
        kinds: dict[str, int] = defaultdict(int)
        for link in self.links:
            kinds[link.kind] += 1
        peak: dict[str, float] = defaultdict(float)
        for d in self.devices:
            for dtype, flops in d.compute.peak_flops.items():
                peak[dtype.value] += flops
        mem: dict[str, float] = defaultdict(float)
        for p in self.memory_ports:
            mem[p.memory.kind.value] += p.memory.capacity_bytes
        return {
            "devices": len(self.devices),
            "links": len(self.links),
            "links_by_kind": dict(kinds),
            "memory_ports": len(self.memory_ports),
            "switches": types["switch"],
            "routers": types["router"],
            "nodes": self.graph.number_of_nodes(),
            "peak_flops": dict(peak),
            "memory_bytes": dict(mem),
            "area_mm2": self.root.total("area_mm2"),
            "power_w": self.root.total("power_w"),
            "cost_usd": self.root.total("cost_usd"),
        }

