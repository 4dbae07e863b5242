"""fp8 training with the first and last transformer layers in bf16 (``mapping.formats.bf16_first_layers`` /
``bf16_last_layers``; Megatron-Core ``--first-last-layers-bf16``, which Megatron-Bridge's FP8-CS recipe sets to
one layer at each end).

Megatron-Core runs those layers outside fp8 autocast (``fp8_utils.is_first_last_bf16_layer`` on the global layer
number): their GEMMs at the bf16 rate with no quantization kernels, their saved GEMM inputs bf16, and their
weights plain bf16 parameters — 2 B held and 2 B gathered, where an fp8 layer's parameter holds 1 B (+ a 2 B bf16
copy without ``fp8_param_gather``) and gathers 1 B with it. Expected figures are derived here from the dgx-h100
preset's datasheet numbers (bf16 989 TFLOP/s; fp8 1,979 TFLOP/s at format efficiency 0.875; NVLink 450 GB/s at
efficiency 0.8) and the model's parameter counts, never read back from a run.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # the studio control's tests below

import pytest
from tilewright.engine.cli import main
from tilewright.engine.engines.analytic.engine import AnalyticEngine
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.common import DType
from tilewright.engine.ir.mapping import TensorFormats
from tilewright.engine.ir.ops import OpKind
from tilewright.engine.perf.device import device_model
from tilewright.engine.perf.formats import gemm_dtype
from tilewright.engine.perf.op_cost import fp8_cast_passes, op_time
from tilewright.engine.plan.checks import check_project
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload

from tests.agreement import assert_engines_agree, assert_search_matches_engine, engine_result

GPT = GPTSpec(name="gpt-edges", layers=4, hidden=2048, heads=16, seq_len=1024, vocab=32000)
DP = 8  # one DGX H100 node
NVLINK_BYTES_PER_S = 450e9 * 0.8  # dgx-h100 preset: NVLink4 450 GB/s per direction, efficiency 0.8
FIELD = "mapping.formats.bf16_first_layers"


def _project(first: int = 1, last: int = 1, dtype: str = "fp8", mode: str = "train", engine: str = "analytic",
             workload=GPT, **mapping) -> Project:
    formats = mapping.pop("formats", {}) | {"bf16_first_layers": first, "bf16_last_layers": last}
    m = {"tp": 1, "pp": 1, "dp": DP, "micro_batch": 1, "global_batch": DP * 4, "zero": 1, "formats": formats}
    return Project(name="edges", hardware=load_system("dgx-h100"), workload=workload, mapping=Mapping(**(m | mapping)),
                   run=RunSettings(dtype=dtype, mode=mode, engine=engine, contention=False))


def _layer_params(*names: str) -> float:
    """Parameters of the named layers, from the model's ops."""
    graph = build_workload(GPT)
    index = {li.name: li.index for li in graph.layers}
    return sum(op.params for n in names for op in graph.layer_ops(index[n]))


def test_layers_counted_over_the_whole_model_as_megatron():
    """Megatron-Core's own case (tests of ``is_first_last_bf16_layer``): 2 at the start and 1 at the end of 6
    layers are layers 0, 1 and 5, whatever the pipeline stages; a multi-token-prediction depth stays fp8
    (Megatron asks for it with layer number −1, never bf16)."""
    spec = LlamaSpec(name="six", layers=6, hidden=256, heads=4, ffn=512, vocab=1000, seq_len=128, mtp_layers=1)
    p = _project(2, 1, workload=spec, pp=2, dp=4)
    assert check_project(p) == []
    plan = make_plan(p)
    edge = {f"block{i}" for i in range(6) if plan.formats.for_op(f"block{i}.mlp_up").weights is DType.bf16}
    assert edge == {"block0", "block1", "block5"}
    assert plan.formats.for_op("block2.mlp_up").weights is DType.fp8
    mtp = [op.name for op in build_workload(spec).ops() if op.name.startswith("mtp0.") and op.params > 0]
    assert mtp and all(plan.formats.for_op(n).weights is DType.fp8 for n in mtp)


