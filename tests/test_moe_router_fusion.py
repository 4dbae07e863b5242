"""``mapping.moe_router_fusion`` (Megatron-Core ``--moe-router-fusion``): the routing op's host work is Transformer
Engine's three fused router Functions instead of the eager top-k / softmax / scatter / aux-loss chain
(``plan.moe_host``), in both engines and in the search.

Expected host savings are derived here from the code paths (``moe_utils``' ``fused=True`` branches and
``transformer_engine/pytorch/router.py``), restated kernel by kernel and call by call, times the preset's
``host_dispatch_s`` / ``host_call_s``; the plan is read only for what it charged."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.engines.analytic.engine import AnalyticEngine
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.workload import MoESpec
from tilewright.engine.plan.checks import check_project
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.search.parallel.estimate import Estimator
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload

LAYERS = 2

# The eager routing group (moe_host's docstring): top-k chain 9 kernels, aux-loss scores 6, counts' sum 1 and
# loss 4, tracker 2; backward the auto-scaler's 2 and the loss's, softmaxes' and top-k's gradients 9.
EAGER_TOPK, EAGER_SCORES, EAGER_LOSS = 9, 6, 4
# Fused: each of the three becomes one pybind call launching one kernel.
FORWARD_KERNELS_SAVED = (EAGER_TOPK - 1) + (EAGER_SCORES - 1) + (EAGER_LOSS - 1)
# calls added: fused_topk_with_score_function (wrapper, validation, Function 3, mark_non_differentiable,
# save_for_backward) less the eager nested compute_topk; the scores' (wrapper, validation, Function 3, save);
# the loss's (wrapper, Function 3, save)
FORWARD_CALLS_ADDED = (1 + 1 + 3 + 1 + 1 - 1) + (1 + 1 + 3 + 1) + (1 + 3 + 1)
BACKWARD_KERNELS_SAVED = 9 - 3  # the three gradients' eager kernels → one kernel per fused Function
BACKWARD_CALLS_ADDED = 3 * 3 + 2  # each Function's backward, two gradient buffers (empty_like, empty)


def _spec(hidden: int = 256, seq: int = 128) -> LlamaSpec:
    return LlamaSpec(name="moe", layers=LAYERS, hidden=hidden, heads=8, ffn=4 * hidden, vocab=8000, seq_len=seq,
                     moe=MoESpec(experts=16, top_k=2, expert_ffn=hidden))


def _project(fusion: bool, engine: str = "analytic", spec: LlamaSpec | GPTSpec | None = None,
             ep: int = 4) -> Project:
    return Project(name="moe", hardware=load_system("dgx-h100"), workload=spec or _spec(),
                   mapping=Mapping(tp=1, dp=8, ep=ep, micro_batch=1, global_batch=16, moe_router_fusion=fusion),
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def _segments(plan, kind: str):
    return [s for st in plan.stages for (_c, k), ps in st.passes.items() if k == kind for s in ps.segments]


def test_host_time_saved_per_moe_layer_and_pass_is_the_counted_difference():
    """Per MoE layer, forward 16 launches fewer and 17 calls more, backward 6 fewer and 11 more: on dgx-h100
    (8 µs a launch, 3 µs a call) 77 µs and 15 µs less host work per layer and pass."""
    compute = make_plan(_project(False)).stages[0].dev.compute
    forward = FORWARD_KERNELS_SAVED * compute.host_dispatch_s - FORWARD_CALLS_ADDED * compute.host_call_s
    backward = BACKWARD_KERNELS_SAVED * compute.host_dispatch_s - BACKWARD_CALLS_ADDED * compute.host_call_s
    assert forward > 0 and backward > 0  # on this host the fusion saves time in both passes
    off, on = make_plan(_project(False)), make_plan(_project(True))
    for kind, saved in (("F", forward), ("B", backward)):
        host_off = sum(s.host_s for s in _segments(off, kind))
        host_on = sum(s.host_s for s in _segments(on, kind))
        assert host_off - host_on == pytest.approx(LAYERS * saved, rel=1e-9)


def test_device_work_is_unchanged():
    """The plan charges the routing op one kernel over the scores with or without the fusion (the eager chain's
    extra device floors were never charged: ``moe_host``'s docstring): device time and bytes stay."""
    off, on = make_plan(_project(False)), make_plan(_project(True))
    for kind in ("F", "B"):  # busy_s includes the device's wait for the host (dispatch_wait_s): that one moves
        device_on = [s.busy_s - s.dispatch_wait_s for s in _segments(on, kind)]
        assert device_on == pytest.approx([s.busy_s - s.dispatch_wait_s for s in _segments(off, kind)], rel=1e-12)
        assert [s.local_bytes for s in _segments(on, kind)] == [s.local_bytes for s in _segments(off, kind)]


def test_both_engines_agree_and_the_option_matters():
    """A host-bound toy MoE: the fusion shortens the iteration, by the same amount in both engines."""
    runs = {(f, e): simulate(_project(f, e)) for f in (False, True) for e in ("analytic", "event")}
    assert runs[(True, "analytic")].iteration_time_s < runs[(False, "analytic")].iteration_time_s * (1 - 1e-3)
    for f in (False, True):
        assert runs[(f, "event")].iteration_time_s == pytest.approx(runs[(f, "analytic")].iteration_time_s,
                                                                    rel=1e-9)


def test_off_is_the_default_and_is_not_saved():
    """Off is the mapping's default: left out of saved files, the same plan as a mapping that never names it."""
    p = _project(False)
    assert "moe_router_fusion" not in p.mapping.model_dump(mode="json")
    assert "moe_router_fusion" in _project(True).mapping.model_dump(mode="json")
    default = p.model_copy(update={"mapping": Mapping.model_validate(p.mapping.model_dump(mode="json"))})
    assert simulate(default).iteration_time_s == simulate(p).iteration_time_s


def test_a_dense_model_is_refused():
    dense = LlamaSpec(name="dense", layers=LAYERS, hidden=256, heads=8, ffn=1024, vocab=8000, seq_len=128)
    found = check_project(_project(True, spec=dense, ep=1))
    assert [p.path for p in found] == ["mapping.moe_router_fusion"]
    assert check_project(_project(False, spec=dense, ep=1)) == []
    assert check_project(_project(True)) == []


def test_cli_flag(capsys):
    from tilewright.engine.cli import main

    dense = ["run", "--system", "dgx-h100", "--model", "gpt", "--layers", "2", "--hidden", "256", "--heads", "8",
             "--seq-len", "128", "--tp", "1", "--pp", "1", "--dp", "8", "--global-batch", "16",
             "--engine", "analytic", "--json", "--quiet"]
    base = [*dense, "--moe-experts", "16", "--moe-top-k", "2", "--ep", "4"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*base, "--moe-router-fusion"]) == 0
    fused = json.loads(capsys.readouterr().out)
    assert fused["iteration_time_s"] < plain["iteration_time_s"]
    assert main([*dense, "--moe-router-fusion"]) != 0
    assert "mapping.moe_router_fusion" in capsys.readouterr().err


