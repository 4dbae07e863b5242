"""``tilewright import-onnx``: ONNX graphs built here with onnx.helper (no downloads) become custom workloads
whose FLOPs and weights are derived independently from the shapes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tilewright.engine.cli import main
from tilewright.engine.ir import CustomSpec
from tilewright.engine.ir.ops import OpKind
from tilewright.engine.workloads import build_workload
from tilewright.engine.workloads.hf_config import ConfigError
from tilewright.engine.workloads.onnx_import import import_onnx_model

S, H, F, HEADS = 16, 32, 64, 4  # tokens, hidden, MLP width, heads


def weight(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.zeros(shape, dtype=np.float32), name)


def block_model(blocks: int = 2) -> onnx.ModelProto:
    """A pre-norm attention + MLP block repeated, named the way torch.onnx names module paths; the batch and
    sequence are symbolic."""
    nodes, inits = [], []
    x = "x"
    for b in range(blocks):
        p = f"/model/layers.{b}"

        def node(op: str, inputs: list[str], out: str, name: str, p: str = p, **attrs: object) -> str:
            nodes.append(helper.make_node(op, inputs, [f"{p}/{out}"], name=f"{p}/{name}", **attrs))
            return f"{p}/{out}"

        inits += [
            weight(f"w{b}_ln", H),
            weight(f"w{b}_lnb", H),
            weight(f"w{b}_q", H, H),
            weight(f"w{b}_k", H, H),
            weight(f"w{b}_v", H, H),
            weight(f"w{b}_o", H, H),
            weight(f"w{b}_up", H, F),
            weight(f"w{b}_down", F, H),
            numpy_helper.from_array(np.array([0, 0, HEADS, H // HEADS], dtype=np.int64), f"shape{b}"),
        ]
        n = node("LayerNormalization", [x, f"w{b}_ln", f"w{b}_lnb"], "ln", "ln/LayerNormalization", axis=-1)
        heads = []
        for proj in "qkv":
            y = node("MatMul", [n, f"w{b}_{proj}"], proj, f"{proj}_proj/MatMul")
            y = node("Reshape", [y, f"shape{b}"], f"{proj}_r", f"{proj}_proj/Reshape")
            heads.append(node("Transpose", [y], f"{proj}_t", f"{proj}_proj/Transpose", perm=[0, 2, 1, 3]))
        kt = node("Transpose", [heads[1]], "kt", "attn/Transpose_k", perm=[0, 1, 3, 2])
        scores = node("MatMul", [heads[0], kt], "scores", "attn/MatMul")
        probs = node("Softmax", [scores], "probs", "attn/Softmax", axis=-1)
        ctx = node("MatMul", [probs, heads[2]], "ctx", "attn/MatMul_1")
        ctx = node("Transpose", [ctx], "ctx_t", "attn/Transpose", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, f"shape{b}_flat"], "ctx_r", "attn/Reshape")
        inits.append(numpy_helper.from_array(np.array([0, 0, H], dtype=np.int64), f"shape{b}_flat"))
        o = node("MatMul", [ctx, f"w{b}_o"], "o", "o_proj/MatMul")
        r1 = node("Add", [x, o], "r1", "Add")
        up = node("MatMul", [r1, f"w{b}_up"], "up", "mlp/up/MatMul")
        act = node("Relu", [up], "act", "mlp/act/Relu")
        down = node("MatMul", [act, f"w{b}_down"], "down", "mlp/down/MatMul")
        x = node("Add", [r1, down], "out", "Add_1")
    nodes.append(helper.make_node("Identity", [x], ["y"], name="/out/Identity"))
    graph = helper.make_graph(
        nodes,
        "tiny-transformer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", H])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", H])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def cnn_model() -> onnx.ModelProto:
    """Conv (3→8, 3×3, pad 1) on 1×3×8×8, ReLU, global pool, flatten, Gemm to 10 classes; unnamed nodes."""
    nodes = [
        helper.make_node("Conv", ["img", "cw", "cb"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny-cnn",
        [helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        initializer=[weight("cw", 8, 3, 3, 3), weight("cb", 8), weight("fw", 10, 8), weight("fb", 10)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def save(model: onnx.ModelProto, tmp_path: Path, name: str = "model.onnx") -> Path:
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def test_transformer_graph_flops_weights_and_blocks(tmp_path: Path) -> None:
    spec = import_onnx_model(save(block_model(), tmp_path), dims={"seq": S})
    assert isinstance(spec, CustomSpec)
    g = build_workload(spec)
    per_block_weights = 2 * H + 4 * H * H + 2 * H * F
    assert g.params == 2 * per_block_weights  # the reshapes' shape tensors are not weights
    projections = 2.0 * S * (4 * H * H + 2 * H * F)
    attention = 2 * 2.0 * S * S * H  # QKᵀ and AV over all heads
    assert g.flops_per_sample == pytest.approx(2 * (projections + attention))
    assert spec.layer_names == ["model.layers.0", "model.layers.1"]
    kinds = [op.kind for op in spec.ops if op.layer == 0]
    assert kinds.count(OpKind.attention) == 2 and kinds.count(OpKind.matmul) == 6
    assert OpKind.softmax in kinds and OpKind.norm in kinds
    q = next(op for op in spec.ops if op.name.endswith("q_proj.MatMul"))
    assert q.gemm == (S, H, H) and q.params == H * H
    assert "batch" in spec.comment and "seq" not in spec.comment.split("taken as 1")[1]
    residual = next(op for op in spec.ops if op.name == "model.layers.0.Add")
    assert len(residual.inputs) == 1  # x is a graph input; the other operand is o_proj
    assert g.block_layers == [0, 1]


def test_cnn_graph_without_module_names(tmp_path: Path) -> None:
    spec = import_onnx_model(save(cnn_model(), tmp_path))
    g = build_workload(spec)
    conv = spec.ops[0]
    assert conv.kind is OpKind.conv and conv.flops == 2.0 * (8 * 8 * 8) * (3 * 3 * 3)
    assert conv.params == 8 * 3 * 3 * 3 + 8
    fc = spec.ops[-1]
    assert fc.kind is OpKind.matmul and fc.flops == 2.0 * 10 * 8 and fc.gemm == (1, 10, 8)
    assert g.params == 8 * 27 + 8 + 80 + 10
    assert [op.kind for op in spec.ops] == [OpKind.conv, OpKind.elementwise, OpKind.pool, OpKind.matmul]
    assert len(spec.layer_names) == 2  # a layer per weighted node


def test_cli_writes_a_workload_that_runs(tmp_path: Path) -> None:
    model = save(block_model(1), tmp_path)
    out = tmp_path / "workload.json"
    assert main(["import-onnx", str(model), "-o", str(out), "--dim", f"seq={S}", "--name", "tiny"]) == 0
    data = json.loads(out.read_text())
    assert data["kind"] == "custom" and data["name"] == "tiny"
    assert (
        main(["run", "--model", str(out), "--devices", "1", "--global-batch", "2", "--engine", "analytic", "--quiet"])
        == 0
    )


@pytest.mark.parametrize("content", [b"not an onnx model", b""])
def test_bad_file_exits_2_naming_file_and_reason(
    tmp_path: Path, content: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(content)
    assert main(["import-onnx", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "ONNX" in err and "Traceback" not in err


def test_missing_file_and_bad_dim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import-onnx", str(tmp_path / "absent.onnx")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["import-onnx", str(save(cnn_model(), tmp_path)), "--dim", "seq"]) == 2
    assert "--dim" in capsys.readouterr().err


def test_graph_without_compute_is_refused(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["a"], ["b"])],
        "empty",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])],
    )
    with pytest.raises(ConfigError, match="no compute nodes"):
        import_onnx_model(save(helper.make_model(graph), tmp_path))