def test_gemms_run_at_the_bf16_rate_without_quantization():
    """An edge layer's weighted GEMM computes at the bf16 peak, its fp8 twin at 1,979 × 0.875 TFLOP/s: same
    FLOPs and shapes, so the compute time (throughput and fill alike scale with 1 / peak) is larger by the
    ratio of the two peaks; no quantization pass surrounds it, and attention is bf16 in both."""
    plan = make_plan(_project())
    gpu = load_system("dgx-h100").children[0].children[0]
    dev = device_model(gpu.compute, gpu.memories, None, DType.fp8)
    ratio = gpu.compute.peak_flops[DType.fp8] * gpu.compute.format_efficiency[DType.fp8] / gpu.compute.peak_flops[
        DType.bf16]
    ops = {op.name: op for op in build_workload(GPT).ops()}
    weighted = [n.split(".", 1)[1] for n in ops if n.startswith("block1.") and ops[n].kind is OpKind.matmul
                and ops[n].params > 0]
    assert len(weighted) == 4  # qkv, out_proj, mlp_up, mlp_down
    for local in weighted:
        edge, fp8 = ops[f"block0.{local}"], ops[f"block1.{local}"]
        assert gemm_dtype(plan.formats.for_op(edge.name), True) is DType.bf16
        assert gemm_dtype(plan.formats.for_op(fp8.name), True) is DType.fp8
        for backward in (False, True):
            t_edge = op_time(edge, dev, 1, 1, False, backward, 2, formats=plan.formats)
            t_fp8 = op_time(fp8, dev, 1, 1, False, backward, 2, formats=plan.formats)
            gemm_s = t_edge.flops / t_edge.compute_s  # the achieved rate on the curve
            assert t_edge.compute_s == pytest.approx(t_fp8.compute_s * ratio, rel=1e-9), (local, backward)
            assert gemm_s < gpu.compute.peak_flops[DType.bf16]
            in_elems, out_elems = edge.in_elems, edge.out_elems
            assert fp8_cast_passes(edge, plan.formats.for_op(edge.name), backward, in_elems, out_elems) is None
            assert fp8_cast_passes(fp8, plan.formats.for_op(fp8.name), backward, in_elems, out_elems) is not None


@pytest.mark.parametrize("fp8_param_gather", [False, True])
def test_weights_held_and_gathered_at_two_bytes(fp8_param_gather: bool):
    """ZeRO-1, tp 1, pp 1: the device holds every parameter. An edge layer's parameter holds 2 B where an fp8
    one holds 3 B (bf16 parameter + fp8 copy) or 1 B (fp8_param_gather); the post-step gather moves 2 B for
    every parameter without the flag (no change) and, with it, 2 B instead of 1 B for the edge layers' —
    (dp − 1)/dp × P_edge × 1 B more over the NVLink ring. The embedding layer (word and position embeddings; the
    head's logits are tied to it here) is a plain bf16 parameter in both runs (``plan.device_layers.vocab_layers``)."""
    flag = {"fp8_param_gather": fp8_param_gather}
    fp8, edge = _project(0, 0, **flag), _project(1, 1, **flag)
    p_all = sum(op.params for op in build_workload(GPT).ops())
    p_edge = _layer_params("block0", "block3")
    p_vocab = _layer_params("embedding", "head")
    held_fp8 = 1.0 if fp8_param_gather else 3.0
    w_fp8 = simulate(fp8).memory_breakdown_bytes["weights"]
    w_edge = simulate(edge).memory_breakdown_bytes["weights"]
    assert w_fp8 == pytest.approx((p_all - p_vocab) * held_fp8 + p_vocab * 2.0, rel=1e-9)
    assert w_edge == pytest.approx((p_all - p_edge - p_vocab) * held_fp8 + (p_edge + p_vocab) * 2.0, rel=1e-9)
    a, b = make_plan(fp8), make_plan(edge)
    extra = b.zero_gather(0).time(b.hw) - a.zero_gather(0).time(a.hw)
    want = (DP - 1) / DP * p_edge * 1.0 / NVLINK_BYTES_PER_S if fp8_param_gather else 0.0
    assert extra == pytest.approx(want, rel=1e-6, abs=1e-12)


