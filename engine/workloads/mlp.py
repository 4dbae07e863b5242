"""Multi-layer perceptrons and custom op lists."""

from __future__ import annotations

from tilewright.engine.ir.ops import LayerKind, OpKind
from tilewright.engine.ir.workload import CustomSpec, MLPSpec
from tilewright.engine.workloads.builder import OpList
from tilewright.engine.workloads.cnn import add_classifier
from tilewright.engine.workloads.graph import LayerInfo, WorkloadGraph


def build_mlp(spec: MLPSpec) -> WorkloadGraph:
    """One fc layer per consecutive pair of widths: ReLU after the hidden ones, softmax loss after the last."""
    ops = OpList()
    add_classifier(ops, spec.layer_sizes[0], spec.layer_sizes[1:], 1, dropout=False)
    sizes = "-".join(str(n) for n in spec.layer_sizes)
    return ops.graph(spec.name or f"mlp-{sizes}", spec)


# A custom layer's kind follows the first of these op kinds it contains; otherwise it is ``fc``.
_LAYER_KIND_BY_OP = (
    (OpKind.attention, LayerKind.transformer),
    (OpKind.conv, LayerKind.conv),
    (OpKind.embedding, LayerKind.embedding),
    (OpKind.loss, LayerKind.head),
)


def build_custom(spec: CustomSpec) -> WorkloadGraph:
    """The spec's ops as they are; layer kinds are inferred (the spec only names the layers)."""
    kinds_by_layer: dict[int, set[OpKind]] = {}
    for op in spec.ops:
        kinds_by_layer.setdefault(op.layer, set()).add(op.kind)
    layers = []
    for index, name in enumerate(spec.layer_names):
        kinds = kinds_by_layer.get(index, set())
        kind = next((lk for ok, lk in _LAYER_KIND_BY_OP if ok in kinds), LayerKind.fc)
        layers.append(LayerInfo(index=index, name=name, kind=kind))
    return WorkloadGraph.from_ops(spec.name or "custom", spec, layers, spec.ops)
