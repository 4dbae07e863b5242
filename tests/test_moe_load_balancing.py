"""``MoESpec.load_balancing`` 'none' (Megatron-Core ``moe_router_load_balancing_type`` "none", which Megatron-Bridge's
gpt-oss model sets): ``TopKRouter.routing`` skips its aux-loss branch (``is_aux_loss_enabled`` False), so the routing
op's host work loses the aux scores, the loss, the tracker and the auto-scaler (``plan.moe_host``).

Expected savings are restated here from the router's code, kernel by kernel and call by call, times the preset's
``host_dispatch_s`` / ``host_call_s``; the plan is read only for what it charged."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.workload import MoESpec
from tilewright.engine.simulate import make_plan, simulate

LAYERS = 2

# Forward, eager: compute_routing_scores_for_aux_loss's softmax, top-k, zeros, int, scatter, bool (6); the counts'
# sum (1); switch_load_balancing_loss_func's sum, product, sum, scale (4); the tracker's division, accumulation (2).
EAGER_FWD_KERNELS = 6 + 1 + 4 + 2
# calls: compute_routing_scores_for_aux_loss, _apply_aux_loss + its coefficient lookup, the token counts' helper +
# the reduction region's Function (3), the loss function, attach_and_log, the tracker, the auto-scaler's Function
# (3), _apply_seq_aux_loss and _apply_global_aux_loss + their lookups; less the two more lookups
# is_aux_loss_enabled makes when no type matches
EAGER_FWD_CALLS = 1 + 2 + (1 + 3) + 1 + 1 + 1 + 3 + 4 - 2
# fused: the scores' and the loss's Functions launch one kernel each; the counts' sum and the tracker's stay
FUSED_FWD_KERNELS = 1 + 1 + 1 + 2
FUSED_FWD_CALLS = (EAGER_FWD_CALLS + 2) + (1 + 1 + 3 + 1) + (1 + 3 + 1) - 2  # + the two fused wrappers' calls
# Backward, eager: the auto-scaler's ones and product, the aux softmax's gradient, the loss's three; calls: the
# auto-scaler's and the reduction's Function backward
EAGER_BWD_KERNELS, EAGER_BWD_CALLS = 2 + 1 + 3, 3 + 3
# fused: the auto-scaler's two and one backward kernel per fused Function; calls + both Functions' backward and
# one gradient buffer
FUSED_BWD_KERNELS, FUSED_BWD_CALLS = 2 + 2, EAGER_BWD_CALLS + 3 + 3 + 1


def _spec(balancing: str) -> LlamaSpec:
    return LlamaSpec(name="moe", layers=LAYERS, hidden=256, heads=8, ffn=1024, vocab=8000, seq_len=128,
                     moe=MoESpec(experts=16, top_k=2, expert_ffn=256, load_balancing=balancing))


def _project(balancing: str, fusion: bool = False, engine: str = "analytic") -> Project:
    return Project(name="moe", hardware=load_system("dgx-h100"), workload=_spec(balancing),
                   mapping=Mapping(tp=1, dp=8, ep=4, micro_batch=1, global_batch=16, moe_router_fusion=fusion),
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def _host(plan, kind: str) -> float:
    return sum(s.host_s for st in plan.stages for (_c, k), ps in st.passes.items() if k == kind
               for s in ps.segments)


@pytest.mark.parametrize("fusion", [False, True], ids=["eager", "fused"])
def test_host_time_saved_per_layer_is_the_aux_loss_part(fusion: bool):
    """Per MoE layer and pass the plan charges the aux-loss part's launches and calls less, nothing else."""
    compute = make_plan(_project("aux_loss")).stages[0].dev.compute
    kernels = {"F": FUSED_FWD_KERNELS if fusion else EAGER_FWD_KERNELS,
               "B": FUSED_BWD_KERNELS if fusion else EAGER_BWD_KERNELS}
    calls = {"F": FUSED_FWD_CALLS if fusion else EAGER_FWD_CALLS,
             "B": FUSED_BWD_CALLS if fusion else EAGER_BWD_CALLS}
    aux, none = make_plan(_project("aux_loss", fusion)), make_plan(_project("none", fusion))
    for kind in ("F", "B"):
        saved = kernels[kind] * compute.host_dispatch_s + calls[kind] * compute.host_call_s
        assert _host(aux, kind) - _host(none, kind) == pytest.approx(LAYERS * saved, rel=1e-9)


