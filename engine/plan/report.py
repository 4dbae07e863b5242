"""What a plan reports beside its numbers: the notes on what the run's formats and spatial settings mean
on its device, and the rows of the splits a grid device's matmuls took.

Split from ``plan.plan``: the plan and the search's estimator (``search.parallel.estimate``) and the
inference phases (``plan.inference_phases``) report splits in the same rows, and none of it changes a number.
"""

from __future__ import annotations

from collections import Counter

from tilewright.engine.ir.project import Project
from tilewright.engine.perf.device import DeviceModel
from tilewright.engine.perf.formats import OpFormats


def split_rows(where: str, splits: Counter) -> list[dict[str, object]]:
    """One row per distinct split a pass's matmuls took on a grid device (``OpTime.split`` is "op: how"):
    where (stage and phase), the op's name in its layer, how many such ops, and the split."""
    rows: list[dict[str, object]] = []
    for key, n in splits.most_common():
        op, _, how = key.partition(": ")
        rows.append({"where": where, "op": op, "count": n, "split": how})
    return rows


def format_notes(project: Project, dev: DeviceModel, formats: OpFormats) -> list[str]:
    """What the run's formats and spatial settings mean on this device, or that they are ignored."""
    m = project.mapping
    grid = dev.compute.grid
    notes = []
    if not formats.uniform:
        notes.append(
            f"formats: weights {formats.weights.value}, activations {formats.activations.value}, "
            f"KV cache {formats.kv_cache.value}"
        )
    if grid is not None:
        r, c = m.spatial.grid or (grid.rows, grid.cols)
        notes.append(
            f"each device splits its ops over {min(r, grid.rows)}×{min(c, grid.cols)} cores "
            f"({m.spatial.policy.value} split), matrix engine at {formats.fidelity.value}"
        )
    elif m.fidelity is not None or "spatial" in m.model_fields_set:
        notes.append(
            "mapping.fidelity and mapping.spatial apply to devices with a grid of cores; "
            "this device has none, so they are ignored"
        )
    return notes