def test_saved_inputs_are_bf16_in_the_edge_layers_only():
    """pp 4, one block per stage: stage 0 (embedding + block0) stores what a bf16 run's stage 0 stores (no fp8
    copies of GEMM inputs or fused norm outputs), stages 1 and 2 what the fp8 run's do."""
    mapping = {"pp": 4, "dp": 2, "global_batch": 16}
    edge = make_plan(_project(1, 1, **mapping))
    fp8 = make_plan(_project(0, 0, **mapping))
    bf16 = make_plan(_bf16(**mapping))
    assert edge.stages[0].act_bytes == pytest.approx(bf16.stages[0].act_bytes, rel=1e-12)
    assert edge.stages[0].act_bytes[0] > fp8.stages[0].act_bytes[0]
    for r in (1, 2):
        assert edge.stages[r].act_bytes == pytest.approx(fp8.stages[r].act_bytes, rel=1e-12)


def _bf16(**mapping) -> Project:
    m = {"tp": 1, "pp": 1, "dp": DP, "micro_batch": 1, "global_batch": DP * 4, "zero": 1} | mapping
    return Project(name="bf16", hardware=load_system("dgx-h100"), workload=GPT, mapping=Mapping(**m),
                   run=RunSettings(dtype="bf16", contention=False))


@pytest.mark.parametrize("mapping", [{"pp": 2, "dp": 4, "fp8_param_gather": True},
                                     {"tp": 2, "pp": 2, "dp": 2, "sequence_parallel": True, "micro_batch": 4,
                                      "overlap_param_gather": True, "overlap_grad_reduce": True}])
def test_both_engines_agree(mapping):
    analytic = simulate(_project(engine="analytic", **mapping))
    event = simulate(_project(engine="event", **mapping))
    assert_engines_agree(analytic, event)
    plain = simulate(_project(0, 0, engine="analytic", **mapping))
    assert analytic.iteration_time_s > plain.iteration_time_s  # the edge layers' bf16 GEMMs are slower


@pytest.mark.parametrize("flag", [False, True])
@pytest.mark.parametrize("shape", [(1, 2, 4), (2, 2, 2)])
def test_search_agrees_with_the_engine(flag: bool, shape):
    """The search's evaluator costs the edge layers apart (their own layer class) and counts their weights and
    gather bytes per stage as the plan does; the result differs from the all-fp8 run's."""
    tp, pp, dp = shape
    # micro-batch 4 at tp 2: at micro-batch 1 the host's launches and collective calls bind, hiding the GEMMs
    c = Candidate(tp, pp, dp, 4 if tp > 1 else 1, zero=1, sequence_parallel=tp > 1)
    p = assert_search_matches_engine(_project(), c, keep_base=True, fp8_param_gather=flag)
    want = engine_result(p)
    off = p.model_copy(update={"mapping": p.mapping.model_copy(update={"formats": TensorFormats()})})
    other = AnalyticEngine().run(make_plan(off))
    assert other.iteration_time_s != pytest.approx(want.iteration_time_s, rel=1e-6)


@pytest.mark.parametrize(
    ("project", "says"),
    [
        (_bf16().model_copy(update={"mapping": Mapping(dp=DP, global_batch=DP * 4, zero=1, formats=TensorFormats(
            bf16_first_layers=1))}), "no tensor runs in fp8"),
        (_project(3, 2), "exceeds the model's 4 transformer layers"),
        (_project(formats={"fp8_scaling": "delayed"}), "'delayed'"),
        (_project(mode="infer", dp=1, zero=0, global_batch=1), "training only"),
    ],
    ids=["bf16", "too-many", "delayed", "infer"],
)
def test_refused_where_megatron_cannot_run_it(project: Project, says: str):
    problems = [p for p in check_project(project) if p.path.startswith("mapping.formats.bf16_")]
    assert problems and any(says in p.reason for p in problems), problems


def test_quiet_in_saved_files_and_accepted_by_block_and_tensor_scaling():
    assert "bf16_first_layers" not in TensorFormats().model_dump(mode="json")
    assert TensorFormats(bf16_last_layers=1).model_dump(mode="json")["bf16_last_layers"] == 1
    for scaling in ("tensor", "block"):
        assert check_project(_project(formats={"fp8_scaling": scaling})) == []


H100_FLAGS = ["--system", "dgx-h100", "--model", "gpt", "--layers", "4", "--hidden", "1024", "--heads", "16",
              "--seq-len", "512", "--vocab", "8192", "--dp", "2", "--global-batch", "4", "--zero", "1", "--json"]


