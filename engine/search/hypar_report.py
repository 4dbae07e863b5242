"""HyPar results as JSON and text, and written into a project's ``mapping.layer_parallelism``.

The mapping holds one choice per layer, so a multi-level partition is written as its top-level choices
(the cut between the two halves of the whole array, which crosses the array's root links).

The event engine does not model per-layer model parallelism yet: it accepts ``layer_parallelism`` but
runs every CNN layer data-parallel. Comparing HyPar with pure dp on it needs (1) a choice per level
per layer in the IR (e.g. ``parallelism: ["dp", "dp", "mp", "mp"]``); (2) in the plan, each layer's
per-device batch and weight shares (Π over levels of ½ for dp resp. mp) applied to its op costs and
memory; (3) per level h, collectives on the 2^(h-1) pairs of half-groups: the ΔW all-reduce of dp layers
restricted to the levels that chose dp, the partial-sum reduce of F_{l+1} for mp layers, and the
dp↔mp transition exchanges (¼ A(F) + ¼ A(E), ½ A(E)) as pairwise sends between layers; (4) the DP
barrier only over dp layers. See ``engine.search.hypar`` for the tensor accounting.
"""

from __future__ import annotations

from typing import Any

from engine.ir.mapping import LayerParallelism
from engine.ir.project import Project
from engine.search.hypar import Partition


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
    """A copy of ``project`` whose ``mapping.layer_parallelism`` holds the top-level choices."""
    if not best.levels:
        return project.model_copy(deep=True)
    top = best.levels[0]
    chosen = [LayerParallelism(layer=lay.index, parallelism=c) for lay, c in zip(best.layers, top.choices, strict=True)]
    mapping = project.mapping.model_copy(update={"layer_parallelism": chosen})
    return project.model_copy(update={"mapping": mapping}, deep=True)
