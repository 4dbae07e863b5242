"""Fabrics: how one instance's interconnect joins its children, and how traffic crosses it.

Every instance with an interconnect gets one fabric. Routing between two devices happens on the fabric
of their lowest common ancestor instance (two GPUs of a DGX node meet on its NVSwitch, GPUs of two nodes
on the InfiniBand fabric), so each fabric only has to route between its own entry points:

- ``GridFabric``: mesh / torus / ring, dimension-ordered. When ``direct`` the grid holds every device of
  the instance (devices, or a mesh of meshes merged into one global grid) and traffic enters at the device
  itself; otherwise the grid joins the children's gateways (first devices).
- ``SwitchFabric``: a switch node; ``direct`` (attach every-device) gives every device its own up and down
  link, otherwise each child's gateway has one.
- ``GraphFabric``: fully connected, dragonfly, H-tree and explicit edge lists, routed by shortest path
  in hops over the fabric's own small graph (breadth-first, ties broken by insertion order, so
  deterministic).
"""

from __future__ import annotations

import math

import networkx as nx
from tilewright.engine.hardware.grid import GridDomain


class Fabric:
    """Base: ``direct`` means devices are themselves the fabric's entry points."""

    direct: bool = False
    name = "fabric"

    def path(self, a: str, b: str) -> list[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def distance(self, a: str, b: str) -> int:
        return len(self.path(a, b)) - 1


class GridFabric(Fabric):
    name = "grid"

    def __init__(self, domain: GridDomain) -> None:
        self.domain = domain
        self.direct = domain.covers_devices

    def path(self, a: str, b: str) -> list[str]:
        return self.domain.path(a, b)

    def distance(self, a: str, b: str) -> int:
        return self.domain.distance(a, b)


class SwitchFabric(Fabric):
    name = "switch"

    def __init__(self, switch: str, direct: bool) -> None:
        self.switch = switch
        self.direct = direct

    def path(self, a: str, b: str) -> list[str]:
        if a == b:
            return [a]
        if a == self.switch:
            return [a, b]
        if b == self.switch:
            return [a, b]
        return [a, self.switch, b]

    def distance(self, a: str, b: str) -> int:
        return len(self.path(a, b)) - 1


class GraphFabric(Fabric):
    name = "graph"

    def __init__(self, graph: nx.Graph) -> None:
        self.graph = graph
        self._cache: dict[tuple[str, str], list[str]] = {}

    def path(self, a: str, b: str) -> list[str]:
        key = (a, b)
        p = self._cache.get(key)
        if p is None:
            p = nx.shortest_path(self.graph, a, b)
            self._cache[key] = p
        return p


# --- link patterns of the graph topologies (pairs of member positions; links go both ways) -------------


def fully_connected_pairs(n: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(n) for j in range(i + 1, n)]


def dragonfly_pairs(n: int, group_size: int | None) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(local, global) pairs: groups of ``group_size`` consecutive instances fully connected inside, and
    one global link between each pair of groups, spread over the members so that no member carries all
    of a group's global links (member ``j`` of group g serves the groups g+1+j, g+1+j+size, ...)."""
    g = group_size or max(1, round(math.sqrt(n)))
    groups = [list(range(s, min(s + g, n))) for s in range(0, n, g)]
    local = [(m[i], m[j]) for m in groups for i in range(len(m)) for j in range(i + 1, len(m))]
    glob = []
    ng = len(groups)
    for gi in range(ng):
        for gj in range(gi + 1, ng):
            a = groups[gi][(gj - gi - 1) % len(groups[gi])]
            b = groups[gj][(gi - gj - 1) % ng % len(groups[gj])]
            glob.append((a, b))
    return local, glob


def htree_levels(n: int) -> list[list[tuple[int, int | None]]]:
    """A binary tree over ``n`` leaves: for each level, the pairs of lower-level positions each new router
    joins (a lone last node is carried up with ``None`` as partner). H-tree layouts such as HyPar's array
    are exactly this tree drawn in the plane; only the tree matters for hops and sharing."""
    levels = []
    width = n
    while width > 1:
        level = [(i, i + 1 if i + 1 < width else None) for i in range(0, width, 2)]
        levels.append(level)
        width = len(level)
    return levels