def test_the_remaining_routing_work_is_the_top_k():
    """Without the loss the routing op still issues the top-k chain: forward 9 eager launches (top-k, softmax,
    cast, the probabilities' zeros and scatter, the map's zeros, int, scatter, bool) or one fused; its host time
    stays positive in every pass."""
    from tilewright.engine.ir.ops import MoERole
    from tilewright.engine.plan.moe_host import framework_host

    compute = make_plan(_project("none")).stages[0].dev.compute
    routing = [op for op in make_plan(_project("none")).workload.ops() if op.moe and op.moe.role is MoERole.routing]
    assert routing and not routing[0].moe.aux_loss
    for fusion in (False, True):
        for backward in (False, True):
            host = framework_host(routing[0], backward, 4, False, compute, fusion)
            assert host is not None and host > 0
    top_k_eager = framework_host(routing[0], False, 4, False, compute, False)
    top_k_fused = framework_host(routing[0], False, 4, False, compute, True)
    # fusion: 9 launches become 1, the fused Function adds 6 calls (moe_host: wrapper, validation, Function,
    # mark_non_differentiable, save_for_backward, less the eager nested compute_topk)
    assert top_k_eager - top_k_fused == pytest.approx(8 * compute.host_dispatch_s - 6 * compute.host_call_s)


def test_device_work_is_unchanged_and_the_iteration_shortens_in_both_engines():
    aux, none = make_plan(_project("aux_loss")), make_plan(_project("none"))
    for kind in ("F", "B"):
        segs = [[s for st in p.stages for (_c, k), ps in st.passes.items() if k == kind for s in ps.segments]
                for p in (aux, none)]
        assert [s.local_bytes for s in segs[1]] == [s.local_bytes for s in segs[0]]
    runs = {(b, e): simulate(_project(b, engine=e)) for b in ("aux_loss", "none") for e in ("analytic", "event")}
    assert runs[("none", "analytic")].iteration_time_s < runs[("aux_loss", "analytic")].iteration_time_s
    for b in ("aux_loss", "none"):
        assert runs[(b, "event")].iteration_time_s == pytest.approx(runs[(b, "analytic")].iteration_time_s, rel=1e-9)


def test_default_is_aux_loss_and_is_not_saved():
    spec = _spec("aux_loss")
    assert MoESpec(experts=4, top_k=1, expert_ffn=8).load_balancing == "aux_loss"  # Megatron-Core's default
    assert "load_balancing" not in spec.moe.model_dump(mode="json")
    dumped = _spec("none").moe.model_dump(mode="json")
    assert dumped["load_balancing"] == "none"
    assert MoESpec.model_validate(dumped).load_balancing == "none"
    with pytest.raises(ValueError, match="load_balancing"):
        MoESpec(experts=4, top_k=1, expert_ffn=8, load_balancing="sinkhorn-ish")


def test_gpt_oss_rows_train_without_the_loss():
    """calibrate_nemo_h100: Megatron-Bridge's gpt-oss (GPTOSSProvider / GPTOSSBridge) sets the type "none"; every
    other MoE row keeps the aux-loss charge."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from nemo_h100_published import rows
    from nemo_h100_run import project_for

    seen = set()
    for row in rows():
        moe = project_for(row).workload.moe
        if moe is None:
            continue
        want = "none" if row.pub.model == "gpt-oss-120b" else "aux_loss"
        assert moe.load_balancing == want, row.label
        seen.add(want)
    assert seen == {"none", "aux_loss"}
