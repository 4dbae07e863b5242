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
    args = ["import-onnx", str(model), "-o", str(out), "--dim", f"seq={S}", "--dim", "batch=1", "--name", "tiny"]
    assert main(args) == 0
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
    absent = tmp_path / "absent.onnx"
    assert main(["import-onnx", str(absent)]) == 2
    assert capsys.readouterr().err.strip() == f"{absent}: file not found"  # the file named once, with the reason
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


def one_node_model(node: onnx.NodeProto, inputs: list, output: onnx.ValueInfoProto, inits: list) -> onnx.ModelProto:
    graph = helper.make_graph([node], "one-node", inputs, [output], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_weight_on_the_left_of_a_matmul_is_a_gemm(tmp_path: Path) -> None:
    """``W @ x`` (W 32 × 64, x 64 × 8) is a weighted GEMM like ``x @ W``, not an activation × activation
    attention matmul: 2 · 32 · 8 · 64 FLOPs over the 32 · 64 weights, its 8 columns of x the tokens (the GEMM's
    rows, which a micro-batch multiplies) and W's 32 rows its outputs."""
    m, k, n = 32, 64, 8
    model = one_node_model(
        helper.make_node("MatMul", ["w", "x"], ["y"], name="wx"),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [k, n])],
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n]),
        [weight("w", m, k)],
    )
    (op,) = import_onnx_model(save(model, tmp_path)).ops
    assert op.kind is OpKind.matmul
    assert op.flops == 2 * m * n * k and op.params == m * k
    assert op.gemm == (n, m, k)


def test_qlinear_matmul_reads_its_b_operand_not_a_scale(tmp_path: Path) -> None:
    """QLinearMatMul(a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero): the GEMM's k and n come from
    a and b (inputs 0 and 3); reading input 1 (a 0-d scale) for b broke the import of a supported node."""
    rows, k, n = 8, 64, 32

    def scalar(name: str, dtype: type) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(1, dtype=dtype), name)

    inits = [scalar("a_s", np.float32), scalar("a_z", np.uint8),
             numpy_helper.from_array(np.zeros((k, n), dtype=np.uint8), "b"),
             scalar("b_s", np.float32), scalar("b_z", np.uint8), scalar("y_s", np.float32), scalar("y_z", np.uint8)]
    model = one_node_model(
        helper.make_node("QLinearMatMul", ["a", "a_s", "a_z", "b", "b_s", "b_z", "y_s", "y_z"], ["y"], name="qmm"),
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, rows, k])],
        helper.make_tensor_value_info("y", TensorProto.UINT8, [1, rows, n]),
        inits,
    )
    (op,) = import_onnx_model(save(model, tmp_path)).ops
    assert op.kind is OpKind.matmul
    assert op.flops == 2 * rows * n * k
    assert op.gemm == (rows, n, k)


