"""benchmarks/megatron_ci_loop.py: the training-loop host work Megatron's CI pays and the model lacks (diagnostic).

The counts are checked against the code's structure re-derived here (which timers a run creates, what each
timer report launches), not against the module's own constants; the prices against a device whose only non-zero
host cost is the one under test.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import megatron_ci_loop as loop  # noqa: E402
from calibrate_public_megatron_logs import project_for, rows  # noqa: E402
from tilewright.engine.simulate import make_plan  # noqa: E402

# training_log's timers_to_log (Megatron-LM 2023) with the --timing-log-level each is created at and when
TIMERS = {
    "forward-backward": 1, "forward-compute": 2, "backward-compute": 2, "batch-generator": 2,
    "forward-recv": 2, "forward-send": 2, "backward-recv": 2, "backward-send": 2,
    "forward-send-forward-recv": 2, "forward-send-backward-recv": 2, "backward-send-forward-recv": 2,
    "backward-send-backward-recv": 2, "forward-backward-send-forward-backward-recv": 2,
    "layernorm-grads-all-reduce": 1, "embedding-grads-all-reduce": 1, "grads-all-reduce": 1,
    "grads-reduce-scatter": 1, "params-all-gather": 1, "optimizer-copy-to-main-grad": 1,
    "optimizer-unscale-and-check-inf": 1, "optimizer-clip-main-grad": 1, "optimizer-count-zeros": 1,
    "optimizer-inner-step": 1, "optimizer-copy-main-to-model-params": 1, "optimizer": 0,
}
MIDDLE_STAGE_P2P = ("forward-recv", "forward-send", "backward-recv", "backward-send", "forward-send-backward-recv",
                    "backward-send-forward-recv")  # 1F1B without interleaving, a middle stage


def _expected_timers(level: int, pp: int, fp16: bool, zeros: bool, distopt: bool) -> int:
    """Timers a rank creates, from the table above and the conditions in Megatron's code."""
    out = 0
    for name, lvl in TIMERS.items():
        if lvl > level:
            continue
        if "send" in name or "recv" in name:
            if pp == 1 or name not in MIDDLE_STAGE_P2P:
                continue
            if pp == 2 and name not in ("forward-recv", "backward-send", "backward-send-forward-recv"):
                continue  # the last stage (two stages: no middle one)
        if name == "optimizer-unscale-and-check-inf" and not fp16:
            continue
        if name == "optimizer-count-zeros" and not zeros:
            continue
        if name == "params-all-gather" and not distopt:
            continue
        if name == "grads-reduce-scatter":
            continue  # only the distributed optimizer's, which replaces grads-all-reduce's timer
        out += 1
    return out


@pytest.mark.parametrize("level", [0, 1, 2])
@pytest.mark.parametrize("pp", [1, 2, 4])
@pytest.mark.parametrize("fp16", [True, False])
def test_timer_names_follow_the_code(level: int, pp: int, fp16: bool) -> None:
    r = {"timing_log_level": level, "pp": pp, "precision": "fp16" if fp16 else "bf16",
         "log_num_zeros_in_grad": True, "zero": 0}
    assert loop.timer_names(r) == _expected_timers(level, pp, fp16, True, False)
    assert len(TIMERS) == loop.LISTED_TIMERS


def _compute(**costs: float):
    plan = make_plan(project_for(rows()[0]))
    base = plan.stages[0].dev.compute
    zero = dict.fromkeys(("host_dispatch_s", "host_call_s", "host_sync_s", "host_collective_s", "fixed_op_s"), 0.0)
    return base.model_copy(update={**zero, **costs})


def test_timer_report_counts_launches_calls_and_syncs() -> None:
    existing = 14
    missing = 25 - existing
    # launches: zeros; existing: fill, gt, nonzero, index, min, max; missing: gt, nonzero, index
    assert loop.report_seconds(_compute(host_dispatch_s=1.0), existing, 0.0) == pytest.approx(
        1 + 6 * existing + 3 * missing)
    # synchronisations: nonzero's count, min and max .item() (existing); nonzero's count (missing)
    assert loop.report_seconds(_compute(host_sync_s=1.0), existing, 0.0) == pytest.approx(3 * existing + missing)
    # the all-gather: one collective call and its device time
    assert loop.report_seconds(_compute(host_collective_s=1.0), existing, 0.5) == pytest.approx(1.5)


def test_loop_costs_of_the_ci_rows() -> None:
    by_id = {r["id"]: r for r in rows()}
    plain = by_id["ci-2023-tp1-pp1-ogr"]
    a = loop.loop_costs(plain, project_for(plain))
    assert a.total == pytest.approx(a.timer_reports + a.training_log)
    # every priced cost is positive and far below the iteration (ms, not tens of ms)
    assert 0 < a.timer_reports < 0.01 and 0 < a.training_log < 0.01
    # logging every second iteration halves timers.log: the 7B rows' reports are cheaper than per-iteration ones
    seven = by_id["ci-7b-tp4-pp1"]
    assert seven["log_interval"] == 2
    once = loop.loop_costs({**seven, "log_interval": 1}, project_for(seven))
    assert loop.loop_costs(seven, project_for(seven)).timer_reports < once.timer_reports


def test_optimizer_loops_are_the_models_not_the_diagnostics() -> None:
    """The optimizer's per-tensor Python moved into the model (``plan.train_step.loop_seconds``): the diagnostic
    no longer prices it (no double count), and the plan's optimizer time of a CI row includes it — a dearer
    framework call lengthens the step by the stage's parameter tensors (12 per layer, the word and position
    embeddings, the final LayerNorm's two; the distributed optimizer: its 1/dp share) times 11 calls."""
    assert set(loop.LoopCosts.__dataclass_fields__) == {"timer_reports", "training_log"}
    by_id = {r["id"]: r for r in rows()}
    for rid in ("ci-2023-tp1-pp1-ogr", "ci-2023-tp1-pp1-distopt"):
        r = by_id[rid]
        p = project_for(r, "analytic", ("log_params_norm", "log_num_zeros_in_grad"))  # their loops: train_logging's
        dearer = p.model_dump(mode="json")
        gpu = dearer["hardware"]["children"][0]["children"][0]
        gpu["compute"]["host_call_s"] += 1e-6
        a, b = make_plan(p), make_plan(type(p).model_validate(dearer))
        tensors = (12 * r["layers"] + 2 + 2) / (r["dp"] if r["zero"] >= 1 else 1)
        assert b.stages[0].optimizer_s - a.stages[0].optimizer_s == pytest.approx(tensors * 11 * 1e-6, rel=1e-6)


def test_new_columns_parse() -> None:
    for r in rows():
        assert r["log_interval"] >= 1
        # the 2024-25 configs (nightly, Megatron-Core and TE pairs, 7B) pass --deterministic-mode; 2023 ones do not
        assert r["deterministic_mode"] == r["id"].startswith(("ci-nightly", "ci-mcore", "ci-7b", "ci-te"))
        assert r["log_timers_to_tensorboard"]


def test_loss_averaging_is_paid_per_micro_batch() -> None:
    r = next(x for x in rows() if x["id"] == "ci-2023-tp1-pp2")
    p = project_for(r)
    one = loop.loop_costs(r, p)
    more = loop.loop_costs({**r, "gbs": 2 * r["gbs"]}, p)  # twice the micro-batches per iteration
    assert more.training_log > one.training_log
    assert more.timer_reports == one.timer_reports