@pytest.mark.parametrize(("value", "says"), [("1", "--fp8-bf16-layers"), ("a,1", "--fp8-bf16-layers"),
                                             ("-1,0", "--fp8-bf16-layers"), ("3,2", FIELD)])
def test_cli_refuses_bad_input_naming_the_field(capsys, value: str, says: str):
    assert main(["run", *H100_FLAGS, "--dtype", "fp8", f"--fp8-bf16-layers={value}"]) == 2
    assert says in capsys.readouterr().err


def test_cli_run_sets_the_layers(capsys):
    assert main(["run", *H100_FLAGS, "--dtype", "bf16", "--fp8-bf16-layers", "1,1"]) == 2
    assert FIELD in capsys.readouterr().err
    assert main(["run", *H100_FLAGS, "--dtype", "fp8", "--fp8-param-gather"]) == 0
    fp8 = json.loads(capsys.readouterr().out)["memory_breakdown_bytes"]["weights"]
    assert main(["run", *H100_FLAGS, "--dtype", "fp8", "--fp8-param-gather", "--fp8-bf16-layers", "1,1"]) == 0
    edge = json.loads(capsys.readouterr().out)["memory_breakdown_bytes"]["weights"]
    spec = GPTSpec(layers=4, hidden=1024, heads=16, seq_len=512, vocab=8192)
    graph = build_workload(spec)
    ends = {graph.layers[graph.block_layers[0]].index, graph.layers[graph.block_layers[-1]].index}
    p_edge = sum(op.params for op in graph.ops() if op.layer in ends)
    assert edge - fp8 == pytest.approx(p_edge * (2.0 - 1.0), rel=1e-9)


def test_cli_search_takes_the_flag(capsys):
    args = ["search", "--system", "dgx-h100", "--model", "gpt", "--layers", "4", "--hidden", "1024", "--heads",
            "16", "--seq-len", "512", "--vocab", "8192", "--devices", "2", "--global-batch", "4", "--dtype", "fp8",
            "--no-simulate", "--json", "--quiet"]
    assert main([*args, "--fp8-bf16-layers", "x"]) == 2
    assert "--fp8-bf16-layers" in capsys.readouterr().err
    assert main([*args, "--fp8-bf16-layers", "1,1"]) == 0


@pytest.mark.parametrize(("fp8_gather", "fp8_layer_bytes"), [(True, 1.0), (False, 2.0)])
def test_zero3_gathers_an_edge_layer_at_two_bytes(fp8_gather: bool, fp8_layer_bytes: float):
    """ZeRO-3 all-gathers each layer's parameters before it runs: an fp8 layer's at 1 B per parameter with
    fp8_param_gather (TE fp8 parameters), else at 2 B (Megatron's bf16 parameters, what the post-step gather moves
    too); an edge layer's at 2 B either way (plain bf16 parameters); both engines time those gathers alike."""
    p = _project(zero=3, overlap_param_gather=True, fp8_param_gather=fp8_gather)
    graph = build_workload(GPT)
    index = {li.name: li.index for li in graph.layers}
    shard = _shard_comm(p)
    for name, per in (("block0", 2.0), ("block1", fp8_layer_bytes), ("block3", 2.0)):
        [(_kind, nbytes)] = shard.layer_items("all-gather", graph.layer_ops(index[name]), 1)
        assert nbytes == pytest.approx(_layer_params(name) * per, rel=1e-12), name
    assert_engines_agree(simulate(p), simulate(p.model_copy(update={"run": p.run.model_copy(
        update={"engine": "event"})})))


def test_zero3_without_fp8_param_gather_moves_more():
    """The same fp8 run gathers its fp8 layers' bf16 parameters (2 B) without fp8_param_gather: more link
    traffic and no less exposed communication than with it."""
    runs = {flag: simulate(_project(zero=3, fp8_param_gather=flag)) for flag in (True, False)}
    assert runs[False].time_breakdown_s["dp_comm"] >= runs[True].time_breakdown_s["dp_comm"]
    assert runs[False].iteration_time_s > runs[True].iteration_time_s