MOE = GPTSpec(name="moe-test", layers=4, hidden=512, heads=8, seq_len=256, vocab=4096,
              moe=MoESpec(experts=8, top_k=2, expert_ffn=1024, first_dense_layers=1))


@pytest.mark.parametrize("scope", [None, ["attn", "moe_router"]], ids=["eager", "graphs"])
def test_search_times_the_fusion_as_the_engine(scope: list[str] | None):
    """The search's layer table builds passes with its own ``PassContext`` (``search.op_settings``): it must
    carry the flag. Under the router's CUDA graph (``moe_router``) the routing group is replayed in both passes:
    the fusion then changes nothing of the host's work (the graph's part subtracted is the fused one)."""
    c = Candidate(1, 1, 8, 1)
    batch = 16

    def project(fusion: bool) -> Project:
        p = Project(name="t", hardware=load_system("dgx-h100"), workload=MOE, run=RunSettings(dtype="bf16"))
        return p.model_copy(update={"mapping": c.mapping(batch).model_copy(
            update={"moe_router_fusion": fusion, "cuda_graph_scope": scope})})

    p = project(True)
    assert check_project(p) == []
    want = AnalyticEngine().run(make_plan(p)).iteration_time_s
    eager = AnalyticEngine().run(make_plan(project(False))).iteration_time_s
    if scope is None:
        assert abs(want - eager) > 1e-4 * eager  # the option matters here
    else:
        assert want == pytest.approx(eager, rel=1e-12)
        for kind in ("F", "B"):
            host = [sum(s.host_s for s in _segments(make_plan(project(f)), kind)) for f in (False, True)]
            assert host[1] == pytest.approx(host[0], rel=1e-12)
    hw = elaborate(p.hardware, devices_needed=c.devices)
    est = Estimator(p, hw, build_workload(p.workload))
    m = c.micro_batches(batch)
    table, key = est.layer_table(c)
    timed = est.timed_chunks(c, m, est.chunks(table, key, c.pp, c.interleave))
    assert est.iteration_time(c, m, timed) == pytest.approx(want, rel=1e-6)
    assert est.exact_time(c, m, timed) == pytest.approx(want, rel=1e-6)


def test_moe_rows_run_the_fused_router():
    """calibrate_nemo_h100's MoE rows: the Megatron-LM recipes set moe_router_fusion (examples/moe_recipes/*/h100)
    and so does every Megatron-Bridge MoE performance script (set_qwen3_common_configs, set_gpt_oss_common_configs,
    set_deepseek_v3_common_configs), so each MoE row's project carries it and no gap names it."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from nemo_h100_published import rows
    from nemo_h100_run import project_for

    mlm = bridge = 0
    for row in rows():
        project = project_for(row)
        if project.workload.moe is None:
            continue
        assert project.mapping.moe_router_fusion, row.label
        assert not any("moe_router_fusion" in g for g in row.gaps), row.label
        mlm += row.pub.release.startswith("MLM#")
        bridge += not row.pub.release.startswith("MLM#")
    assert mlm > 0 and bridge > 0
