"""The model's layers as the workload panel lists them: parameters, FLOPs and activations, with units.

Figures are per layer and per sample (one sequence for a transformer), as the engine's ops carry them;
activation bytes use the run's data type, so switching bf16 → fp32 doubles them as it does in memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.engine.ir.common import dtype_bytes
from tilewright.engine.ir.project import Project
from tilewright.studio.mapping import workload_graph
from tilewright.studio.units import BYTES, FLOP, Unit, format_value

PARAMS = Unit("", "7 G")  # a count with SI prefixes: "151 M"

COLUMNS = ("#", "Stage", "Layer", "Kind", "Params", "FLOP/sample", "Act./sample")
TIPS = (
    "layer index (what mapping.stages ranges count)",
    "pipeline stage holding the layer",
    "layer name",
    "layer kind",
    "parameters: weights and biases, in elements",
    "forward FLOPs for one sample (one sequence for a transformer)",
    "output activation of one sample, in bytes of the run's data type",
)
NUMERIC_COLUMNS = (4, 5, 6)
STAGE_COLUMN = 1


@dataclass(frozen=True)
class LayerRow:
    index: int
    name: str
    kind: str
    params: float
    flops: float
    activation_bytes: float

    def cells(self, stage: str = "") -> list[str]:
        return [
            str(self.index),
            stage,
            self.name,
            self.kind,
            format_value(self.params, PARAMS).strip(),
            format_value(self.flops, FLOP),
            format_value(self.activation_bytes, BYTES),
        ]


def layer_rows(project: Project) -> list[LayerRow]:
    graph = workload_graph(project.workload)
    elem = dtype_bytes(project.run.dtype)
    rows = []
    for li in graph.layers:
        ops = graph.layer_ops(li.index)
        out = ops[-1].out_elems if ops else 0.0
        rows.append(
            LayerRow(
                index=li.index,
                name=li.name,
                kind=li.kind.value,
                params=sum(op.params for op in ops),
                flops=sum(op.flops for op in ops),
                activation_bytes=out * elem,
            )
        )
    return rows


def totals(rows: list[LayerRow]) -> str:
    """One line under the table: the whole model's size, with units."""
    params = sum(r.params for r in rows)
    flops = sum(r.flops for r in rows)
    return (
        f"{len(rows)} layers · {format_value(params, PARAMS).strip()} parameters · "
        f"{format_value(flops, FLOP)} per sample (forward)"
    )
