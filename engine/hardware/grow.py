"""Growing a system to fit a run: a DGX cluster is described once and grows by nodes.

Only the outermost growable component grows (depth first, the first one found); its ``rows`` rise to
the smallest value that holds the devices needed, and never fall. A growable root cannot repeat itself
(nothing would join its copies), so it grows by its first child that holds devices instead. Components
are copied along the path from the root to the grown one, so the caller's tree is untouched.
"""

from __future__ import annotations

import math

from tilewright.engine.ir.hardware import Component


def _growable_path(comp: Component) -> list[int] | None:
    """Child indices from ``comp`` to the first growable component (``[]`` if ``comp`` itself grows)."""
    if comp.growable:
        return []
    for i, child in enumerate(comp.children):
        sub = _growable_path(child)
        if sub is not None:
            return [i, *sub]
    return None


def _with_rows(comp: Component, path: list[int], rows: int) -> Component:
    if not path:
        return comp.model_copy(update={"rows": rows})
    i, rest = path[0], path[1:]
    children = list(comp.children)
    old = children[i]
    children[i] = _with_rows(old, rest, rows)
    update: dict = {"children": children}
    ic = comp.interconnect
    if ic is None and sum(c.count for c in children) > 1:  # growing made copies that nothing joins
        raise ValueError(
            f"{comp.name}: interconnect: required to join the {sum(c.count for c in children)} child instances "
            "it grows to for this run"
        )
    if ic is not None and ic.dims is not None:
        update["interconnect"] = ic.model_copy(update={"dims": _refit_dims(ic.dims, comp, children)})
    return comp.model_copy(update=update)


def _refit_dims(dims: list[int], comp: Component, children: list[Component]) -> list[int]:
    """Keep an explicit grid shape consistent with the grown child count by stretching its first axis."""
    total = sum(c.count for c in children)
    rest = math.prod(dims[1:])
    if total % rest:
        raise ValueError(
            f"{comp.name}: cannot grow to {total} child instances within interconnect.dims {dims}"
        )
    return [total // rest, *dims[1:]]


def grow(root: Component, devices_needed: int) -> Component:
    """A copy of ``root`` whose growable rows are raised minimally to hold ``devices_needed`` devices.

    Returns ``root`` itself when it already holds enough devices or nothing can grow; the caller decides
    whether too few devices is an error (``elaborate`` says so)."""
    if devices_needed <= root.device_count():
        return root
    path = _growable_path(root)
    if path is None:
        return root
    if not path:  # the root stands for the whole system: it grows by its first child holding devices
        path = next(([i] for i, c in enumerate(root.children) if c.device_count()), None)
        if path is None:
            return root
    target = root
    for i in path:
        target = target.children[i]
    base = target.rows
    # Devices are affine in the grown component's rows: d(r) = d0 + slope * (r - base).
    d0 = root.device_count()
    slope = _with_rows(root, path, base + 1).device_count() - d0
    if slope <= 0:
        return root
    rows = base + math.ceil((devices_needed - d0) / slope)
    return _with_rows(root, path, rows)
