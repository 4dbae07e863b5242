"""Shared plumbing of the builders: an op list that knows its current layer.

Conventions every builder follows (the simulator relies on them):

- Quantities are per sample (one sequence or one image), as ``engine.ir.ops`` says.
- ``flops`` counts the multiply-accumulates of matmuls, convolutions, fully-connected layers and the
  attention matmuls (2 FLOPs per MAC), as Megatron's formula and the CNN papers' published counts do.
  Vector ops (norms, softmax, activations, dropout, residual adds, pooling, loss) carry 0 FLOPs: they are
  memory-bound, so their cost comes from ``in_elems``/``out_elems``, and the published totals stay exact.
- Op names are ``"<layer name>.<op>"`` and unique; an op without ``inputs`` follows the op before it.
"""

from __future__ import annotations

from tilewright.engine.ir.ops import LayerKind, Op, OpKind, TensorSplit
from tilewright.engine.ir.workload import TransformerDims, WorkloadSpec
from tilewright.engine.workloads.graph import LayerInfo, WorkloadGraph


class OpList:
    """Ops and layers in build order; ``layer()`` opens a layer that later ``add()`` calls fill."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.layers: list[LayerInfo] = []

    def layer(self, name: str, kind: LayerKind) -> int:
        index = len(self.layers)
        self.layers.append(LayerInfo(index=index, name=name, kind=kind))
        return index

    def add(self, name: str, kind: OpKind, split: TensorSplit = TensorSplit.none, **fields: object) -> str:
        """Append a validated op to the current layer and return its full name.

        Validation costs ~4 µs per op, less than ``Op.model_construct`` (which runs in Python), so there
        is no reason to skip it.
        """
        current = self.layers[-1]
        full = f"{current.name}.{name}"
        fields.setdefault("flops", 0.0)
        self.ops.append(Op(name=full, kind=kind, layer=current.index, split=split, **fields))
        return full

    @property
    def last(self) -> str:
        return self.ops[-1].name

    def graph(self, name: str, spec: WorkloadSpec, dims: TransformerDims | None = None) -> WorkloadGraph:
        return WorkloadGraph.from_ops(name, spec, self.layers, self.ops, dims=dims)
