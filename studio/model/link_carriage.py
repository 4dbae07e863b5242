"""What each link carried, by time category: the expert all-to-all apart from the data-parallel all-reduce.

A link's utilisation series is one number per moment (``Result.link_utilisation``); which collective filled it
is recorded only on the Gantt's link lanes, where the event engine colours each busy slice by the category
that carried most of the link's load then (``engine.engines.event.links``: the lane budget is shared between
the categories that loaded links, each taking its busiest). This module sums those slices per link — busy
seconds per category — so the links view can say what a link moved and show only the links a chosen
collective used. No Qt; computed on the worker with the rest of the record (a million slices are one
``bincount``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from tilewright.engine.results import CATEGORIES, Timeline
from tilewright.studio.model.palette import category_label
from tilewright.studio.units import SECONDS, format_value

LINK_GROUPS = ("links", "memory")  # lanes of links and memory ports: the ones whose slices are traffic


@dataclass(frozen=True)
class LinkCarriage:
    """Busy seconds per category of every link that has a Gantt lane, by the link's name (its series' name)."""

    by_link: dict[str, dict[str, float]] = field(default_factory=dict)

    def categories(self) -> list[str]:
        """The categories any link carried, most link-seconds first."""
        totals: dict[str, float] = {}
        for split in self.by_link.values():
            for category, seconds in split.items():
                totals[category] = totals.get(category, 0.0) + seconds
        return sorted(totals, key=lambda c: (-totals[c], CATEGORIES.index(c)))

    def carries(self, link: str, category: str) -> bool:
        return self.by_link.get(link, {}).get(category, 0.0) > 0.0

    def describe(self, link: str) -> str:
        """"expert all-to-all 12.1 ms (59 %) · dp comm 8.4 ms (41 %)" of the link's busy time; "" when its
        traffic was not recorded by category (no Gantt lane)."""
        split = self.by_link.get(link)
        if not split:
            return ""
        total = sum(split.values())
        parts = sorted(split.items(), key=lambda kv: -kv[1])
        return " · ".join(f"{category_label(c)} {format_value(s, SECONDS)} ({100 * s / total:.0f} %)"
                          for c, s in parts)


def link_carriage(timeline: Timeline) -> LinkCarriage:
    """Sum the link lanes' slice durations by lane and category."""
    link_lanes = [i for i, lane in enumerate(timeline.lanes) if lane.group in LINK_GROUPS]
    if not link_lanes or not len(timeline):
        return LinkCarriage()
    a = timeline.arrays()
    n_cat = len(CATEGORIES)
    n_lanes = len(timeline.lanes)
    keys = a["lane"].astype(np.int64) * n_cat + a["category"].astype(np.int64)
    seconds = np.bincount(keys, weights=a["dur"], minlength=n_lanes * n_cat).reshape(n_lanes, n_cat)
    by_link = {}
    for lane in link_lanes:
        split = {CATEGORIES[c]: float(seconds[lane, c]) for c in np.flatnonzero(seconds[lane] > 0)}
        if split:
            by_link[timeline.lanes[lane].name] = split
    return LinkCarriage(by_link)
