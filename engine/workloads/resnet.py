"""ResNet-50 (He et al. 2016) in the v1.5 form torchvision ships: the stride sits on the 3×3 convolution.

Layers: ``stem`` (7×7 conv, batch norm, ReLU, 3×3 max-pool; LayerKind.conv), then one
``LayerKind.block`` per bottleneck (16 of them, the projection shortcut inside the first block of each
stage, the global average pool inside the last block), then ``fc`` with the loss. A layer per bottleneck
keeps the residual add inside one layer, so a pipeline cut never splits a skip connection.

Convolutions have no biases (batch norm follows each); batch norm has 2·C parameters (running statistics
are buffers). That gives 25,557,032 parameters and ~4.1 G multiply-accumulates at 224² (8.2 GFLOPs).
"""

from __future__ import annotations

from tilewright.engine.ir.ops import LayerKind, OpKind
from tilewright.engine.ir.workload import CNNSpec
from tilewright.engine.workloads.builder import OpList
from tilewright.engine.workloads.cnn import FeatureMap, add_activation, add_conv, add_fc, add_loss, add_pool
from tilewright.engine.workloads.graph import WorkloadGraph

STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (bottleneck width, blocks, first stride)
EXPANSION = 4


def build_resnet50(spec: CNNSpec) -> WorkloadGraph:
    size = spec.image_size or 224
    ops = OpList()
    ops.layer("stem", LayerKind.conv)
    x = add_conv(ops, "conv", FeatureMap(spec.channels, size, size), 64, 7, stride=2, padding=3, bias=False)
    _batch_norm(ops, "bn", x)
    add_activation(ops, "relu", x.elems)
    x = add_pool(ops, "maxpool", x, 3, 2, padding=1)
    for stage, (width, blocks, stride) in enumerate(STAGES, start=1):
        for i in range(blocks):
            ops.layer(f"block{stage}_{i + 1}", LayerKind.block)
            x = _bottleneck(ops, x, width, stride if i == 0 else 1)
    ops.add("avgpool", OpKind.pool, in_elems=x.elems, out_elems=x.channels, saved_elems=x.channels)
    ops.layer("fc", LayerKind.fc)
    add_fc(ops, "fc", x.channels, spec.classes)
    add_loss(ops, spec.classes)
    return ops.graph(spec.name or spec.arch, spec)


def _batch_norm(ops: OpList, name: str, x: FeatureMap, **fields: object) -> str:
    """Batch norm stores its input for the backward pass."""
    return ops.add(
        name, OpKind.norm, params=2 * x.channels, in_elems=x.elems, out_elems=x.elems, saved_elems=x.elems,
        **fields,
    )


def _bottleneck(ops: OpList, x: FeatureMap, width: int, stride: int) -> FeatureMap:
    block_input = ops.last
    y = add_conv(ops, "conv1", x, width, 1, bias=False)
    _batch_norm(ops, "bn1", y)
    add_activation(ops, "relu1", y.elems)
    y = add_conv(ops, "conv2", y, width, 3, stride=stride, padding=1, bias=False)
    _batch_norm(ops, "bn2", y)
    add_activation(ops, "relu2", y.elems)
    y = add_conv(ops, "conv3", y, width * EXPANSION, 1, bias=False)
    main = _batch_norm(ops, "bn3", y)
    shortcut = block_input
    if stride != 1 or x.channels != y.channels:
        add_conv(ops, "downsample", x, y.channels, 1, stride=stride, bias=False, inputs=[block_input])
        shortcut = _batch_norm(ops, "downsample_bn", y)
    ops.add("add", OpKind.elementwise, in_elems=2 * y.elems, out_elems=y.elems, inputs=[main, shortcut])
    add_activation(ops, "relu3", y.elems)
    return y
