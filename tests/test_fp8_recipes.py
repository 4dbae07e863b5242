"""fp8 training recipes (``mapping.formats.fp8_scaling``): the quantization kernels each puts around an fp8 GEMM.

Transformer Engine's recipes, per quantized tensor (expected bytes derived here from the tensor's elements and
the formats' sizes, not read back from the engine's table):

- 'tensor' (current scaling, the default): an amax pass (reads bf16), a scale kernel, the cast (reads bf16,
  writes fp8): three kernels;
- 'delayed': the cast alone, the amax recorded as it goes: one kernel, one bf16 read, the fp8 writes;
- 'block': one kernel that finds each 1×128 block's scale itself, writing the fp8 copy and one fp32 scale per
  128 elements (4 / 128 byte per element) per copy;
- 'mxfp8': the same pass with 1×32 blocks and a one-byte E8M0 scale per 32 elements (Blackwell only).

Backward, the output gradient gets a row-wise and a transposed (column-wise) copy from one read, and the
input's transposed copy for the weight gradient is written (one more copy of the input).
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # the studio control's tests below

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.common import DType
from tilewright.engine.ir.mapping import TensorFormats
from tilewright.engine.perf.device import device_model
from tilewright.engine.plan.checks import check_project
from tilewright.engine.simulate import simulate
from tilewright.engine.workloads import build_workload

from tests.test_fp8_training_casts import cast_extra, streamed

SEQ, HIDDEN, HEADS = 1024, 1024, 16
FFN = 4 * HIDDEN  # GPT's MLP
SPEC = GPTSpec(name="small-fp8-gpt", layers=2, hidden=HIDDEN, heads=HEADS, seq_len=SEQ, vocab=8192)
BF16, FP8 = 2.0, 1.0
FP32_SCALE_PER_ELEM = 4.0 / 128  # Float8BlockScaling: one fp32 scale per 1×128 block
E8M0_SCALE_PER_ELEM = 1.0 / 32  # MXFP8: one 8-bit exponent per 32 elements
# per recipe: (bytes read before the cast for the amax, bytes of one fp8 copy with its scales, kernels); the
# kernels that stream the tensor are all but current scaling's one-thread scale kernel
RECIPES = {
    "tensor": (BF16, FP8, 3),
    "delayed": (0.0, FP8, 1),
    "block": (0.0, FP8 + FP32_SCALE_PER_ELEM, 1),
    "mxfp8": (0.0, FP8 + E8M0_SCALE_PER_ELEM, 1),
}


def _h100():
    gpu = load_system("dgx-h100").children[0].children[0]
    return device_model(gpu.compute, gpu.memories, None, DType.fp8)


def _ops():
    graph = build_workload(SPEC)
    return {op.name.split(".", 1)[-1]: op for op in graph.layer_ops(graph.block_layers[0])}


def _extra(op, recipe: str | None, backward: bool, dtype: DType = DType.fp8, tp: int = 1, sp: bool = False,
           mb: int = 1):
    """(extra overhead seconds, extra local bytes) of ``op`` over the same op costed without quantization."""
    return cast_extra(op, _h100(), backward, dtype, tp, sp, mb, recipe=recipe)


@pytest.mark.parametrize("recipe", list(RECIPES))
@pytest.mark.parametrize("tp,sp,mb", [(1, False, 1), (4, True, 2)])
def test_forward_bytes_and_kernels_per_gemm(recipe, tp, sp, mb):
    amax, copy, kernels = RECIPES[recipe]
    dev = _h100()
    elems = SEQ * HIDDEN * mb / tp  # mlp_up's input shard (sequence parallel: quantized before the all-gather)
    moved = elems * (amax + BF16 + copy)
    seconds, local = _extra(_ops()["mlp_up"], recipe, False, tp=tp, sp=sp, mb=mb)
    assert local == pytest.approx(moved)
    streams = kernels - 1 if amax else kernels
    assert seconds == pytest.approx(streamed(dev, moved, streams) + kernels * dev.compute.fixed_op_s)


@pytest.mark.parametrize("recipe", list(RECIPES))
@pytest.mark.parametrize("tp,sp", [(1, False), (4, True)])
def test_backward_bytes_and_kernels_per_gemm(recipe, tp, sp):
    amax, copy, kernels = RECIPES[recipe]
    dev = _h100()
    grad = SEQ * HIDDEN / tp if sp else SEQ * HIDDEN  # mlp_down's output-gradient shard (row parallel)
    inp = SEQ * FFN / tp
    moved = grad * (amax + BF16 + 2 * copy) + inp * copy  # row-wise and column-wise gradient; input transposed
    seconds, local = _extra(_ops()["mlp_down"], recipe, True, tp=tp, sp=sp)
    assert local == pytest.approx(moved)
    streams = kernels - 1 if amax else kernels
    assert seconds == pytest.approx(streamed(dev, moved, streams) + kernels * dev.compute.fixed_op_s)


def test_unset_is_current_scaling():
    up = _ops()["mlp_up"]
    for backward in (False, True):
        assert _extra(up, None, backward) == _extra(up, "tensor", backward)


def test_cast_cost_orders_delayed_block_tensor():
    """One pass beats an amax pass plus a cast; block scaling's fp32 scales cost a little over delayed's."""
    for name in ("qkv", "out_proj", "mlp_up", "mlp_down"):
        for backward in (False, True):
            delayed, block, tensor = (_extra(_ops()[name], r, backward, tp=2, sp=True)[0]
                                      for r in ("delayed", "block", "tensor"))
            assert 0 < delayed < block < tensor


def test_bf16_gemms_pay_no_quantization_whatever_the_recipe():
    ops = _ops()
    for recipe in RECIPES:
        for backward in (False, True):
            assert _extra(ops["mlp_up"], recipe, backward, dtype=DType.bf16) == (0.0, 0.0)
            assert _extra(ops["attention"], recipe, backward) == (0.0, 0.0)  # attention stays bf16


def _project(recipe: str | None, engine: str = "analytic", dtype: str = "fp8", system: str = "dgx-h100",
             hardware=None, **formats) -> Project:
    mapping = Mapping(tp=2, dp=2, sequence_parallel=True, micro_batch=4, global_batch=32,
                      formats=TensorFormats(fp8_scaling=recipe, **formats))
    return Project(name="fp8-recipes", hardware=hardware or load_system(system), workload=SPEC, mapping=mapping,
                   run=RunSettings(dtype=dtype, engine=engine))


@pytest.mark.parametrize("recipe", ["tensor", "delayed", "block"])
def test_both_engines_agree(recipe):
    a, e = simulate(_project(recipe, "analytic")), simulate(_project(recipe, "event"))
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)
    for key in ("compute", "memory_stall", "host_wait"):
        assert e.time_breakdown_s[key] == pytest.approx(a.time_breakdown_s[key], rel=1e-9)


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_the_recipe_moves_the_run_and_the_default_does_not(engine):
    default, tensor = simulate(_project(None, engine)), simulate(_project("tensor", engine))
    assert tensor.iteration_time_s == default.iteration_time_s
    stalls = {r: simulate(_project(r, engine)).time_breakdown_s["memory_stall"] for r in ("delayed", "block")}
    assert stalls["delayed"] < stalls["block"] < tensor.time_breakdown_s["memory_stall"]


def test_bf16_run_unchanged_by_the_new_field():
    """No recipe on a bf16 run: it costs exactly as before, and saves without the field (``_quiet``)."""
    p = _project(None, dtype="bf16")
    assert "fp8_scaling" not in p.mapping.formats.model_dump(mode="json")
    assert _project("block").mapping.formats.model_dump(mode="json")["fp8_scaling"] == "block"
    assert not check_project(p)


def _problems(project: Project) -> list[str]:
    return [str(x) for x in check_project(project) if x.path == "mapping.formats.fp8_scaling"]


def test_a_recipe_without_fp8_tensors_is_refused():
    problems = _problems(_project("delayed", dtype="bf16"))
    assert len(problems) == 1 and "no tensor runs in fp8" in problems[0]
    assert not _problems(_project("delayed", dtype="bf16", weights=DType.fp8))  # fp8 weights: something to scale


@pytest.mark.parametrize("system", ["dgx-h100", "dgx-a100"])
def test_mxfp8_is_refused_without_hardware_microscaling(system):
    problems = _problems(_project("mxfp8", system=system))
    assert len(problems) == 1 and "'mxfp8'" in problems[0] and "microscaling" in problems[0]
    assert not _problems(_project("block", system=system))


def test_mxfp8_runs_on_a_device_with_microscaling():
    hw = load_system("dgx-h100")
    gpu = hw.children[0].children[0]
    gpu.compute = gpu.compute.model_copy(update={"microscaling": True})
    project = _project("mxfp8", hardware=hw)
    assert not _problems(project)
    mx, block = simulate(project), simulate(_project("block", hardware=hw))
    assert mx.time_breakdown_s["memory_stall"] == pytest.approx(block.time_breakdown_s["memory_stall"])  # 1/32 B
    assert mx.time_breakdown_s["memory_stall"] < simulate(_project("tensor", hardware=hw)).time_breakdown_s[
        "memory_stall"]


CLI = ["run", "--system", "dgx-h100", "--model", "gpt", "--layers", "2", "--hidden", "1024", "--heads", "16",
       "--seq-len", "1024", "--vocab", "8192", "--tp", "2", "--quiet"]


@pytest.mark.parametrize("flags,message", [
    (["--fp8-recipe", "block"], "no tensor runs in fp8"),
    (["--dtype", "fp8", "--fp8-recipe", "mxfp8"], "microscaling"),
])
def test_cli_refuses_with_exit_2(capsys, flags, message):
    assert main([*CLI, *flags]) == 2
    err = capsys.readouterr().err
    assert "mapping.formats.fp8_scaling" in err and message in err


def test_cli_recipe_reaches_the_run(capsys):
    import json

    times = {}
    for recipe in ("tensor", "delayed"):
        assert main([*CLI, "--dtype", "fp8", "--fp8-recipe", recipe, "--json"]) == 0
        times[recipe] = json.loads(capsys.readouterr().out)["time_breakdown_s"]["memory_stall"]
    assert times["delayed"] < times["tensor"]


# -- the MoE GroupedLinear's host work (plan.moe_host): split_quantize per recipe, from TE's cast.cpp -----------
# per GroupedLinear and pass, against current scaling's: (calls once, calls per local expert). Current scaling
# makes per expert three buffers and three kernels (amax, scale, cast); delayed scaling one fused
# multi-cast-transpose launch for all experts; block scaling two bulk buffers for all experts and one kernel per
# expert; MXFP8 its buffers per expert and one kernel per expert.
SPLIT_QUANTIZE = {"tensor": (0, 0), "delayed": (1, -3), "block": (2, -(3 + 3 - 1)), "mxfp8": (0, -(3 - 1))}
MOE_EXPERTS, MOE_EP, MOE_LAYERS = 16, 4, 2


def _moe_host(recipe: str, kind: str) -> tuple[float, float]:
    """(host seconds of one pass kind over the plan, host_call_s) of a small MoE fp8 run. The GPU is given
    microscaling so that every recipe, mxfp8 too, is a valid project."""
    from tilewright.engine.simulate import make_plan

    spec = GPTSpec(name="moe", layers=MOE_LAYERS, hidden=1024, heads=16, seq_len=1024, vocab=8192,
                   moe={"experts": MOE_EXPERTS, "top_k": 2, "expert_ffn": 1024})
    hw = load_system("dgx-h100")
    gpu = hw.children[0].children[0]
    gpu.compute = gpu.compute.model_copy(update={"microscaling": True})
    project = Project(name="moe", hardware=hw, workload=spec,
                      mapping=Mapping(tp=1, dp=8, ep=MOE_EP, micro_batch=1, global_batch=16,
                                      formats=TensorFormats(fp8_scaling=recipe)),
                      run=RunSettings(dtype="fp8", engine="analytic", contention=False))
    assert not check_project(project)
    plan = make_plan(project)
    host = sum(s.host_s for st in plan.stages for (_c, k), ps in st.passes.items() if k == kind for s in ps.segments)
    return host, plan.stages[0].dev.compute.host_call_s


@pytest.mark.parametrize("recipe", ["delayed", "block", "mxfp8"])
@pytest.mark.parametrize("kind", ["F", "B"])
def test_moe_split_quantize_host_calls_follow_the_recipe(recipe, kind):
    tensor, call_s = _moe_host("tensor", kind)
    other, _ = _moe_host(recipe, kind)
    once, per_expert = SPLIT_QUANTIZE[recipe]
    local = MOE_EXPERTS // MOE_EP
    linears = 2  # fc1 (gate and up fused) and fc2 per MoE layer
    expected = MOE_LAYERS * linears * (once + per_expert * local) * call_s
    assert other - tensor == pytest.approx(expected, rel=1e-9)
    assert expected < 0  # fewer host calls than current scaling's per-expert amax, scale and cast

# -- the studio's control (the mapping options group: the run's data type is not edited in the studio) -------
def _choose(editor, text: str) -> None:
    editor.combo.setCurrentText(text)
    editor.combo.activated.emit(editor.combo.currentIndex())


def test_studio_recipe_is_one_undo_step_and_mxfp8_is_refused_in_the_engines_words(make_window):
    w = make_window(_project(None))
    doc, control = w.doc, w.workload.options.fp8_scaling
    assert control.isEnabled() and control.combo.currentText() == "tensor (current)"
    _choose(control, "delayed (amax history)")
    assert doc.project.mapping.formats.fp8_scaling == "delayed" and doc.undo_stack.count() == 1
    engine_says = _problems(_project("mxfp8"))
    assert len(engine_says) == 1
    _choose(control, "mxfp8 (Blackwell)")  # a Hopper system: refused, nothing pushed, the combo goes back
    assert doc.undo_stack.count() == 1 and doc.project.mapping.formats.fp8_scaling == "delayed"
    assert control.combo.currentText() == "delayed (amax history)" and engine_says[0] in control.error
    _choose(control, "tensor (current)")  # the default: stored unset, so the file saves as before
    assert doc.project.mapping.formats.fp8_scaling is None and doc.undo_stack.count() == 2
    doc.undo_stack.undo()
    assert doc.project.mapping.formats.fp8_scaling == "delayed"
    assert control.combo.currentText() == "delayed (amax history)"


def test_studio_recipe_is_off_for_a_bf16_run(make_window):
    w = make_window(_project(None, dtype="bf16"))
    control = w.workload.options.fp8_scaling
    assert not control.isEnabled() and "fp8" in control.toolTip()
