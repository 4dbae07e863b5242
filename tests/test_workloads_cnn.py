"""CNN, MLP and custom builders against published parameter and multiply-accumulate counts."""

from __future__ import annotations

import networkx as nx
import pytest
from tilewright.engine.ir import CNNSpec, CustomSpec, LayerKind, MLPSpec, Op, OpKind
from tilewright.engine.workloads import build_workload

# Exact counts for Simonyan & Zisserman's Table 1 configurations with biases (Table 2 rounds them to
# 133, 133, 134, 138, 144 M); multiply-accumulates at 224² as torchvision documents them (vgg11/13/16/19).
VGG = {"vgg-a": (132.86e6, 7.61e9), "vgg-b": (133.05e6, 11.31e9), "vgg-c": (133.64e6, None),
       "vgg-d": (138.36e6, 15.47e9), "vgg-e": (143.67e6, 19.63e9)}
# Weighted layers per configuration: 11, 13, 16, 16, 19 (the name of each column in Table 1).
VGG_DEPTH = {"vgg-a": 11, "vgg-b": 13, "vgg-c": 16, "vgg-d": 16, "vgg-e": 19}


@pytest.mark.parametrize("arch", VGG)
def test_vgg_params_and_macs(arch: str) -> None:
    g = build_workload(CNNSpec(arch=arch))
    params, macs = VGG[arch]
    assert g.params == pytest.approx(params, rel=5e-3)
    if macs is not None:
        assert g.flops_per_sample / 2 == pytest.approx(macs, rel=5e-3)
    assert len(g.layers) == VGG_DEPTH[arch]
    assert [li.kind for li in g.layers][-3:] == [LayerKind.fc] * 3


def test_vgg_layers_end_after_pooling() -> None:
    """HyPar counts a layer's activations after its pooling: VGG-A's conv1 hands on 64×112×112."""
    g = build_workload(CNNSpec(arch="vgg-a"))
    out = [g.layer_ops(li.index)[-1].out_elems for li in g.layers]
    assert out[:8] == [64 * 112**2, 128 * 56**2, 256 * 56**2, 256 * 28**2, 512 * 28**2, 512 * 14**2,
                       512 * 14**2, 512 * 7**2]
    assert g.layer_ops(8)[0].in_elems == 512 * 7 * 7  # fc6 reads the flattened 7×7×512 map
    assert g.layer_ops(0)[-1].kind is OpKind.pool


def test_resnet50_params_and_macs() -> None:
    """He et al. 2016: 25.6 M parameters; 4.1 G multiply-accumulates in the v1.5 form (8.2 GFLOPs)."""
    g = build_workload(CNNSpec(arch="resnet50"))
    assert g.params == pytest.approx(25.6e6, rel=5e-3)
    assert g.flops_per_sample == pytest.approx(8.2e9, rel=1e-2)
    kinds = [li.kind for li in g.layers]
    assert kinds == [LayerKind.conv] + [LayerKind.block] * 16 + [LayerKind.fc]
    assert g.layer_ops(0)[-1].out_elems == 64 * 56 * 56  # stem after its max-pool
    assert g.layer_ops(16)[-1].out_elems == 2048  # last block after the global average pool
    assert nx.is_directed_acyclic_graph(g.graph)


def test_resnet50_residual_adds_join_two_paths() -> None:
    g = build_workload(CNNSpec(arch="resnet50"))
    adds = [op for op in g.ops() if op.name.endswith(".add")]
    assert len(adds) == 16
    assert set(g.graph.predecessors("block1_1.add")) == {"block1_1.bn3", "block1_1.downsample_bn"}
    assert set(g.graph.predecessors("block1_2.add")) == {"block1_2.bn3", "block1_1.relu3"}


def test_alexnet_single_tower() -> None:
    """Krizhevsky 2014 single-tower AlexNet as torchvision ships it: 61.1 M parameters, 0.71 G MACs."""
    g = build_workload(CNNSpec(arch="alexnet"))
    assert g.params == pytest.approx(61.1e6, rel=5e-3)
    assert g.flops_per_sample / 2 == pytest.approx(0.714e9, rel=1e-2)
    assert [li.kind for li in g.layers] == [LayerKind.conv] * 5 + [LayerKind.fc] * 3
    assert g.layer_ops(4)[-1].out_elems == 256 * 6 * 6


def test_lenet5() -> None:
    """LeCun et al. 1998 LeNet-5 with full C3 connectivity: ~61.7 K parameters at 32×32×1, 10 classes."""
    g = build_workload(CNNSpec(arch="lenet", channels=1, classes=10))
    assert g.params == pytest.approx(61.7e3, rel=5e-3)
    assert [g.layer_ops(i)[-1].out_elems for i in range(3)] == [6 * 14 * 14, 16 * 5 * 5, 120]


def test_cnn_builds_what_the_spec_says_and_survives_a_reload() -> None:
    gray = build_workload(CNNSpec(arch="lenet", channels=1, classes=10)).params
    rgb = build_workload(CNNSpec(arch="lenet", classes=10)).params
    assert rgb - gray == 2 * 5 * 5 * 6  # two more input channels into C1's six 5×5 filters
    for arch in ("lenet", "alexnet", "resnet50"):
        spec = CNNSpec(arch=arch)
        reloaded = CNNSpec.model_validate_json(spec.model_dump_json())
        assert build_workload(reloaded).ops() == build_workload(spec).ops()


def test_cnn_image_size_changes_the_classifier_input() -> None:
    g = build_workload(CNNSpec(arch="vgg-a", image_size=64))
    assert g.layer_ops(8)[0].in_elems == 512 * 2 * 2
    with pytest.raises(ValueError, match="image_size"):
        build_workload(CNNSpec(arch="alexnet", image_size=16))


def test_conv_backward_and_gemm() -> None:
    g = build_workload(CNNSpec(arch="vgg-a"))
    conv = g.layer_ops(0)[0]
    assert conv.gemm == (224 * 224, 64, 3 * 3 * 3)
    assert conv.flops == 2 * 224 * 224 * 64 * 27 and conv.backward_flops == 2 * conv.flops


def test_mlp_params_and_layers() -> None:
    sizes = [784, 1024, 1024, 10]
    g = build_workload(MLPSpec(layer_sizes=sizes))
    assert g.params == sum(a * b + b for a, b in zip(sizes, sizes[1:], strict=False))
    assert g.flops_per_sample == sum(2 * a * b for a, b in zip(sizes, sizes[1:], strict=False))
    assert [li.kind for li in g.layers] == [LayerKind.fc] * 3
    assert g.ops()[-1].kind is OpKind.loss


def test_custom_ops_as_given_with_inferred_layer_kinds() -> None:
    ops = [
        Op(name="emb", kind="embedding", layer=0, flops=0, params=100),
        Op(name="att", kind="attention", layer=1, flops=10),
        Op(name="mm", kind="matmul", layer=1, flops=20, params=5),
        Op(name="side", kind="matmul", layer=2, flops=3, params=1, inputs=["emb"]),
        Op(name="join", kind="elementwise", layer=2, flops=0, inputs=["mm", "side"]),
        Op(name="loss", kind="loss", layer=3, flops=0),
    ]
    spec = CustomSpec(name="toy", layer_names=["in", "mix", "side", "out"], ops=ops)
    g = build_workload(spec)
    assert g.ops() == ops
    assert [li.kind for li in g.layers] == [LayerKind.embedding, LayerKind.transformer, LayerKind.fc,
                                             LayerKind.head]
    assert set(g.graph.predecessors("join")) == {"mm", "side"}
    assert g.params == 106 and g.flops_per_sample == 33
