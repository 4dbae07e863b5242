"""HyPar results as JSON and text, and written into a project's ``mapping.layer_parallelism``.

``apply_partition`` writes the whole partition — every layer's choice at every level — plus the mapping the
array needs (dp = accelerators, tp = pp = 1, the partition's batch as one step), so ``tilewright run`` (or
the studio) simulates exactly what the search counted. The plan (``engine.plan.hypar_plan``) then gives
each layer its per-device batch and weight shares (Π over levels of ½ for dp resp. mp) in its op costs and
memory, and turns each level's communication into pairwise exchanges between the halves of every group
(device i with i XOR N/2^h): ΔW of dp layers as the gradient reduction, partial sums of mp layers after
their forward pass, the dp↔mp transitions (¼ A(F) + ¼ A(E), ½ A(E)) where those tensors are produced. The
bytes moved per step equal ``Partition.total_bytes``. ``engine.search.hypar.compare`` simulates a partition
next to pure data parallelism on a system (``tilewright hypar --simulate``).
"""

from __future__ import annotations

from typing import Any

from tilewright.engine.errors import InputError, Problem
from tilewright.engine.ir.mapping import LayerParallelism, Mapping
from tilewright.engine.ir.project import Project
from tilewright.engine.search.hypar.partition import Partition


def partition_json(best: Partition, dp: Partition, mp: Partition, model: str, dtype: str) -> dict[str, Any]:
    return {
        "model": model,
        "accelerators": best.accelerators,
        "batch": best.batch,
        "dtype": dtype,
        "total_comm_bytes": best.total_bytes,
        "dp_comm_bytes": dp.total_bytes,
        "mp_comm_bytes": mp.total_bytes,
        "levels": [
            {
                "level": lv.level,
                "comm_bytes": best.level_bytes(lv),
                "choices": [
                    {"layer": lay.name, "index": lay.index, "parallelism": c}
                    for lay, c in zip(best.layers, lv.choices, strict=True)
                ],
            }
            for lv in best.levels
        ],
    }


def partition_text(data: dict[str, Any]) -> str:
    gb = 1e9
    lines = [
        f"HyPar: {data['model']} on {data['accelerators']} accelerators, batch {data['batch']}, {data['dtype']}",
        f"  hybrid          {data['total_comm_bytes'] / gb:10.3f} GB per step",
        f"  data parallel   {data['dp_comm_bytes'] / gb:10.3f} GB",
        f"  model parallel  {data['mp_comm_bytes'] / gb:10.3f} GB",
    ]
    if data["levels"]:
        names = [c["layer"] for c in data["levels"][0]["choices"]]
        width = max(len(n) for n in names)
        header = "  " + "layer".ljust(width) + "  " + " ".join(f"L{lv['level']:<2}" for lv in data["levels"]).rstrip()
        lines.append(header)
        for i, name in enumerate(names):
            picks = " ".join(f"{lv['choices'][i]['parallelism']:<3}" for lv in data["levels"]).rstrip()
            lines.append(f"  {name.ljust(width)}  {picks}")
        lines.append(
            "  per level (GB): " + ", ".join(f"L{lv['level']} {lv['comm_bytes'] / gb:.3f}" for lv in data["levels"])
        )
    return "\n".join(lines)


def apply_partition(project: Project, best: Partition) -> Project:
    """A copy of ``project`` that simulates ``best``: ``mapping.layer_parallelism`` holds every layer's
    choice at every level, and the mapping is HyPar's array — dp = the partition's accelerators, tp = pp =
    interleave = 1, no ZeRO or recomputation — running the partition's batch as one global batch of one
    micro-batch (batch / accelerators samples per device)."""
    if not best.levels:
        return project.model_copy(deep=True)
    n, batch = best.accelerators, best.batch
    if batch % n:
        raise InputError(
            "HyPar partition", Problem("batch", f"{batch} is not a multiple of {n} accelerators (whole samples)")
        )
    chosen = [
        LayerParallelism(layer=lay.index, levels=[lv.choices[i] for lv in best.levels])
        for i, lay in enumerate(best.layers)
    ]
    data = project.mapping.model_dump()
    data.update(
        tp=1, pp=1, dp=n, interleave=1, zero=0, recompute="none", stages=[], micro_batch=batch // n,
        global_batch=batch, layer_parallelism=[lp.model_dump() for lp in chosen],
        schedule="1f1b" if data["schedule"] == "interleaved-1f1b" else data["schedule"],
    )
    return project.model_copy(update={"mapping": Mapping.model_validate(data)}, deep=True)
