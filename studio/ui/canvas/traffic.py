"""The canvas's "Traffic by collective" overlay: each link drawn in the colours of what it carried — the expert
all-to-all in its Gantt yellow, the data-parallel all-reduce in green, the context ring in pink — so the
all-to-all's flows stand apart from the all-reduce's on the hardware itself.

What a link carried comes from the run's Gantt link lanes (``studio.model.link_carriage``: busy seconds per
category); this module only gathers those numbers onto the places the heat map already uses
(``canvas.heat.LinkPlaces``: a switch spoke, or a pair of neighbouring cells of a grid), summing both
directions of a link and, on a bundled spoke, every link it stands for. A spoke shows the shares stacked
along its length; a mesh link is one short gap between cells, so it takes the colour of the category that
kept it busy longest. Pure Python, no Qt.
"""

from __future__ import annotations

from tilewright.engine.results import CATEGORIES
from tilewright.engine.results.result import Result
from tilewright.studio.model.link_carriage import LinkCarriage
from tilewright.studio.ui.canvas.heat import LinkKey, LinkPlaces

Split = dict[str, float]  # busy seconds per category


def carried_by_key(result: Result, carriage: LinkCarriage) -> dict[LinkKey, Split]:
    """Each recorded link's split, keyed (src, dst) as the canvas places links."""
    out: dict[LinkKey, Split] = {}
    for series in result.link_utilisation:
        split = carriage.by_link.get(series.name)
        if split:
            out[(series.src, series.dst)] = split
    return out


def _add(into: Split, split: Split) -> None:
    for category, seconds in split.items():
        into[category] = into.get(category, 0.0) + seconds


def spoke_traffic(
    places: LinkPlaces, carried: dict[LinkKey, Split], bundled: bool = False
) -> dict[tuple[str, int], Split]:
    """Per switch spoke (grid path, instance; instance −1 when the spokes are bundled per grid), the busy
    seconds of every link drawn on it, both directions together."""
    out: dict[tuple[str, int], Split] = {}
    for key, (path, cell) in places.spokes.items():
        if key in carried:
            _add(out.setdefault((path, -1 if bundled else cell), {}), carried[key])
    return out


def grid_link_traffic(places: LinkPlaces, path: str, carried: dict[LinkKey, Split]) -> dict[tuple[int, int], Split]:
    """Per neighbour pair of one grid, the busy seconds of both its directions."""
    out: dict[tuple[int, int], Split] = {}
    for key, pair in places.mesh.get(path, {}).items():
        if key in carried:
            _add(out.setdefault(pair, {}), carried[key])
    return out


def shares(split: Split) -> list[tuple[str, float]]:
    """(category, fraction of the busy time), in the timeline's category order so that a colour always
    sits at the same end of a spoke."""
    total = sum(split.values())
    if total <= 0:
        return []
    return [(c, split[c] / total) for c in sorted(split, key=CATEGORIES.index) if split[c] > 0]


def dominant(split: Split) -> str | None:
    """The category that kept the link busy longest (ties: the earlier in the timeline's order)."""
    if not split:
        return None
    return min(split, key=lambda c: (-split[c], CATEGORIES.index(c)))


def drawn_categories(places: LinkPlaces, carried: dict[LinkKey, Split]) -> set[str]:
    """The categories some link drawn at this level (a spoke, a mesh link, a memory port) carried."""
    drawn: set[str] = set()
    for key in (*places.spokes, *places.ports, *(k for mesh in places.mesh.values() for k in mesh)):
        drawn.update(c for c, s in carried.get(key, {}).items() if s > 0)
    return drawn


def outside_categories(places: LinkPlaces, carried: dict[LinkKey, Split]) -> set[str]:
    """The categories some link leaving the opened level carried (a pipeline send out of an opened node)."""
    return {c for key in places.outside for c, s in carried.get(key, {}).items() if s > 0}


def inside_categories(places: LinkPlaces, carried: dict[LinkKey, Split]) -> dict[str, set[str]]:
    """Per category, the grids (paths) whose cells hold links that carried it, both ends inside one cell:
    traffic the level cannot draw (a node's NVSwitch spokes when the node is one cell) but opening the cell
    shows. The key names where it is instead of listing a colour no drawn link wears."""
    out: dict[str, set[str]] = {}
    for key, (path, _cell) in places.inside.items():
        for category, seconds in carried.get(key, {}).items():
            if seconds > 0:
                out.setdefault(category, set()).add(path)
    return out
