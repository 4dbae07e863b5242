"""``tilewright import-onnx`` and symbolic dimensions: an input's ``batch``/``seq`` that ``--dim`` leaves unset is
refused (exit 2, naming the input, the axis, the dimension and the flag) instead of counting as 1 with a word
only in the workload's comment; the values taken are said on stderr, and so are dimensions shape inference
left unsized inside the graph."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tilewright.engine.cli import main
from tilewright.engine.ir.ops import OpKind

from tests.test_import_onnx import H, block_model, save


def _unsized_inside() -> onnx.ModelProto:
    """x (batch, 4, H) reshaped by a shape the graph only knows at run time: shape inference names the
    reshaped tensor's dimensions unk__0…, then a weighted MatMul."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"], name="/r/Reshape"),
             helper.make_node("MatMul", ["r", "w"], ["y"], name="/mm/MatMul")]
    graph = helper.make_graph(
        nodes, "unsized",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, H]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, H])],
        initializer=[numpy_helper.from_array(np.zeros((H, H), np.float32), "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_unset_input_dimensions_are_refused_naming_input_axis_and_flag(tmp_path, capsys):
    model = save(block_model(1), tmp_path)
    out = tmp_path / "w.json"
    assert main(["import-onnx", str(model), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and not out.exists()  # nothing written
    # block_model's input x is (batch, seq, H)
    assert f"{model}: input 'x' axis 0: symbolic dimension 'batch'" in err and "--dim batch=" in err
    assert f"{model}: input 'x' axis 1: symbolic dimension 'seq'" in err and "--dim seq=" in err


def test_one_dimension_given_leaves_only_the_other_refused(tmp_path, capsys):
    model = save(block_model(1), tmp_path)
    assert main(["import-onnx", str(model), "--dim", "seq=16"]) == 2
    err = capsys.readouterr().err
    assert "'batch'" in err and "'seq'" not in err


@pytest.mark.parametrize("seq", [16, 48])
def test_given_dimensions_are_said_on_stderr_and_size_the_workload(tmp_path, capsys, seq):
    model = save(block_model(1), tmp_path)
    out = tmp_path / "w.json"
    assert main(["import-onnx", str(model), "-o", str(out), "--dim", f"seq={seq}", "--dim", "batch=1"]) == 0
    err = capsys.readouterr().err
    assert "batch=1" in err and f"seq={seq}" in err and "warning" not in err
    ops = json.loads(out.read_text())["ops"]
    q = next(op for op in ops if op["name"].endswith("q_proj.MatMul"))
    assert q["kind"] == OpKind.matmul.value and q["flops"] == 2.0 * seq * H * H  # seq rows of an H × H GEMM


def test_a_dimension_given_twice_with_two_values_is_refused(tmp_path, capsys):
    """``--dim seq=16 --dim seq=48`` used to import at 48 with a word only for the later value; the same value
    twice is harmless."""
    model = save(block_model(1), tmp_path)
    out = tmp_path / "w.json"
    assert main(["import-onnx", str(model), "-o", str(out), "--dim", "batch=1", "--dim", "seq=16", "--dim",
                 "seq=48"]) == 2
    err = capsys.readouterr().err
    assert "--dim: seq given twice (16 and 48)" in err and "Traceback" not in err and not out.exists()
    assert main(["import-onnx", str(model), "-o", str(out), "--dim", "batch=1", "--dim", "seq=16", "--dim",
                 "seq=16"]) == 0


def test_dimensions_left_unsized_inside_the_graph_are_warned_about(tmp_path, capsys):
    model = save(_unsized_inside(), tmp_path)
    assert main(["import-onnx", str(model), "--dim", "batch=1"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["kind"] == "custom"
    warning = next(line for line in captured.err.splitlines() if "warning" in line)
    inferred = onnx.shape_inference.infer_shapes(onnx.load(str(model)))
    names = [d.dim_param for v in inferred.graph.value_info if v.name == "r" for d in v.type.tensor_type.shape.dim]
    assert names and all(n and n in warning for n in names) and "'r'" in warning and "1 per sample" in warning
