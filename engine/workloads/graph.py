"""The operator graph a workload spec builds into: a networkx DiGraph of ``Op`` plus its layer list."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import networkx as nx
from tilewright.engine.ir.ops import LayerKind, MoERole, Op
from tilewright.engine.ir.workload import TransformerDims, WorkloadSpec


@dataclass(frozen=True)
class LayerInfo:
    index: int
    name: str
    kind: LayerKind


@dataclass
class WorkloadGraph:
    """Ops per sample; ``graph`` nodes are op names with attribute ``op``; edges are data flow."""

    name: str
    spec: WorkloadSpec
    layers: list[LayerInfo]
    graph: nx.DiGraph
    dims: TransformerDims | None = None
    _by_layer: dict[int, list[Op]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_ops(
        cls,
        name: str,
        spec: WorkloadSpec,
        layers: list[LayerInfo],
        ops: Iterable[Op],
        dims: TransformerDims | None = None,
    ) -> WorkloadGraph:
        """Build the graph; an op without ``inputs`` follows the op before it (a chain)."""
        g = nx.DiGraph()
        prev: str | None = None
        for op in ops:
            g.add_node(op.name, op=op)
            sources = op.inputs if op.inputs else ([prev] if prev else [])
            for src in sources:
                g.add_edge(src, op.name)
            prev = op.name
        wg = cls(name=name, spec=spec, layers=layers, graph=g, dims=dims)
        for op in wg.ops():
            wg._by_layer.setdefault(op.layer, []).append(op)
        return wg

    def ops(self) -> list[Op]:
        """Ops in insertion order (which builders keep topological)."""
        return [d["op"] for _, d in self.graph.nodes(data=True)]

    def layer_ops(self, index: int) -> list[Op]:
        return self._by_layer.get(index, [])

    @property
    def block_layers(self) -> list[int]:
        """Indices of the repeated layers a pipeline divides (transformer blocks; every CNN layer)."""
        blocks = [li.index for li in self.layers if li.kind is LayerKind.transformer]
        if blocks:
            return blocks
        return [li.index for li in self.layers if li.kind is not LayerKind.embedding]

    @property
    def params(self) -> float:
        return sum(op.params for op in self.ops())

    @property
    def active_params(self) -> float:
        """Parameters one token passes through: a mixture-of-experts layer counts top_k of its routed
        experts (the "activated parameters" MoE papers quote); equal to ``params`` for a dense model."""
        total = 0.0
        for op in self.ops():
            routed = op.moe is not None and op.moe.role is MoERole.expert
            total += op.params * op.moe.top_k / op.moe.experts if routed else op.params
        return total

    @property
    def flops_per_sample(self) -> float:
        """Forward FLOPs per sample."""
        return sum(op.flops for op in self.ops())

    @property
    def tokens_per_sample(self) -> int:
        return self.dims.seq_len if self.dims is not None else 1
