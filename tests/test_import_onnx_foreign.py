"""``import-onnx`` on a graph with operators of another domain (onnxruntime's ``com.microsoft`` fusions): they
are costed as elementwise with 0 FLOPs, and the importer says so.

An onnxruntime-optimized export writes ``FusedMatMul`` for a MatMul it fused with a scale or transpose, and LLM
exports write ``MatMulNBits`` for 4-bit weights: both are GEMMs. They fell through to the importer's default
(elementwise, 0 FLOPs) without a word, in the comment or on stderr, so a model's matrix work could vanish from
its workload silently. Standard ONNX operators the importer does not single out (Relu, Add) stay silent: the
default is meant for them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tilewright.engine.cli import main
from tilewright.engine.workloads.onnx_import import import_onnx

S, H = 16, 32  # tokens, hidden


def model(foreign: bool) -> onnx.ModelProto:
    """x @ W (an ONNX MatMul, costed), then x @ xᵀ as com.microsoft FusedMatMul (or a plain Relu), then a Relu."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, S, H])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, S, S] if foreign else [1, S, H])
    w = numpy_helper.from_array(np.zeros((H, H), dtype=np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="proj")]
    if foreign:
        nodes.append(helper.make_node("FusedMatMul", ["h", "h"], ["s"], name="scores", domain="com.microsoft",
                                      transB=1, alpha=0.125))
    else:
        nodes.append(helper.make_node("Relu", ["h"], ["s"], name="scores"))
    nodes.append(helper.make_node("Relu", ["s"], ["y"], name="act"))
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("com.microsoft", 1)] if foreign else [])
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w]), opset_imports=opsets)


def save(m: onnx.ModelProto, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    onnx.save(m, str(path))
    return path


def test_foreign_operators_are_counted_and_named(tmp_path: Path) -> None:
    imported = import_onnx(save(model(foreign=True), tmp_path, "fused.onnx"))
    assert imported.foreign == {"com.microsoft.FusedMatMul": 1}
    assert "com.microsoft.FusedMatMul ×1" in imported.spec.comment
    ops = {op.name: op for op in imported.spec.ops}
    assert ops["proj"].flops == pytest.approx(2 * S * H * H)  # ONNX's own MatMul: 2·M·N·K, as ever
    assert ops["scores"].flops == 0.0  # the default still applies; it is now said


def test_standard_operators_keep_the_silent_default(tmp_path: Path) -> None:
    imported = import_onnx(save(model(foreign=False), tmp_path, "plain.onnx"))
    assert imported.foreign == {}
    assert "another domain" not in imported.spec.comment


def test_the_command_warns_on_stderr_and_still_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "w.json"
    assert main(["import-onnx", str(save(model(foreign=True), tmp_path, "fused.onnx")), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "com.microsoft.FusedMatMul ×1" in err and "0 FLOPs" in err
    assert "1 node of operators" in err  # counted in words, not "node(s)"
    assert out.is_file()
    assert main(["import-onnx", str(save(model(foreign=False), tmp_path, "plain.onnx")), "-o", str(out)]) == 0
    assert "warning" not in capsys.readouterr().err
