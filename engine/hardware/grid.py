"""Grid domains: n-dimensional arrays of node ids with mesh or torus neighbours.

A grid domain is what makes a mesh of meshes one machine: a wafer of 5 × 4 dies of 4 × 4 tiles becomes
one 20 × 16 array, the die NoCs providing the links inside each block and the wafer's die-to-die links
joining facing borders. Routing on it is dimension-ordered (x, the last axis, first), which is what the
mesh NoCs the presets model actually do and which keeps routes deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator

import numpy as np
from tilewright.engine.ir.hardware import Edge


class GridDomain:
    """``nodes`` is an object array of node ids; ``wrap[d]`` says axis d has torus wrap-around links."""

    __slots__ = ("nodes", "shape", "wrap", "covers_devices", "_coords")

    def __init__(self, nodes: np.ndarray, wrap: tuple[bool, ...], covers_devices: bool) -> None:
        self.nodes = nodes
        self.shape: tuple[int, ...] = tuple(nodes.shape)
        self.wrap = wrap
        self.covers_devices = covers_devices
        self._coords: dict[str, tuple[int, ...]] | None = None

    def coords(self) -> dict[str, tuple[int, ...]]:
        """Node → coordinate, built on first use (elaboration of a big wafer does not pay for it)."""
        if self._coords is None:
            flat = self.nodes.ravel().tolist()
            idx = np.unravel_index(np.arange(len(flat)), self.shape)
            cols = [a.tolist() for a in idx]
            self._coords = dict(zip(flat, zip(*cols, strict=True), strict=True))
        return self._coords

    def coord(self, node: str) -> tuple[int, ...]:
        return self.coords()[node]

    def distance(self, a: str, b: str) -> int:
        """Hops of the dimension-ordered route: Manhattan distance, wrap-aware on torus axes."""
        ca, cb = self.coord(a), self.coord(b)
        total = 0
        for d, n in enumerate(self.shape):
            delta = abs(cb[d] - ca[d])
            total += min(delta, n - delta) if self.wrap[d] else delta
        return total

    def path(self, a: str, b: str) -> list[str]:
        """Nodes visited from ``a`` to ``b``: last axis (x) first, then y, then z; on a torus axis the
        shorter way round (forward on a tie), which is what keeps torus routes minimal."""
        nodes = self.nodes
        return [a, *(nodes[c] for c in route_coords(self.coord(a), self.coord(b), self.shape, self.wrap))]


def route_coords(
    src: tuple[int, ...], dst: tuple[int, ...], shape: tuple[int, ...], wrap: tuple[bool, ...]
) -> Iterator[tuple[int, ...]]:
    """The coordinates a dimension-ordered route from ``src`` to ``dst`` steps onto, in order (``src``
    itself not included): last axis first, the shorter way round a torus axis (forward on a tie)."""
    cur = list(src)
    for d in reversed(range(len(shape))):
        n = shape[d]
        if cur[d] == dst[d]:
            continue
        if wrap[d]:
            fwd = (dst[d] - cur[d]) % n
            step, count = (1, fwd) if fwd <= n - fwd else (-1, n - fwd)
        else:
            step = 1 if dst[d] > cur[d] else -1
            count = abs(dst[d] - cur[d])
        for _ in range(count):
            cur[d] = (cur[d] + step) % n
            yield tuple(cur)


def merge_blocks(blocks: list[np.ndarray], dims: tuple[int, ...]) -> np.ndarray:
    """Tile equally shaped child arrays (row-major over ``dims``) into one global array."""
    inner = blocks[0].shape
    stacked = np.stack(blocks).reshape(dims + inner)
    n = len(dims)
    order = [ax for pair in zip(range(n), range(n, 2 * n), strict=True) for ax in pair]
    return stacked.transpose(order).reshape(tuple(o * i for o, i in zip(dims, inner, strict=True)))


def boundary_pairs(
    nodes: np.ndarray, block: tuple[int, ...], wrap: tuple[bool, ...]
) -> Iterator[tuple[int, list[str], list[str]]]:
    """Neighbour pairs (axis, lows, highs) that cross block boundaries of size ``block``, plus the
    wrap-around pairs of the axes that wrap (``torus_wraps``: only where the wrap is a new pair)."""
    for d, size in enumerate(nodes.shape):
        s = block[d]
        lo = np.arange(s - 1, size - 1, s)
        if len(lo):
            a = np.take(nodes, lo, axis=d).ravel().tolist()
            b = np.take(nodes, lo + 1, axis=d).ravel().tolist()
            yield d, a, b
        if wrap[d]:
            a = np.take(nodes, [size - 1], axis=d).ravel().tolist()
            b = np.take(nodes, [0], axis=d).ravel().tolist()
            yield d, a, b


def torus_wraps(shape: tuple[int, ...], wrap: tuple[bool, ...]) -> tuple[bool, ...]:
    """Axes with wrap-around links: those asked to wrap that are longer than 2 (on 2 the wrap would
    duplicate the one neighbour link)."""
    return tuple(w and n > 2 for w, n in zip(wrap, shape, strict=True))


def edge_line(nodes: np.ndarray, edge: Edge) -> list[str]:
    """Nodes along one edge of a grid, in row-major order: west/east are the first/last column (the
    last axis), north/south the first/last row (the axis before it; a 1-D line is all of it)."""
    if nodes.ndim == 0:
        return [nodes.item()]
    if edge in (Edge.west, Edge.east):
        sl = np.take(nodes, [0 if edge is Edge.west else nodes.shape[-1] - 1], axis=nodes.ndim - 1)
    elif nodes.ndim == 1:
        sl = nodes
    else:
        ax = nodes.ndim - 2
        sl = np.take(nodes, [0 if edge is Edge.north else nodes.shape[ax] - 1], axis=ax)
    return sl.ravel().tolist()


def segments(length: int, parts: int) -> list[range]:
    """Split positions 0..length-1 into ``parts`` even contiguous segments (never empty: with more
    parts than positions, several ports share the position nearest their centre)."""
    out = []
    for k in range(parts):
        lo, hi = k * length // parts, (k + 1) * length // parts
        if hi <= lo:
            mid = min(length - 1, math.floor((k + 0.5) * length / parts))
            lo, hi = mid, mid + 1
        out.append(range(lo, hi))
    return out


def multicast_edges(
    src: tuple[int, ...], dsts: Iterable[tuple[int, ...]], shape: tuple[int, ...], wrap: tuple[bool, ...]
) -> tuple[list[tuple[tuple[int, ...], tuple[int, ...]]], int]:
    """The links of a multicast tree from coordinate ``src`` to every coordinate of ``dsts``, each link once,
    and the tree's depth (its longest branch, in hops).

    The tree is the union of the dimension-ordered routes ``GridDomain.path`` takes (last axis first, the
    shorter way round a torus axis): routes from one source agree on every prefix they share, so their
    union is a tree — one flow that forks where routes part (a mesh NoC's row/column multicast: along the
    source's row, then down every destination column). A link carries the bytes once, however many
    destinations lie behind it. Pure coordinates, so the cost model can lay trees on a chip's core grid
    that is no node of the hardware graph."""
    edges: dict[tuple[tuple[int, ...], tuple[int, ...]], None] = {}  # insertion-ordered set
    depth = 0
    for dst in dsts:
        before, hops = tuple(src), 0
        for here in route_coords(src, dst, shape, wrap):
            edges[(before, here)] = None
            before, hops = here, hops + 1
        depth = max(depth, hops)
    return list(edges), depth


def multicast_route(
    domain: GridDomain, src: str, dsts: Iterable[str], link_id: Callable[[str, str], int]
) -> tuple[dict[int, float], int]:
    """A multicast from node ``src`` to nodes ``dsts`` of ``domain`` as a flow's route: the link-usage dict
    {link id: 1} of its tree (``multicast_edges``), and its depth in hops. ``link_id(u, v)`` names the
    link from node u to its neighbour v (``HardwareGraph.link_between``). One flow on this route moves its
    bytes across every tree link once, so it finishes after depth × hop latency + bytes / the tree's
    slowest link — what a unicast over the longest branch would take alone."""
    coords = domain.coords()
    edges, depth = multicast_edges(coords[src], (coords[d] for d in dsts), domain.shape, domain.wrap)
    nodes = domain.nodes
    return {link_id(nodes[u], nodes[v]): 1.0 for u, v in edges}, depth
