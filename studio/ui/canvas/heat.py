"""The heat map's numbers for the level on screen: device busy shares and link utilisation of a run,
at the shared time cursor or averaged over the iteration, placed on the canvas's cells and links.

The numbers themselves come from ``studio.model.metrics`` (the same ones the result views plot),
devices from whatever timeline lanes the run maps to them (per device for the event engine, per pipeline
stage for the analytic one); what a run does not report (the analytic engine has no link series) comes
back as ``HeatFrame.notes`` for the legend to say, rather than a map that is silently blank. This
module only decides *where* each link of the hardware graph is drawn at the current level: between
two cells of a grid (a die-to-die link on the wafer), on a switch spoke, or on an edge-memory port.
Pure Python and numpy, no Qt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tilewright.engine.results.result import Result
from tilewright.studio.model.level_cells import GridCells
from tilewright.studio.model.metrics import (
    average_device_activity,
    average_link_utilisation,
    device_activity_at,
    link_utilisation_at,
    missing_data_notes,
    time_span,
)

LinkKey = tuple[str, str]


@dataclass
class LinkPlaces:
    """Where each link of the run is drawn at one level."""

    mesh: dict[str, dict[LinkKey, tuple[int, int]]] = field(default_factory=dict)  # grid → (cell a, cell b)
    spokes: dict[LinkKey, tuple[str, int]] = field(default_factory=dict)  # switch spoke of (grid, cell)
    ports: dict[LinkKey, str] = field(default_factory=dict)  # edge-memory port name, "dram@west[0]"
    # links with both ends inside one cell (NVSwitch spokes inside a node shown as one cell): not drawn here,
    # but the key can say where their traffic is — open that cell to see it
    inside: dict[LinkKey, tuple[str, int]] = field(default_factory=dict)
    outside: set[LinkKey] = field(default_factory=set)  # links with an end outside the opened level


def place_links(keys: list[LinkKey], cells: dict[str, GridCells], level_node: str) -> LinkPlaces:
    depth = level_node.count("/") + 2
    cell_of = {node: (path, i) for path, gc in cells.items() for i, node in enumerate(gc.nodes)}
    prefix = level_node + "/"
    out = LinkPlaces()

    def where(node: str) -> tuple[str, Any]:
        if not node.startswith(prefix):
            return "outside", None
        head = "/".join(node.split("/", depth)[:depth])
        if head in cell_of:
            return "cell", cell_of[head]
        name = head[len(prefix):]
        return ("port", name) if "@" in name else ("level", name)

    for key in keys:
        (ka, a), (kb, b) = where(key[0]), where(key[1])
        if ka == kb == "cell" and a[0] == b[0] and a[1] != b[1]:
            out.mesh.setdefault(a[0], {})[key] = (min(a[1], b[1]), max(a[1], b[1]))
        elif {ka, kb} == {"cell", "level"}:
            out.spokes[key] = a if ka == "cell" else b
        elif "port" in (ka, kb):
            out.ports[key] = a if ka == "port" else b
        elif ka == kb == "cell" and a == b:
            out.inside[key] = a
        elif "outside" in (ka, kb):
            out.outside.add(key)
    return out


@dataclass
class HeatFrame:
    """Heat at one moment (or averaged): per device of the layout, and per link key."""

    devices: np.ndarray  # 0…1 per device index, NaN where the run says nothing
    links: dict[LinkKey, float]
    label: str  # "at 1.23 s" or "averaged over 4.28 s"
    notes: list[str] = field(default_factory=list)  # what the run does not report ("no link data …")


def heat_frame(result: Result, device_nodes: list[str], t: float | None) -> HeatFrame:
    """Busy share of every device and utilisation of every link, at ``t`` or averaged (``t`` None)."""
    from tilewright.studio.units import SECONDS, format_value

    if t is None:
        activity, links = average_device_activity(result), average_link_utilisation(result)
        label = f"averaged over {format_value(time_span(result), SECONDS)}"
    else:
        activity, links = device_activity_at(result, t), link_utilisation_at(result, t)
        label = f"at {format_value(t, SECONDS)}"
    values = np.array([activity.get(n, np.nan) for n in device_nodes], dtype=float)
    notes = missing_data_notes(result)
    if activity and device_nodes and np.isnan(values).all():
        notes.append("no device activity shown: the run's lanes name none of these devices")
    return HeatFrame(values, links, label, notes)


def grid_link_values(places: LinkPlaces, path: str, links: dict[LinkKey, float]) -> dict[tuple[int, int], float]:
    """The busiest direction of each neighbour pair of one grid."""
    out: dict[tuple[int, int], float] = {}
    for key, pair in places.mesh.get(path, {}).items():
        out[pair] = max(out.get(pair, 0.0), links.get(key, 0.0))
    return out


def spoke_values(places: LinkPlaces, links: dict[LinkKey, float]) -> dict[tuple[str, int], float]:
    out: dict[tuple[str, int], float] = {}
    for key, where in places.spokes.items():
        out[where] = max(out.get(where, 0.0), links.get(key, 0.0))
    return out


def port_values(places: LinkPlaces, links: dict[LinkKey, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, name in places.ports.items():
        out[name] = max(out.get(name, 0.0), links.get(key, 0.0))
    return out
