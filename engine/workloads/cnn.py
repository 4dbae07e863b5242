"""VGG-A…E, AlexNet and LeNet-5 operator graphs, plus the conv/fc helpers ResNet uses.

One layer per weighted layer (``conv`` or ``fc``), holding its activation and any pooling or dropout that
follows, so the layer's last op's ``out_elems`` is the feature map after pooling (HyPar's convention).
The last fc layer also holds the softmax cross-entropy. Parameters include biases. Convolutions carry
their im2col GEMM shape (m = output pixels, n = output channels, k = kernel² · input channels).

Sources: VGG, Simonyan & Zisserman 2015, Table 1 (configurations A, B, C, D, E; A-LRN is not built).
AlexNet, the single-tower variant of Krizhevsky's "One weird trick" (2014) as in torchvision
(64-192-384-256-256 channels, 61.1 M parameters); the original two-tower net has grouped convolutions.
LeNet-5, LeCun et al. 1998 with full C3 connectivity and a plain fc output instead of RBF units (61,706
parameters at 32×32×1 input and 10 classes); activations are tanh, pooling is 2×2 averaging.

``channels`` and ``classes`` are used as the spec gives them, for every arch: LeNet-5 as published needs
``channels=1, classes=10`` (the ``lenet`` preset sets them). Guessing from which fields were set would
not survive a save and reload, which writes every field out.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.engine.ir.ops import LayerKind, OpKind
from tilewright.engine.ir.workload import CNNSpec
from tilewright.engine.workloads.builder import OpList
from tilewright.engine.workloads.graph import WorkloadGraph


@dataclass(frozen=True)
class FeatureMap:
    channels: int
    height: int
    width: int

    @property
    def elems(self) -> int:
        return self.channels * self.height * self.width


def add_conv(
    ops: OpList, name: str, x: FeatureMap, out_channels: int, kernel: int, stride: int = 1, padding: int = 0,
    bias: bool = True, inputs: list[str] | None = None,
) -> FeatureMap:
    """A convolution; it stores its input for the weight gradient."""
    h = (x.height + 2 * padding - kernel) // stride + 1
    w = (x.width + 2 * padding - kernel) // stride + 1
    if h < 1 or w < 1:
        raise ValueError(f"image_size: too small, {name} gets a {x.height}×{x.width} input")
    y = FeatureMap(out_channels, h, w)
    k = kernel * kernel * x.channels
    ops.add(
        name, OpKind.conv, params=k * out_channels + (out_channels if bias else 0),
        flops=2.0 * h * w * out_channels * k, gemm=(h * w, out_channels, k), in_elems=x.elems,
        out_elems=y.elems, saved_elems=x.elems, inputs=inputs or [],
    )
    return y


def add_activation(ops: OpList, name: str, elems: int) -> str:
    """ReLU/tanh; stores its output, from which its gradient follows."""
    return ops.add(name, OpKind.elementwise, in_elems=elems, out_elems=elems, saved_elems=elems)


def add_pool(ops: OpList, name: str, x: FeatureMap, kernel: int, stride: int, padding: int = 0) -> FeatureMap:
    """Max or average pooling; stores its output (with the stored input, enough to route the gradient)."""
    h = (x.height + 2 * padding - kernel) // stride + 1
    w = (x.width + 2 * padding - kernel) // stride + 1
    if h < 1 or w < 1:
        raise ValueError(f"image_size: too small, {name} gets a {x.height}×{x.width} input")
    y = FeatureMap(x.channels, h, w)
    ops.add(name, OpKind.pool, in_elems=x.elems, out_elems=y.elems, saved_elems=y.elems)
    return y


def add_fc(ops: OpList, name: str, fan_in: int, fan_out: int, bias: bool = True) -> None:
    """A fully-connected layer over one sample; stores its input."""
    ops.add(
        name, OpKind.fc, params=fan_in * fan_out + (fan_out if bias else 0), flops=2.0 * fan_in * fan_out,
        gemm=(1, fan_out, fan_in), in_elems=fan_in, out_elems=fan_out, saved_elems=fan_in,
    )


def add_loss(ops: OpList, classes: int) -> None:
    """Softmax cross-entropy; stores the class probabilities."""
    ops.add("loss", OpKind.loss, in_elems=classes, out_elems=1, saved_elems=classes)


def add_classifier(ops: OpList, first: int, widths: list[int], first_index: int, dropout: bool) -> None:
    """fc layers ``first → widths…``; hidden ones get ReLU (+ dropout), the last the loss."""
    fan_in = first
    for i, width in enumerate(widths):
        ops.layer(f"fc{first_index + i}", LayerKind.fc)
        add_fc(ops, "fc", fan_in, width)
        if i < len(widths) - 1:
            add_activation(ops, "relu", width)
            if dropout:
                ops.add("dropout", OpKind.dropout, in_elems=width, out_elems=width, saved_bytes_fixed=width)
        else:
            add_loss(ops, width)
        fan_in = width


# Simonyan & Zisserman, Table 1: conv widths, "M" = 2×2 max-pool; (width, 1) is a 1×1 convolution.
VGG_CONFIGS: dict[str, list[int | tuple[int, int] | str]] = {
    "vgg-a": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg-b": [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg-c": [64, 64, "M", 128, 128, "M", 256, 256, (256, 1), "M", 512, 512, (512, 1), "M",
              512, 512, (512, 1), "M"],
    "vgg-d": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg-e": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"],
}
DEFAULT_IMAGE_SIZE = {"lenet": 32}  # every other arch: 224


def build_cnn(spec: CNNSpec) -> WorkloadGraph:
    if spec.arch == "resnet50":
        from tilewright.engine.workloads.resnet import build_resnet50

        return build_resnet50(spec)
    size = spec.image_size or DEFAULT_IMAGE_SIZE.get(spec.arch, 224)
    ops = OpList()
    if spec.arch in VGG_CONFIGS:
        _vgg(ops, VGG_CONFIGS[spec.arch], FeatureMap(spec.channels, size, size), spec.classes)
    elif spec.arch == "alexnet":
        _alexnet(ops, FeatureMap(spec.channels, size, size), spec.classes)
    else:
        _lenet(ops, FeatureMap(spec.channels, size, size), spec.classes)
    return ops.graph(spec.name or spec.arch, spec)


def _vgg(ops: OpList, config: list[int | tuple[int, int] | str], x: FeatureMap, classes: int) -> None:
    n = 0
    for item in config:
        if item == "M":
            x = add_pool(ops, "maxpool", x, 2, 2)
            continue
        width, kernel = item if isinstance(item, tuple) else (item, 3)
        n += 1
        ops.layer(f"conv{n}", LayerKind.conv)
        x = add_conv(ops, "conv", x, width, kernel, padding=kernel // 2)
        add_activation(ops, "relu", x.elems)
    add_classifier(ops, x.elems, [4096, 4096, classes], n + 1, dropout=True)


def _alexnet(ops: OpList, x: FeatureMap, classes: int) -> None:
    # (out channels, kernel, stride, padding, max-pool 3/2 after)
    convs = [(64, 11, 4, 2, True), (192, 5, 1, 2, True), (384, 3, 1, 1, False), (256, 3, 1, 1, False),
             (256, 3, 1, 1, True)]
    for n, (width, kernel, stride, padding, pool) in enumerate(convs, start=1):
        ops.layer(f"conv{n}", LayerKind.conv)
        x = add_conv(ops, "conv", x, width, kernel, stride, padding)
        add_activation(ops, "relu", x.elems)
        if pool:
            x = add_pool(ops, "maxpool", x, 3, 2)
    add_classifier(ops, x.elems, [4096, 4096, classes], len(convs) + 1, dropout=True)


def _lenet(ops: OpList, x: FeatureMap, classes: int) -> None:
    for n, width in enumerate((6, 16), start=1):
        ops.layer(f"conv{n}", LayerKind.conv)
        x = add_conv(ops, "conv", x, width, 5)
        add_activation(ops, "tanh", x.elems)
        x = add_pool(ops, "avgpool", x, 2, 2)
    ops.layer("conv3", LayerKind.conv)  # C5: a 5×5 convolution that leaves a 1×1 map at 32² input
    x = add_conv(ops, "conv", x, 120, 5)
    add_activation(ops, "tanh", x.elems)
    ops.layer("fc4", LayerKind.fc)
    add_fc(ops, "fc", x.elems, 84)
    add_activation(ops, "tanh", 84)
    ops.layer("fc5", LayerKind.fc)
    add_fc(ops, "fc", 84, classes)
    add_loss(ops, classes)