def _shard_comm(p: Project):
    """The ShardComm ``build_plan`` gives stage 0 of ``p`` (one stage)."""
    from tilewright.engine.hardware import elaborate
    from tilewright.engine.perf.memory import param_gather_bytes
    from tilewright.engine.plan.device_layers import edge_weight_bytes
    from tilewright.engine.plan.group_comm import shard_comm
    from tilewright.engine.plan.placement import stage_groups

    plan = make_plan(p)
    hw = elaborate(p.hardware, devices_needed=p.mapping.devices)
    groups = stage_groups(hw.devices, p.mapping)[0]
    gathered = param_gather_bytes(plan.formats.weight_bytes, plan.formats.weights, True, p.mapping.fp8_param_gather,
                                  p.mapping.zero)  # the model's parameters, as the post-step gather moves them
    return shard_comm(p, hw, groups, gathered, 4.0, {}, edge_weight_bytes(plan.formats, plan.workload))


def _forward_host_s(dtype: str, first: int) -> dict[str, float]:
    """Host seconds of each layer's forward segments, one MoE model on one GPU."""
    from tilewright.engine.ir.workload import MoESpec

    spec = LlamaSpec(name="moe", layers=2, hidden=512, heads=8, ffn=1024, vocab=1000, seq_len=256,
                     moe=MoESpec(experts=8, top_k=2, expert_ffn=256))
    m = Mapping(dp=1, global_batch=1, formats=TensorFormats(bf16_first_layers=first))
    plan = make_plan(Project(name="moe", hardware=load_system("dgx-h100"), workload=spec, mapping=m,
                             run=RunSettings(dtype=dtype, contention=False)))
    out: dict[str, float] = {}
    for seg in plan.stages[0].passes[(0, "F")].segments:
        out[seg.label] = out.get(seg.label, 0.0) + seg.host_s
    return out


def test_moe_host_work_follows_the_layer():
    """An fp8 GroupedLinear quantizes per expert on the host (``plan.moe_host``); the edge layer's is a bf16 one:
    its forward's host work is the bf16 run's, the next layer's the fp8 run's."""
    edge, fp8, bf16 = _forward_host_s("fp8", 1), _forward_host_s("fp8", 0), _forward_host_s("bf16", 0)
    assert edge["block0"] == pytest.approx(bf16["block0"], rel=1e-12)
    assert edge["block0"] < fp8["block0"]
    assert edge["block1"] == pytest.approx(fp8["block1"], rel=1e-12)


# -- the studio's control (the mapping options group) -----------------------------------------------------------
def test_studio_control_is_one_undo_step_and_refused_in_the_engines_words(make_window):
    w = make_window(_project(0, 0))
    doc, control = w.doc, w.workload.options.edge_layers
    assert control.isEnabled() and control.line_edit.text() == "" and "--first-last-layers-bf16" in control.toolTip()
    control.type_and_commit("1,1")
    f = doc.project.mapping.formats
    assert (f.bf16_first_layers, f.bf16_last_layers) == (1, 1) and doc.undo_stack.count() == 1
    assert doc.undo_stack.undoText() == "bf16 layers 1 first, 1 last"
    blocks = GPT.layers
    control.type_and_commit(f"{blocks},1")  # more layers than the model has: the engine's own words, nothing pushed
    assert doc.undo_stack.count() == 1 and "exceeds" in control.error
    assert (doc.project.mapping.formats.bf16_first_layers, doc.project.mapping.formats.bf16_last_layers) == (1, 1)
    scaling = w.workload.options.fp8_scaling  # delayed scaling is refused while layers are kept in bf16
    scaling.combo.setCurrentText("delayed (amax history)")
    scaling.combo.activated.emit(scaling.combo.currentIndex())
    assert doc.undo_stack.count() == 1 and "delayed" in scaling.error
    control.type_and_commit("")  # none: both back to 0, stored unset
    assert "bf16_first_layers" not in doc.project.mapping.model_dump(mode="json").get("formats", {})
    doc.undo_stack.undo()
    assert control.line_edit.text() == "1,1"


def test_studio_control_is_off_for_a_bf16_run(make_window):
    control = make_window(_project(0, 0, dtype="bf16")).workload.options.edge_layers
    assert not control.isEnabled() and "fp8" in control.toolTip()
