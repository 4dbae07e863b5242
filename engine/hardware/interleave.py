"""Link usage of DRAM traffic interleaved over every port of a memory.

Runtimes place tensors page by page round-robin over all DRAM channels (Tenstorrent's interleaved buffers,
GPU address hashing), so each device reads a 1/P share of its bytes from every one of the memory's P
ports, whichever is nearest. The usage of one device's stream is therefore the *average* of its routes to
(or from) every port; a tensor group's is the sum over its members. One flow with that usage carries the
group's bytes: each link's share is exact, and no single busiest port caps the op unless it really is the
bottleneck of the average.

On a wrap-free device grid with dimension-ordered routing (x first), every route is a straight row
segment then a straight column segment, so the summed usage of N devices × P ports is a few difference
arrays and cumulative sums, not N·P route walks (a 4,096-tile wafer with 16 ports: ~65k routes). Elsewhere
(switches, gateways, tori) the routes are walked and cached by ``HardwareGraph.route``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

import numpy as np
from tilewright.engine.hardware.model import MemoryPort
from tilewright.engine.hardware.nearest import wrap_free_grid
from tilewright.engine.ir.hardware import Interleave, Memory

if TYPE_CHECKING:
    from tilewright.engine.hardware.builder import Instance
    from tilewright.engine.hardware.graph import HardwareGraph


class _GridLinks:
    """Link ids of a 2-D grid domain, by direction: ``east[r, c]`` is (r, c) → (r, c + 1), and so on (-1: none)."""

    def __init__(self, hg: HardwareGraph, nodes: np.ndarray) -> None:
        rows, cols = nodes.shape
        succ = hg.graph.succ
        self.east = np.full((rows, cols), -1, dtype=np.int64)
        self.west = np.full((rows, cols), -1, dtype=np.int64)
        self.south = np.full((rows, cols), -1, dtype=np.int64)
        self.north = np.full((rows, cols), -1, dtype=np.int64)
        for r in range(rows):
            for c in range(cols):
                u = nodes[r, c]
                out = succ[u]
                if c + 1 < cols and nodes[r, c + 1] in out:
                    self.east[r, c] = out[nodes[r, c + 1]]["id"]
                if c > 0 and nodes[r, c - 1] in out:
                    self.west[r, c] = out[nodes[r, c - 1]]["id"]
                if r + 1 < rows and nodes[r + 1, c] in out:
                    self.south[r, c] = out[nodes[r + 1, c]]["id"]
                if r > 0 and nodes[r - 1, c] in out:
                    self.north[r, c] = out[nodes[r - 1, c]]["id"]


class PortSpread:
    """Summed link usage of devices spreading their DRAM bytes evenly over every port of a memory."""

    def __init__(self, hg: HardwareGraph) -> None:
        self.hg = hg
        self._grids: dict[int, tuple[Instance | None, _GridLinks | None]] = {}

    def usage(self, devices: Sequence[int], memory_name: str, read: bool = True) -> dict[int, float]:
        """Links crossed, with multiplicity, when each device moves one byte split evenly over all ports of
        its ``memory_name`` (``read``: from the ports to the device, else towards the ports)."""
        by_ports: dict[tuple[int, ...], list[int]] = {}
        for d in devices:
            ports = self.hg.ports_of(d, memory_name)
            by_ports.setdefault(tuple(p.index for p in ports), []).append(d)
        out: dict[int, float] = {}
        for key, devs in by_ports.items():
            ports = [self.hg.memory_ports[i] for i in key]
            counts = self._grid_counts(devs, ports, read)
            if counts is None:
                counts = self._walked_counts(devs, ports, read)
            share = 1.0 / len(ports)
            for lk, n in counts.items():
                out[lk] = out.get(lk, 0.0) + n * share
        return out

    # --- the general case: walk every route -----------------------------------------------------------

    def _walked_counts(self, devs: list[int], ports: list[MemoryPort], read: bool) -> dict[int, float]:
        hg = self.hg
        counts: dict[int, float] = {}
        for d in devs:
            node = hg.devices[d].node
            for p in ports:
                for lk in hg.route(p.node, node) if read else hg.route(node, p.node):
                    counts[lk] = counts.get(lk, 0.0) + 1.0
        return counts

    # --- wrap-free 2-D grids: difference arrays ------------------------------------------------------------

    def _grid(self, ports: list[MemoryPort]) -> tuple[Instance | None, _GridLinks | None]:
        key = ports[0].index
        hit = self._grids.get(key)
        if hit is None:
            hg = self.hg
            attached = [a for p in ports for a in p.attached]
            inst = None
            if all(p.ctrl is not None for p in ports) and all(hg.is_device(a) for a in attached):
                inst = wrap_free_grid(hg, attached)
            links = None
            if inst is not None and inst.fabric.domain.nodes.ndim == 2:
                links = self._links_of(inst)
            else:
                inst = None
            hit = self._grids[key] = (inst, links)
        return hit

    def _links_of(self, inst: Instance) -> _GridLinks:
        for (other, links) in self._grids.values():
            if other is inst and links is not None:
                return links
        return _GridLinks(self.hg, inst.fabric.domain.nodes)

    def _grid_counts(self, devs: list[int], ports: list[MemoryPort], read: bool) -> dict[int, float] | None:
        inst, links = self._grid(ports)
        if inst is None or links is None or not all(inst.first <= d < inst.end for d in devs):
            return None
        hg = self.hg
        domain = inst.fabric.domain
        rows, cols = domain.shape
        dev = np.array([domain.coord(hg.devices[d].node) for d in devs], dtype=np.int64)  # (N, 2)
        # every attached device of every port, with the port it belongs to; the entry a route takes is the
        # port's nearest attached device (the first one on a tie), as HardwareGraph.route picks it
        att = np.array([domain.coord(a) for p in ports for a in p.attached], dtype=np.int64)  # (A, 2)
        owner = np.array([k for k, p in enumerate(ports) for _ in p.attached], dtype=np.int64)
        dist = np.abs(dev[:, None, :] - att[None, :, :]).sum(axis=2)  # (N, A)
        entry = np.empty((len(devs), len(ports)), dtype=np.int64)
        for k in range(len(ports)):
            cols_k = np.flatnonzero(owner == k)
            entry[:, k] = cols_k[np.argmin(dist[:, cols_k], axis=1)]
        a = att[entry.ravel()]  # (N·P, 2): the entry device of each (device, port) pair
        d = np.repeat(dev, len(ports), axis=0)
        if read:  # from the port: along the entry's row to the device's column, then down that column
            h_row, h_from, h_to = a[:, 0], a[:, 1], d[:, 1]
            v_col, v_from, v_to = d[:, 1], a[:, 0], d[:, 0]
        else:  # towards the port: along the device's row to the entry's column, then along that column
            h_row, h_from, h_to = d[:, 0], d[:, 1], a[:, 1]
            v_col, v_from, v_to = a[:, 1], d[:, 0], a[:, 0]
        counts: dict[int, float] = {}
        _add(counts, _runs(h_row, h_from, h_to, rows, cols, axis=1), links.east, links.west)
        _add(counts, _runs(v_col, v_from, v_to, cols, rows, axis=0), links.south, links.north)
        # the attach wire and the port's channel, once per (device, port) pair
        pair_port = np.tile(np.arange(len(ports)), len(devs))
        entries = np.stack([pair_port, entry.ravel()], axis=1)
        uniq, n = np.unique(entries, axis=0, return_counts=True)
        attached_nodes = [a for p in ports for a in p.attached]
        for (k, e), times in zip(uniq.tolist(), n.tolist(), strict=True):
            p = ports[k]
            wire = hg.link_between(p.ctrl, attached_nodes[e]) if read else hg.link_between(attached_nodes[e], p.ctrl)
            channel = p.channel_out if read else p.channel_in
            counts[wire] = counts.get(wire, 0.0) + times
            counts[channel] = counts.get(channel, 0.0) + times
        return counts


def _runs(line: np.ndarray, start: np.ndarray, stop: np.ndarray, lines: int, length: int, axis: int):
    """Per-link traversal counts of straight runs along lines of a grid: (forward, backward) arrays shaped
    like the grid, forward[l, i] counting the link i → i + 1 on line l, backward[l, i] the link i → i − 1."""
    fwd = np.zeros((lines, length + 1), dtype=np.int64)
    bwd = np.zeros((lines, length + 1), dtype=np.int64)
    up = stop > start
    np.add.at(fwd, (line[up], start[up]), 1)
    np.add.at(fwd, (line[up], stop[up]), -1)
    down = stop < start
    np.add.at(bwd, (line[down], stop[down] + 1), 1)
    np.add.at(bwd, (line[down], start[down] + 1), -1)
    fwd = np.cumsum(fwd, axis=1)[:, :length]
    bwd = np.cumsum(bwd, axis=1)[:, :length]
    if axis == 0:  # runs along columns: lines are columns, positions are rows
        return fwd.T, bwd.T
    return fwd, bwd


def _add(counts: dict[int, float], runs: tuple[np.ndarray, np.ndarray], fwd_ids: np.ndarray, bwd_ids: np.ndarray):
    for load, ids in zip(runs, (fwd_ids, bwd_ids), strict=True):
        nz = np.flatnonzero(load)
        if len(nz) == 0:
            continue
        link = ids.ravel()[nz]
        if (link < 0).any():
            raise ValueError("a dimension-ordered route crosses a grid link that does not exist")
        for lk, n in zip(link.tolist(), load.ravel()[nz].tolist(), strict=True):
            counts[lk] = counts.get(lk, 0.0) + n


_SPREADS: WeakKeyDictionary = WeakKeyDictionary()


def stream_usage(hg: HardwareGraph, devices: Sequence[int], memory: Memory) -> dict[int, float]:
    """Links crossed, with multiplicity, when each of ``devices`` reads one byte from the ported memory
    ``memory``: spread over every port (``interleave: interleaved``) or from its nearest port (``nearest``).
    DRAM streams are timed as reads (port → device): reads dominate an op's DRAM traffic, and a read and
    a write of one port use its two directions, so the read direction is the one that binds."""
    if memory.interleave is Interleave.interleaved:
        spread = _SPREADS.get(hg)
        if spread is None:
            spread = _SPREADS[hg] = PortSpread(hg)
        return spread.usage(devices, memory.name, read=True)
    usage: dict[int, float] = {}
    for d in devices:
        _, route = hg.memory_route(d, memory.name, read=True)
        for lk in route:
            usage[lk] = usage.get(lk, 0.0) + 1.0
    return usage
