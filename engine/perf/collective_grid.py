"""Collectives on grids (meshes, tori, rings, meshes of meshes), chosen by cost for the group's topology.

A group whose devices all sit on one grid domain (``hardware/grid.GridDomain``: chips of a Galaxy, tiles of
a wafer) gets every algorithm that fits its shape, each costed on the real links, and the cheapest wins:

- **line** (bidirectional): the members in snake order, no closing route. A reduce-scatter or all-gather
  moves (N-1)/N of the tensor through the end links, one shard per step (tt-metal's CCL report, S8,
  "bytes through the bottleneck link"). An open axis never pays a ring-closing route.
- **ring** (bidirectional, half the data each way): only where every step, the closing one included, is as
  short as the others — a wrap link on a torus axis, or a Hamiltonian cycle of neighbour links on a mesh
  with an even side (the 2 × 4 LoudBox's 8-chip ring).
- **mesh / torus** (bucket, row then column): reduce-scatter along one axis, then along the next on
  1/size of the data, all-gather back in reverse; each axis a ring where it wraps, else a line. On a
  full torus this is the bucket algorithm as before.
- **tree**: small all-reduces (< 64 KiB, > 2 members), latency-bound, as before.
- **direct** (a persistent runtime only, ``Compute.runtime_ccl``): one-shot, every member writes straight to
  every peer over its route, and the sums are local: an all-reduce all-gathers each member's whole tensor and
  adds the copies (tt-metal's all_reduce_async, whose persistent buffer holds one slice per device), a
  reduce-scatter writes each shard to its owner (llama_reduce_scatter). More bytes through the bottleneck link,
  one operation's fixed costs and no store-and-forward: it wins on the small tensors of a decode step. The local
  sums are not timed (S8, 'Introduction': that arithmetic is far cheaper than the data movement).
- **hierarchical**: when the group spans children (chips, dies) whose own fabric differs from the links
  between them: reduce-scatter inside each child, all-reduce of the 1/q shard across children (one rail
  per local position), all-gather inside.

All-reduce is reduce-scatter then all-gather; where both use the same links equally (rings, 2-member lines)
they form one phase of twice the bytes, as the ring always did. Fixed costs per operation come from the
fabric (``collective_costs``).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tilewright.engine.hardware import fabrics as fab
from tilewright.engine.hardware.builder import lca
from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.hardware.grid import GridDomain
from tilewright.engine.perf.collective_costs import DIRECT, OpCosts, costs_of, make_phase
from tilewright.engine.perf.collective_phase import (
    Collective,
    Kind,
    Phase,
    merge_collectives,
    merge_phases,
    ring_usage,
    route_latency,
)

SMALL_MESSAGE_BYTES = 64 * 1024
REDUCTIONS = ("all-reduce", "reduce-scatter", "all-gather")
TIE = 1e-9  # relative: congruent groups must pick the same algorithm despite rounding


@dataclass(frozen=True)
class Grid:
    """The grid domain a group lives on, and routing helpers in its coordinates."""

    hw: HardwareGraph
    domain: GridDomain

    def coord(self, d: int) -> tuple[int, ...]:
        return self.domain.coord(self.hw.devices[d].node)

    def hops(self, a: int, b: int) -> int:
        return self.domain.distance(self.hw.devices[a].node, self.hw.devices[b].node)

    def route(self, a: int, b: int) -> list[int]:
        return self.hw.device_route(a, b)


def grid_of(hw: HardwareGraph, group: list[int]) -> Grid | None:
    """The outermost grid of devices holding every member (None: a switch or graph joins them)."""
    insts = [hw.instance_of(hw.devices[d].node) for d in group]
    top = insts[0]
    for other in insts[1:]:
        top, _, _ = lca(top, other)
    found = None
    inst = top
    while inst is not None:
        f = inst.fabric
        if isinstance(f, fab.GridFabric) and f.direct:
            found = f.domain
        inst = inst.parent
    return Grid(hw, found) if found is not None else None


# --- orders and shapes ---------------------------------------------------------------------------------


def snake_order(hw: HardwareGraph, group: list[int]) -> list[int]:
    """Snake order over grid coordinates keeps neighbours adjacent on meshes; else as given."""
    coords = [hw.devices[d].coord for d in group]
    if any(c is None or len(c) < 2 for c in coords):
        return list(group)

    def key(d: int) -> tuple[int, ...]:
        c = hw.devices[d].coord
        assert c is not None
        row, col = c[0], c[1]
        return (*c[2:], row, col if row % 2 == 0 else -col)

    return sorted(group, key=key)


def _box(g: Grid, members: list[int]) -> tuple[list[int], dict[tuple[int, ...], int]] | None:
    """(sizes per axis, rank tuple → member) when the members fill a box of grid coordinates."""
    coords = {m: g.coord(m) for m in members}
    ndim = len(next(iter(coords.values())))
    values = [sorted({c[i] for c in coords.values()}) for i in range(ndim)]
    sizes = [len(v) for v in values]
    if math.prod(sizes) != len(members):
        return None
    rank = [{v: i for i, v in enumerate(vs)} for vs in values]
    return sizes, {tuple(rank[i][c[i]] for i in range(ndim)): m for m, c in coords.items()}


def _axis_lines(box: dict[tuple[int, ...], int], axis: int) -> list[list[int]]:
    """The lines of members along ``axis``, each in coordinate order."""
    lines: dict[tuple, list[int]] = defaultdict(list)
    for idx in sorted(box):
        lines[idx[:axis] + idx[axis + 1 :]].append(box[idx])
    return list(lines.values())


def _hamiltonian(box: dict[tuple[int, ...], int], sizes: list[int]) -> list[int] | None:
    """A cycle through every member of a 2-D box using neighbour steps only: along the first row, a snake
    over the other columns, back up the first column. Exists when a side is even."""
    live = [i for i, n in enumerate(sizes) if n > 1]
    if len(live) != 2:
        return None
    a, b = live
    rows, cols = sizes[a], sizes[b]
    flip = rows % 2 == 1
    if flip:
        if cols % 2:
            return None
        rows, cols = cols, rows

    def at(r: int, c: int) -> int:
        idx = [0] * len(sizes)
        idx[a], idx[b] = (c, r) if flip else (r, c)
        return box[tuple(idx)]

    cycle = [at(0, c) for c in range(cols)]
    for r in range(1, rows):
        span = range(cols - 1, 0, -1) if r % 2 else range(1, cols)
        cycle += [at(r, c) for c in span]
    cycle += [at(r, 0) for r in range(rows - 1, 0, -1)]
    return cycle


def _snake(box: dict[tuple[int, ...], int], sizes: list[int]) -> list[int]:
    """Boustrophedon over the box in rank space (strided groups included): along the last axis of size
    > 1, back and forth, row after row."""
    last = max(i for i, n in enumerate(sizes) if n > 1)
    rows: dict[tuple, list[tuple]] = defaultdict(list)
    for idx in sorted(box, key=lambda i: (*i[:last], *i[last + 1 :], i[last])):
        rows[idx[:last] + idx[last + 1 :]].append(idx)
    order = []
    for r, (_, line) in enumerate(sorted(rows.items())):
        order += [box[i] for i in (line if r % 2 == 0 else line[::-1])]
    return order


def cyclic(g: Grid, order: list[int]) -> bool:
    """Every step of the cycle, the closing one included, as short as the others (so no long way back)."""
    steps = {g.hops(a, b) for a, b in zip(order, order[1:] + order[:1], strict=True)}
    return len(steps) == 1


# --- phases ---------------------------------------------------------------------------------------------


def fed(shards: float, op: str, costs: OpCosts | None) -> float:
    """A line all-gather link's usage, in shards, when ``shards`` members' shards cross it one way.

    tt-metal's line all-gather multicasts: each member's worker core injects its own shard once per direction
    (one worker per link) and the routers forward the others (S8 'Line versus ring'; ttnn
    all_gather_multicast_factory.cpp, ``num_workers_per_link = 1``). Where one worker cannot keep a link fed
    (``OpCosts.fill_workers`` > 1: on Wormhole two workers saturate a link and one cannot, ttnn
    all_gather_unicast_factory.cpp), a link whose shards come from fewer workers than that runs at
    shards / fill_workers of its bandwidth: it takes as long as ``fill_workers`` shards would. Only the
    2-member line is short enough for this to bind (its one link per direction carries one shard, where a longer
    line's end link carries N - 1 >= fill_workers). A reduce-scatter runs 2 to 8 workers per direction and link
    through a fabric mux (ttnn reduce_scatter_program_utils.cpp, ``reduce_scatter_default_workers``) and the ring
    all-gather two per direction on Wormhole (all_gather_unicast_factory.cpp), so neither is limited."""
    if op != "ag" or costs is None or costs.fill_workers <= 1 or shards <= 0:
        return shards
    return max(shards, costs.fill_workers)


def line_phase(g: Grid, order: list[int], shard: float, op: str, costs: OpCosts | None) -> Phase:
    """A bidirectional line: every member's shard travels to (all-gather) or from (reduce-scatter) every
    other member; the link after position k carries k + 1 shards one way and N - 1 - k the other (an all-gather's
    link fed by too few workers counts as more, ``fed``)."""
    hw = g.hw
    n = len(order)
    usage: Counter = Counter()
    hop = 0.0
    for k in range(n - 1):
        a, b = order[k], order[k + 1]
        fwd, back = g.route(a, b), g.route(b, a)
        right, left = (k + 1, n - 1 - k) if op == "ag" else (n - 1 - k, k + 1)
        for lk in fwd:
            usage[lk] += right
        for lk in back:
            usage[lk] += left
        hop = max(hop, route_latency(hw, fwd), route_latency(hw, back))
    usage = Counter({lk: fed(u, op, costs) for lk, u in usage.items()})
    return make_phase(hw, usage, shard, hop, n - 1, n - 1, op, costs)  # type: ignore[arg-type]


def ring_phase_ordered(
    hw: HardwareGraph,
    ring: list[int],
    steps: float,
    volume: float,
    op: str = "ag",
    costs: OpCosts | None = None,
    diameter: float | None = None,
) -> Phase:
    """``volume`` bytes per member round a bidirectional ring in this order (half each way: links are full
    duplex); ``steps`` hops of latency by default."""
    usage, hop = ring_usage(hw, ring)
    if len(ring) > 2:
        usage.update(ring_usage(hw, ring[::-1])[0])
        volume /= 2
    else:  # two members are a line of one link pair: each direction carries one member's shard (``fed``)
        usage = Counter({lk: fed(u, op, costs) for lk, u in usage.items()})
    d = len(ring) // 2 if diameter is None else diameter
    return make_phase(hw, usage, volume, hop, steps, d, op, costs)  # type: ignore[arg-type]


def _ops(kind: Kind, rs: Callable[[], Phase], ag: Callable[[], Phase]) -> tuple[Phase, ...]:
    """Reduce-scatter, all-gather, or both for an all-reduce (one phase of twice the bytes when both load
    the same links equally, as on a ring)."""
    if kind == "reduce-scatter":
        return (rs(),)
    if kind == "all-gather":
        return (ag(),)
    a, b = rs(), ag()
    if a.usage == b.usage:
        return (Phase(a.usage, a.bytes_per_member + b.bytes_per_member, a.latency_s + b.latency_s),)
    return (a, b)


def _one_line(g: Grid, kind: Kind, order: list[int], nbytes: float, ring: bool) -> tuple[Phase, ...]:
    hw, n = g.hw, len(order)
    costs = costs_of(hw, order)
    if ring:
        vol = (n - 1) / n * nbytes
        return _ops(
            kind,
            lambda: ring_phase_ordered(hw, order, n - 1, vol, "rs", costs),
            lambda: ring_phase_ordered(hw, order, n - 1, vol, "ag", costs),
        )
    return _ops(
        kind,
        lambda: line_phase(g, order, nbytes / n, "rs", costs),
        lambda: line_phase(g, order, nbytes / n, "ag", costs),
    )


def _bucket(g: Grid, kind: Kind, axes_lines: list[list[list[int]]], nbytes: float) -> tuple[str, tuple[Phase, ...]]:
    """Reduce-scatter along each axis in turn (data shrinking by its size), all-gather back in reverse;
    every line of an axis at once; a ring where the line closes on itself, else a line."""
    hw = g.hw
    scatter: list[Phase] = []
    gather: list[Phase] = []
    size = nbytes
    rings = True
    for lines in axes_lines:
        n = len(lines[0])
        if all(cyclic(g, line) for line in lines):
            vol = (n - 1) / n * size
            orders = [snake_order(hw, line) for line in lines]
            rs = merge_phases([ring_phase_ordered(hw, o, n - 1, vol, "rs", costs_of(hw, o)) for o in orders])
            ag = merge_phases([ring_phase_ordered(hw, o, n - 1, vol, "ag", costs_of(hw, o)) for o in orders])
        else:
            rings = False
            rs = merge_phases([line_phase(g, line, size / n, "rs", costs_of(hw, line)) for line in lines])
            ag = merge_phases([line_phase(g, line, size / n, "ag", costs_of(hw, line)) for line in lines])
        scatter.append(rs)
        gather.insert(0, ag)
        size /= n
    name = "torus" if rings else "mesh"
    if kind == "all-reduce":
        return name, tuple(scatter + gather)
    return name, tuple(scatter if kind == "reduce-scatter" else gather)


def _tree(g: Grid, order: list[int], nbytes: float) -> tuple[Phase, ...]:
    """Binomial tree over the snake order: 2·log2(p) latency-bound steps of the whole message. The
    per-step latency is that of a neighbour step (the closing one only where the order is a cycle)."""
    hw, p = g.hw, len(order)
    pairs = list(zip(order, order[1:] + order[:1], strict=True))
    if not cyclic(g, order):
        pairs = pairs[:-1]
    hop = max(route_latency(hw, hw.device_route(a, b)) for a, b in pairs)
    usage: Counter = Counter()
    for i in range(1, p):  # binomial tree edges, each crossed once up and once down
        parent = order[(i - 1) // 2]
        usage.update(hw.device_route(order[i], parent))
        usage.update(hw.device_route(parent, order[i]))
    steps = 2 * math.ceil(math.log2(p))
    return (make_phase(hw, usage, nbytes, hop, steps, steps / 2, "tree", costs_of(hw, order)),)


# --- candidates and choice -------------------------------------------------------------------------------


def direct_phase(g: Grid, members: list[int], nbytes: float, costs: OpCosts | None) -> Phase:
    """Every member sends ``nbytes`` to every other member straight over its route, all at once: the link
    usage counts the pairs whose route crosses it; one crossing of the group's diameter (the farthest pair)
    at the slowest neighbour hop's latency."""
    hw = g.hw
    usage: Counter = Counter()
    hop = 0.0
    diameter = 0
    for a in members:
        for b in members:
            if a == b:
                continue
            route = g.route(a, b)
            usage.update(route)
            diameter = max(diameter, g.hops(a, b))
            if g.hops(a, b) == 1:
                hop = max(hop, route_latency(hw, route))
    if hop == 0.0 and diameter:  # no two members adjacent (a strided group): the mean hop of the farthest pair
        far = max(((a, b) for a in members for b in members if a != b), key=lambda p: g.hops(*p))
        hop = route_latency(hw, g.route(*far)) / diameter
    return make_phase(hw, usage, nbytes, hop, diameter, diameter, "direct", costs)


def _direct(g: Grid, kind: Kind, members: list[int], nbytes: float, costs: OpCosts | None) -> Collective | None:
    """A persistent runtime's one-shot algorithm for ``kind`` (module notes), None for other kinds. An
    all-reduce gathers every member's whole tensor as the fabric's all-gather carries it (a line multicasts, the
    routers forwarding each member's data once across every link: S8 'Line versus ring'; a ring relays it both
    ways), the cheapest such gather; a reduce-scatter writes each of its shards to their owner (``direct_phase``:
    a shard for each peer, no multicast since every peer's differs)."""
    n = len(members)
    if kind == "all-reduce":
        gathers = [c for c in _fitting(g, "all-gather", members, nbytes * n)
                   if costs is None or costs.offers(c.algorithm)]
        if not gathers:
            return None
        best = min(gathers, key=lambda c: c.time(g.hw))
        return Collective(kind, f"{DIRECT}, {best.algorithm} all-gather", best.phases)
    if kind == "reduce-scatter":
        return Collective(kind, DIRECT, (direct_phase(g, members, nbytes / n, costs),))
    return None


def _flat_candidates(g: Grid, kind: Kind, members: list[int], nbytes: float) -> Iterator[Collective]:
    """Every non-hierarchical algorithm that fits the group's shape and that the fabric offers (a persistent
    runtime's ``direct`` among them)."""
    costs = costs_of(g.hw, members)
    fitting = list(_fitting(g, kind, members, nbytes))
    direct = _direct(g, kind, members, nbytes, costs) if costs is not None and costs.persistent else None
    if direct is not None:
        fitting.append(direct)
    offered = [c for c in fitting if costs is None or costs.offers(c.algorithm)]
    yield from offered or fitting  # a runtime that offers nothing that fits still moves the data somehow


def _fitting(g: Grid, kind: Kind, members: list[int], nbytes: float) -> Iterator[Collective]:
    """Every non-hierarchical algorithm that fits the group's shape, bucket first (ties keep it)."""
    hw = g.hw
    shape = _box(g, members)
    if shape is not None:
        sizes, box = shape
        live = [i for i, n in enumerate(sizes) if n > 1]
        if len(live) >= 2:
            lines = [_axis_lines(box, i) for i in live]
            seen = set()
            for axes in (lines, lines[::-1]):
                name, phases = _bucket(g, kind, axes, nbytes)
                label = name if axes is lines else f"{name}, last axis first"
                if label not in seen:
                    seen.add(label)
                    yield Collective(kind, label, phases)
        orders = [o for o in (_hamiltonian(box, sizes),) if o is not None]
        snake = _snake(box, sizes) if len(live) >= 2 else _axis_lines(box, live[0])[0]
    else:
        snake = snake_order(hw, members)
        orders = []
    for order in [snake, *orders]:
        if len(order) > 2 and cyclic(g, order):
            yield Collective(kind, "ring", _one_line(g, kind, order, nbytes, ring=True))
            break
    yield Collective(kind, "line", _one_line(g, kind, snake, nbytes, ring=len(snake) == 2))
    if kind == "all-reduce" and nbytes < SMALL_MESSAGE_BYTES and len(members) > 2:
        yield Collective(kind, "tree", _tree(g, snake, nbytes))


def _domains(g: Grid, members: list[int]) -> list[list[int]] | None:
    """Members per child instance (chip, die), each in coordinate order so equal positions form rails;
    None unless the group spans several children of equal size whose own links differ from the ones
    between them."""
    hw = g.hw
    by: dict[str, list[int]] = defaultdict(list)
    for m in members:
        inst = hw.instance_of(hw.devices[m].node)
        by[inst.parent.path if inst.parent is not None else ""].append(m)
    doms = [sorted(v, key=g.coord) for v in by.values()]
    if len(doms) < 2 or len({len(d) for d in doms}) != 1 or len(doms[0]) < 2:
        return None
    if hw.common_level(doms[0][0], doms[0][1]) == hw.common_level(doms[0][0], doms[1][0]):
        return None
    return doms


def _concurrent(g: Grid, kind: Kind, groups: list[list[int]], nbytes: float) -> Collective:
    """The same algorithm on disjoint groups at once: the cheapest for the first group that every group
    can run, merged phase by phase."""
    ranked = sorted(_flat_candidates(g, kind, groups[0], nbytes), key=lambda c: c.time(g.hw))
    for cand in ranked:
        parts = [cand]
        for grp in groups[1:]:
            match = [c for c in _flat_candidates(g, kind, grp, nbytes) if c.algorithm == cand.algorithm]
            if not match or len(match[0].phases) != len(cand.phases):
                break
            parts.append(match[0])
        else:
            return merge_collectives(kind, parts)
    raise ValueError("no common algorithm for concurrent groups")  # pragma: no cover - line always fits


def concurrent(g: Grid, kind: Kind, groups: list[list[int]], nbytes: float) -> Collective:
    """Disjoint groups on this grid running one collective at once (every line of one axis of a 2-D
    tensor group): the cheapest flat algorithm they can all run, merged phase by phase."""
    return _concurrent(g, kind, groups, nbytes)


def _hierarchical(g: Grid, kind: Kind, members: list[int], nbytes: float) -> Collective | None:
    doms = _domains(g, members)
    if doms is None:
        return None
    q = len(doms[0])
    rails = [[d[i] for d in doms] for i in range(q)]
    shard = nbytes / q
    phases: list[Phase] = []
    if kind in ("all-reduce", "reduce-scatter"):
        phases += _concurrent(g, "reduce-scatter", doms, nbytes).phases
    phases += _concurrent(g, kind, rails, shard).phases
    if kind in ("all-reduce", "all-gather"):
        phases += _concurrent(g, "all-gather", doms, nbytes).phases
    return Collective(kind, "hierarchical", tuple(phases))


def grid_candidates(g: Grid, kind: Kind, members: list[int], nbytes: float) -> list[Collective]:
    """Every algorithm the group's shape and fabric allow, in preference order for ties. Each one's time is
    linear in ``nbytes`` (its structure does not depend on the size, except that the tree is only offered
    below ``SMALL_MESSAGE_BYTES``), so the cheapest at any size is the lower envelope of these lines."""
    cands = list(_flat_candidates(g, kind, members, nbytes))
    costs = costs_of(g.hw, members)
    hier = _hierarchical(g, kind, members, nbytes) if costs is None or costs.offers("hierarchical") else None
    if hier is not None:
        cands.append(hier)
    return cands


def grid_collective(g: Grid, kind: Kind, members: list[int], nbytes: float, algorithm: str | None = None) -> Collective:
    """The cheapest algorithm for this group on its grid (``algorithm``: only those whose name starts so)."""
    cands = grid_candidates(g, kind, members, nbytes)
    if algorithm:
        cands = [c for c in cands if c.algorithm.startswith(algorithm)]
        if not cands:
            raise ValueError(f"algorithm {algorithm!r} does not fit this group")
    best, best_t = cands[0], cands[0].time(g.hw)
    for c in cands[1:]:
        t = c.time(g.hw)
        if t < best_t * (1 - TIE):
            best, best_t = c, t
    return best
