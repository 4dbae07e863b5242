"""Per-op weight formats and fidelity (``mapping.formats.weights_by_op`` / ``fidelity_by_op``): tt-transformers'
performance mode keeps attention weights in bfp8 and stores the MLP's FF1/FF3 in bfp4 at LoFi."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import load_project_preset, load_system
from tilewright.engine.ir.common import DType, MathFidelity, dtype_bytes
from tilewright.engine.ir.mapping import TensorFormats
from tilewright.engine.ir.project import Project
from tilewright.engine.perf.device import device_model
from tilewright.engine.perf.formats import resolve_formats
from tilewright.engine.perf.memory import params_on_device
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.simulate import simulate
from tilewright.engine.workloads import build_workload

N150 = "wormhole-n150-llama2-7b-inference"
MLP_IN = ("mlp_up", "mlp_gate")  # tt-transformers' FF3 and FF1
BFP4_MLP = {"weights_by_op": {"mlp_up": "bfp4", "mlp_gate": "bfp4"}}


def with_formats(project: Project, **formats) -> Project:
    data = project.model_dump(mode="json")
    data["mapping"]["formats"] = {"weights": "bfp8", "activations": "bf16", "kv_cache": "bfp8", **formats}
    return Project.model_validate(data)


def local(name: str) -> str:
    return name.split(".", 1)[-1]


def test_for_op_resolves_the_first_matching_pattern_and_the_fidelity_of_its_format():
    patterns = {"mlp_u*": "bfp4", "mlp_*": "bf16"}
    f = resolve_formats(DType.bf16, TensorFormats(weights=DType.bfp8, weights_by_op=patterns), None)
    assert f.for_op("block3.mlp_up").weights is DType.bfp4
    assert f.for_op("block3.mlp_up").fidelity is MathFidelity.LoFi  # bfp4's default, not the run's HiFi2
    assert f.for_op("block3.mlp_down").weights is DType.bf16
    assert f.for_op("block3.qkv") == resolve_formats(DType.bf16, TensorFormats(weights=DType.bfp8), None)
    pinned = resolve_formats(
        DType.bf16,
        TensorFormats(weights=DType.bfp8, weights_by_op={"mlp_up": "bfp4"}, fidelity_by_op={"qkv": "HiFi4"}),
        MathFidelity.HiFi2,
    )
    assert pinned.for_op("mlp_up").fidelity is MathFidelity.HiFi2  # mapping.fidelity holds over the default
    assert pinned.for_op("qkv").fidelity is MathFidelity.HiFi4


@pytest.mark.parametrize("system", ["dgx-h100", "wormhole-n150"])
def test_bfp4_mlp_lowers_exactly_those_ops_weight_bytes(system):
    """Only the matched ops move fewer bytes; on a device that streams every weight once (a GPU's HBM) by
    exactly their weights × (1.0625 − 0.5625) B, i.e. their weight bytes scale by 0.5625 / 1.0625."""
    chip = next(c for _, c in load_system(system).walk() if c.compute is not None)
    dev = device_model(chip.compute, chip.memories, None, DType.bf16)
    base = resolve_formats(DType.bf16, TensorFormats(weights=DType.bfp8, kv_cache=DType.bfp8), None)
    perf = resolve_formats(
        DType.bf16, TensorFormats.model_validate({"weights": "bfp8", "kv_cache": "bfp8", **BFP4_MLP}), None
    )
    graph = build_workload(load_project_preset(N150).workload)
    ops = graph.layer_ops(graph.block_layers[0])
    for op in ops:
        a = op_time(op, dev, 1, 1, False, False, 2, formats=base)
        b = op_time(op, dev, 1, 1, False, False, 2, formats=perf)
        if local(op.name) not in MLP_IN:
            assert b == a, op.name
            continue
        saved = op.params * (dtype_bytes("bfp8") - dtype_bytes("bfp4"))
        if system == "dgx-h100":
            assert a.local_bytes - b.local_bytes == pytest.approx(saved, rel=1e-12)
        else:  # the grid chooses its split by cost: the bytes fall by at least what the weights save
            assert a.local_bytes - b.local_bytes >= saved * 0.999


def test_weights_memory_and_notes_follow_the_per_op_formats():
    project = load_project_preset(N150)
    base = simulate(with_formats(project), series=False)
    perf = simulate(with_formats(project, **BFP4_MLP), series=False)
    graph = build_workload(project.workload)
    mlp = sum(params_on_device([op], 1) for op in graph.ops() if local(op.name) in MLP_IN)
    fall = base.memory_breakdown_bytes["weights"] - perf.memory_breakdown_bytes["weights"]
    assert fall == pytest.approx(mlp * (dtype_bytes("bfp8") - dtype_bytes("bfp4")), rel=1e-9)
    assert perf.tpot_s < base.tpot_s  # decode streams the weights
    note = next(n for n in perf.notes if n.startswith("formats per op"))
    assert "mlp_up, mlp_gate: weights bfp4 at LoFi" in note and "weights bfp8 at HiFi2" in note
    assert not any(n.startswith("formats per op") for n in base.notes)


def test_both_engines_agree_with_per_op_formats():
    project = with_formats(load_project_preset(N150), **BFP4_MLP)
    event, analytic = (simulate(on_engine(project, e)) for e in ("event", "analytic"))
    assert analytic.tpot_s == pytest.approx(event.tpot_s, rel=1e-6)
    assert analytic.ttft_s == pytest.approx(event.ttft_s, rel=1e-6)
    assert analytic.memory_breakdown_bytes["weights"] == event.memory_breakdown_bytes["weights"]


@pytest.mark.parametrize(
    "formats,field",
    [
        ({"weights_by_op": {"mlp_up": "bfp3"}}, "mapping.formats.weights_by_op.mlp_up"),
        ({"fidelity_by_op": {"mlp_up": "HiFi9"}}, "mapping.formats.fidelity_by_op.mlp_up"),
        ({"weights_by_op": {"ffn_*": "bfp4"}}, "mapping.formats.weights_by_op.ffn_*"),
        ({"fidelity_by_op": {"mlp_upp": "LoFi"}}, "mapping.formats.fidelity_by_op.mlp_upp"),
    ],
)
def test_bad_per_op_formats_exit_2_naming_the_field(tmp_path, capsys, formats, field):
    data = load_project_preset(N150).model_dump(mode="json")
    data["mapping"]["formats"].update(formats)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err


def on_engine(project: Project, engine: str) -> Project:
    data = project.model_dump(mode="json")
    data["run"]["engine"] = engine
    return Project.model_validate(data)
