"""How big a model is, in the words ``validate`` and ``import-hf`` print: its transformer blocks apart from the
layers around them, and its parameters (for a mixture of experts also those one token passes through).

"34 layers" for Llama-3-8B counted the embedding and the head with its 32 blocks, a number no model card
quotes; the blocks are named as such and the other layers listed by name."""

from __future__ import annotations

from tilewright.engine.ir.ops import LayerKind
from tilewright.engine.results.text import counted, number
from tilewright.engine.workloads.graph import WorkloadGraph

LISTED_AROUND = 4  # layers around the blocks named one by one (embedding, head, MTP's); past this, counted


def layers_text(graph: WorkloadGraph) -> str:
    """"32 transformer blocks + embedding and head"; a model without blocks (a CNN): "11 layers"."""
    blocks = sum(1 for layer in graph.layers if layer.kind is LayerKind.transformer)
    if not blocks:
        return counted(len(graph.layers), "layer")
    around = [layer.name for layer in graph.layers if layer.kind is not LayerKind.transformer]
    if not around:
        return counted(blocks, "transformer block")
    names = (", ".join(around[:-1]) + f" and {around[-1]}" if len(around) > 1 else around[0]) \
        if len(around) <= LISTED_AROUND else counted(len(around), "other layer")
    return f"{counted(blocks, 'transformer block')} + {names}"


def parameters_text(n: float) -> str:
    """"671.0 B parameters", "124.4 M parameters", "36,350 parameters": a fixed "{n/1e9:.3f} B" wrote every
    model below 0.5 M parameters (an imported ONNX graph, a LeNet) as "0.000 B"."""
    for scale, unit in ((1e9, " B"), (1e6, " M")):
        if n >= scale:
            return f"{number(n / scale)}{unit} parameters"
    return f"{number(n)} parameters"


def size_text(graph: WorkloadGraph) -> str:
    """Layers and parameters; a mixture of experts adds the parameters one token passes through."""
    text = f"{layers_text(graph)}, {parameters_text(graph.params)}"
    active = graph.active_params
    if active < graph.params:
        text += f" ({parameters_text(active).removesuffix(' parameters')} active per token)"
    return text
