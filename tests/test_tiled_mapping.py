"""Grid devices in the IR and the plan: block-float formats, per-tensor formats, math fidelity, the spatial
split policy, old files unchanged, GPU results untouched."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from tilewright.engine.errors import InputError
from tilewright.engine.io import load_project
from tilewright.engine.io.presets import list_presets, load_system, preset_path
from tilewright.engine.io.project_file import project_from_data
from tilewright.engine.ir import Compute, DType, Mapping, Op, OpKind, Project, dtype_bytes
from tilewright.engine.ir.ops import TensorSplit
from tilewright.engine.perf.device import device_model
from tilewright.engine.perf.formats import OpFormats
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.plan.checks import check_project
from tilewright.engine.simulate import simulate

NEW_KEYS = {"formats", "fidelity", "spatial", "grid", "fixed_op_s", "cache_elems", "efficiency_interleaved_read",
            "efficiency_interleaved_write"}
TILED = "wormhole-n150-llama2-7b-inference"


def keys(obj) -> set[str]:
    if isinstance(obj, dict):
        return set(obj) | {k for v in obj.values() for k in keys(v)}
    if isinstance(obj, list):
        return {k for v in obj for k in keys(v)}
    return set()


def test_block_float_sizes_come_from_the_one_table():
    assert dtype_bytes("bfp8") == 1088 / 1024 == 1.0625
    assert dtype_bytes("bfp4") == 576 / 1024 == 0.5625
    assert dtype_bytes("bf16") == 2 and isinstance(dtype_bytes("bf16"), int)  # GPU byte counts unchanged


TILED_MACHINES = ("wormhole-", "blackhole-", "cerebras-")  # projects on tiled presets may use the new fields


@pytest.mark.parametrize("name", [n for n in list_presets("projects") if not n.startswith(TILED_MACHINES)])
def test_old_projects_save_back_without_the_new_fields(name):
    text = preset_path("projects", name).read_text()
    project = load_project(preset_path("projects", name))
    dumped = project.model_dump(mode="json")
    assert not keys(dumped) & (NEW_KEYS - {"fixed_op_s"})  # GPU presets set it too: the per-kernel gap (issue 12)
    assert dumped == json.loads(text)


def tiled_project(**mapping) -> Project:
    project = load_project(preset_path("projects", TILED))
    return project.model_copy(update={"mapping": Mapping.model_validate({**project.mapping.model_dump(), **mapping})})


def test_grid_compute_derives_its_peak_and_needs_one_or_the_other():
    compute = load_system("wormhole-n150").children[0].compute
    assert compute.peak("bf16") == pytest.approx(64 * 2048 * 1e9)  # HiFi2, bf16's default fidelity
    assert compute.peak("bfp4") == pytest.approx(64 * 4096 * 1e9)  # LoFi
    assert compute.peak("bf16", "HiFi4") == pytest.approx(64 * 1024 * 1e9)
    assert compute.peak_flops[DType.bf16] == compute.peak("bf16")
    with pytest.raises(ValidationError, match="peak_flops"):
        Compute(peak_flops={})


def test_mapping_fields_are_validated_with_their_path():
    base = json.loads(preset_path("projects", TILED).read_text())
    base["mapping"]["formats"]["weights"] = "bfp9"
    base["mapping"]["spatial"] = {"policy": "3d"}
    with pytest.raises(InputError) as err:
        project_from_data(base, "p.json")
    text = str(err.value)
    assert "mapping.formats.weights" in text and "mapping.spatial.policy" in text and "p.json" in text


def test_spatial_grid_must_fit_the_device():
    problems = check_project(tiled_project(spatial={"grid": [9, 8]}))
    assert [p.path for p in problems] == ["mapping.spatial.grid"]
    assert "8×8" in problems[0].reason
    assert not check_project(tiled_project(spatial={"grid": [4, 8]}))
    gpu = load_project(preset_path("projects", "llama2-70b-h100-inference"))
    gpu.mapping = Mapping.model_validate({**gpu.mapping.model_dump(), "spatial": {"grid": [2, 2]}})
    assert [p.path for p in check_project(gpu)] == ["mapping.spatial.grid"]


def test_tiled_preset_reports_the_chosen_splits():
    result = simulate(tiled_project())
    assert not result.oom
    assert "weights bfp8" in " ".join(result.notes)
    rows = result.spatial_splits
    assert {r["where"] for r in rows} == {"stage 0, prefill", "stage 0, decode"}
    prefill = {r["op"]: r["split"] for r in rows if r["where"] == "stage 0, prefill"}
    decode = {r["op"]: r["split"] for r in rows if r["where"] == "stage 0, decode"}
    assert prefill["out_proj"].startswith("2-D 8×8") and "A mcast rows" in prefill["out_proj"]
    assert decode["qkv"].startswith("1-D")  # eight rows of tokens: one line of cores, A to every core
    assert result.metrics_json()["spatial_splits"] == rows
    gpu = simulate(load_project(preset_path("projects", "llama2-70b-h100-inference")))
    assert gpu.spatial_splits == [] and "spatial_splits" not in gpu.metrics_json()


def test_fewer_cores_and_more_passes_are_slower():
    base = simulate(tiled_project()).iteration_time_s
    assert simulate(tiled_project(spatial={"grid": [4, 4]})).iteration_time_s > base
    hifi4 = tiled_project(fidelity="HiFi4")
    hifi4.run.inference.prompt_tokens = 2048  # a compute-bound prefill
    lofi = tiled_project(fidelity="LoFi")
    lofi.run.inference.prompt_tokens = 2048
    assert simulate(lofi).ttft_s < simulate(hifi4).ttft_s


def test_bfp8_weights_hold_and_stream_their_bytes():
    """Weights in bfp8 take 1.0625/2 of the bf16 bytes, in memory and in every decode step's stream."""
    bf16 = simulate(tiled_project(formats={"kv_cache": "bfp8"}))
    bfp8 = simulate(tiled_project(formats={"weights": "bfp8", "kv_cache": "bfp8"}))  # no per-op bfp4 MLP
    ratio = bfp8.memory_breakdown_bytes["weights"] / bf16.memory_breakdown_bytes["weights"]
    assert ratio == pytest.approx(1.0625 / 2)
    assert bfp8.tpot_s < 0.7 * bf16.tpot_s  # decode streams the weights: nearly proportional