def test_output_over_the_model_or_below_a_file_is_refused_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``-o model.onnx`` would replace the model with JSON; ``-o afile/w.json`` could only fail at the write
    with "File exists". Both exit 2 naming -o and leave the files as they were."""
    model = save(cnn_model(), tmp_path)
    before = model.read_bytes()
    assert main(["import-onnx", str(model), "-o", str(tmp_path / "." / model.name)]) == 2
    assert "-o" in capsys.readouterr().err and model.read_bytes() == before
    blocker = tmp_path / "afile"
    blocker.write_text("keep")
    assert main(["import-onnx", str(model), "-o", str(blocker / "w.json")]) == 2
    err = capsys.readouterr().err
    assert "-o" in err and "not a folder" in err and blocker.read_text() == "keep"
    assert main(["import-onnx", str(model), "-o", str(tmp_path)]) == 2  # a folder: "Is a directory" at the end
    assert "-o: " in capsys.readouterr().err


def test_einsum_projection_and_scores_are_costed(tmp_path: Path) -> None:
    """Einsum used to import as a 0-FLOP elementwise op, weights and all. A weighted einsum is a GEMM, one of
    two activations an attention matmul; 2 FLOPs per step of the loop over every index."""
    s, d, e = 16, 64, 32
    nodes = [helper.make_node("Einsum", ["x", "w"], ["y"], equation="bsd,de->bse", name="proj"),
             helper.make_node("Einsum", ["y", "y"], ["scores"], equation="bqd,bkd", name="scores")]  # implicit ->kq
    graph = helper.make_graph(nodes, "einsum", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", s, d])],
                              [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [s, s])],
                              initializer=[weight("w", d, e)])
    spec = import_onnx_model(save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path))
    proj, scores = spec.ops
    assert proj.kind is OpKind.matmul and proj.params == d * e
    assert proj.flops == 2 * s * d * e and proj.gemm == (s, e, d)
    assert scores.kind is OpKind.attention and scores.flops == 2 * s * s * e
    assert "without FLOPs" not in spec.comment


def test_einsum_forms_not_costed_are_named(tmp_path: Path) -> None:
    """Three operands are not costed; the comment says so instead of counting them silently as free."""
    graph = helper.make_graph(
        [helper.make_node("Einsum", ["a", "b", "c"], ["y"], equation="ij,jk,kl->il", name="chain")], "chain",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 4]) for n in "abc"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])])
    spec = import_onnx_model(save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path))
    assert spec.ops[0].flops == 0 and "without FLOPs" in spec.comment and "ij,jk,kl->il" in spec.comment


@pytest.mark.parametrize(("op_type", "gates"), [("LSTM", 4), ("GRU", 3), ("RNN", 1)])
def test_recurrent_layers_count_their_input_and_state_products(tmp_path: Path, op_type: str, gates: int) -> None:
    """LSTM/GRU/RNN used to import as free elementwise ops: each of ``steps`` steps multiplies the input
    (width i) and the state (width h) by gates·h-wide weights: 2·steps·gates·h·(i + h) FLOPs."""
    steps, i, hidden = 10, 24, 16
    node = helper.make_node(op_type, ["x", "w", "r"], ["y"], hidden_size=hidden, name="rnn")
    graph = helper.make_graph([node], "rnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                     [steps, 1, i])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [steps, 1, 1, hidden])],
                              initializer=[weight("w", 1, gates * hidden, i), weight("r", 1, gates * hidden, hidden)])
    spec = import_onnx_model(save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path))
    (op,) = spec.ops
    assert op.kind is OpKind.matmul and op.params == gates * hidden * (i + hidden)
    assert op.flops == 2 * steps * gates * hidden * (i + hidden)


def test_a_dim_the_graph_does_not_have_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--dim sequence=2048`` on a graph whose length is called ``seq`` left it at 1 per sample, with no word
    but the comment's list of dimensions taken as 1. Now the misspelt name is refused, naming the real ones."""
    model = save(block_model(1), tmp_path)
    assert main(["import-onnx", str(model), "--dim", "sequence=2048"]) == 2
    err = capsys.readouterr().err
    assert "--dim: sequence" in err and "batch, seq" in err
    with pytest.raises(ConfigError, match="no symbolic dimension"):
        import_onnx_model(model, dims={"seq": S, "sequence": S})
    assert import_onnx_model(model, dims={"seq": S, "batch": 1}).ops  # the graph's own names are taken


@pytest.mark.parametrize("rank", [3, 4])
def test_fused_grouped_query_attention_weighs_values_once_per_query_head(tmp_path: Path, rank: int) -> None:
    """Opset-23 Attention with 4 query heads over 2 KV heads (width 8): QKᵀ and the weighted sum of V each
    cost 2·s·s·8 per query head, 2·s²·(4·8 + 4·8) in all; V's own width (2·8) undercounted the second."""
    s, qh, kvh, d = 16, 4, 2, 8
    if rank == 4:
        shapes = {"q": [1, qh, s, d], "k": [1, kvh, s, d], "v": [1, kvh, s, d], "y": [1, qh, s, d]}
        attrs: dict = {}
    else:
        shapes = {"q": [1, s, qh * d], "k": [1, s, kvh * d], "v": [1, s, kvh * d], "y": [1, s, qh * d]}
        attrs = {"q_num_heads": qh, "kv_num_heads": kvh}
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], name="attn", **attrs)
    graph = helper.make_graph([node], "gqa", [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[n])
                                              for n in "qkv"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shapes["y"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    (op,) = import_onnx_model(save(model, tmp_path)).ops
    assert op.kind is OpKind.attention and op.flops == 2 * s * s * (qh * d + qh * d)


def test_cli_counts_ops_and_layers_in_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The write's summary counts what the workload file holds, in singular or plural: a one-node graph is
    "1 op in 1 layer", the CNN (conv, activation, pool, fc: two weighted nodes) "4 ops in 2 layers"."""
    one = one_node_model(
        helper.make_node("MatMul", ["x", "w"], ["y"], name="xw"),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 32]),
        [weight("w", 64, 32)],
    )
    for model, words in ((one, "1 op in 1 layer"), (cnn_model(), "4 ops in 2 layers")):
        out = tmp_path / "w.json"
        assert main(["import-onnx", str(save(model, tmp_path)), "-o", str(out)]) == 0
        data = json.loads(out.read_text())
        n_ops, n_layers = (int(w) for w in words.split()[::3])
        assert len(data["ops"]) == n_ops and len(data["layer_names"]) == n_layers
        assert capsys.readouterr().out.strip() == f"wrote {out} ({words})"