def gpu_and_op():
    h100 = load_system("dgx-h100")
    gpu = next(c for _, c in h100.walk() if c.compute is not None)
    dev = device_model(gpu.compute, gpu.memories, None, DType.bf16)
    op = Op(name="b0.mlp_up", kind=OpKind.matmul, layer=0, flops=2.0 * 4096 * 4096 * 8, params=4096.0 * 4096,
            in_elems=8 * 4096, out_elems=8 * 4096, split=TensorSplit.column, gemm=(8, 4096, 4096))
    return gpu, dev, op


def test_gpu_op_time_identical_with_uniform_formats():
    _, dev, op = gpu_and_op()
    fmt = OpFormats(DType.bf16, DType.bf16, DType.bf16, "HiFi2")
    for backward in (False, True):
        a = op_time(op, dev, 2, 1, False, backward, 2)
        b = op_time(op, dev, 2, 1, False, backward, 2, formats=fmt)
        assert a == b and a.busy_s == max(a.compute_s, a.memory_s) + a.overhead_s
        # the per-kernel gap, plus the GEMM's launch and fill (never hidden under its memory time)
        assert a.overhead_s >= dev.compute.fixed_op_s


def test_per_tensor_formats_and_fixed_cost_on_a_gpu():
    gpu, dev, op = gpu_and_op()
    fp8 = OpFormats(DType.fp8, DType.bf16, DType.bf16, "LoFi")
    a = op_time(op, dev, 1, 1, False, False, 2)
    b = op_time(op, dev, 1, 1, False, False, 2, formats=fp8)
    # fp8 weights halve the weight reads; the fp8 GEMM's input is quantized first (amax pass reads bf16, the
    # cast reads bf16 and writes fp8: ``op_cost.fp8_cast_passes``)
    assert a.local_bytes - b.local_bytes == pytest.approx(op.params * (2 - 1) - op.in_elems * (2 + 2 + 1))
    slow = device_model(gpu.compute.model_copy(update={"fixed_op_s": 5e-6}), gpu.memories, None, DType.bf16)
    assert op_time(op, slow, 1, 1, False, False, 2).busy_s == pytest.approx(a.busy_s - gpu.compute.fixed_op_s + 5e-6)


def test_grid_op_time_never_beats_its_bounds():
    chip = load_system("wormhole-n150").children[0]
    dev = device_model(chip.compute, chip.memories, None, DType.bf16)
    fmt = OpFormats(DType.bfp8, DType.bf16, DType.bf16, "LoFi")
    for m_rows in (1, 32, 4096):
        op = Op(name="b0.qkv", kind=OpKind.matmul, layer=0, flops=2.0 * m_rows * 4096 * 12288,
                params=4096.0 * 12288, in_elems=m_rows * 4096, out_elems=m_rows * 12288, split=TensorSplit.column,
                gemm=(m_rows, 12288, 4096))
        for backward in (False, True):
            t = op_time(op, dev, 1, 1, False, backward, 2, formats=fmt)
            assert t.split.startswith("qkv: ")
            assert t.busy_s >= t.flops / chip.compute.peak("bfp8", "LoFi")
            assert t.busy_s >= chip.compute.fixed_op_s * (2 if backward else 1)
            assert t.busy_s >= max(t.compute_s, t.memory_s)
            weights_once = op.params * 1.0625
            assert t.local_bytes >= weights_once
            assert t.busy_s >= weights_once / chip.memories[0].bandwidth_bytes_per_s


def test_grid_residency_and_fusion_keep_tensors_in_l1():
    from tilewright.engine.perf.residency import Residency

    chip = load_system("wormhole-n150").children[0]
    dev = device_model(chip.compute, chip.memories, None, DType.bf16)
    op = Op(name="b0.mlp_up", kind=OpKind.matmul, layer=0, flops=2.0 * 32 * 4096 * 4096, params=4096.0 * 4096,
            in_elems=32 * 4096, out_elems=32 * 4096, split=TensorSplit.column, gemm=(32, 4096, 4096))
    base = op_time(op, dev, 1, 1, False, False, 2)
    sram = op_time(op, dev, 1, 1, False, False, 2, residency=Residency({"weights": "sram"}))
    fused = op_time(op, dev, 1, 1, False, False, 2, True, True)
    assert base.local_bytes - sram.local_bytes == pytest.approx(op.params * 2)
    assert sram.busy_s < base.busy_s
    assert base.local_bytes - fused.local_bytes == pytest.approx(2 * 32 * 4096 * 2)
