"""The serving simulator behaves as a queue of LLM requests must: single-request numbers at a trickle,
growing waits past capacity, Little's law, preemption that loses nothing, disaggregation that costs the KV
transfer, speculative decoding that pays for rejected drafts."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from tilewright.engine.ir import Project
from tilewright.engine.jobs import Cancelled
from tilewright.engine.perf.collectives import point_to_point
from tilewright.engine.serving import ServingConfig, SpecDecoding, build_instances, simulate_serving, sweep_rates
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads.transformer_inference import kv_cache_bytes

from tests.engine_cases import llama_inference

PROMPT, OUTPUT = 256, 32


def _project(**mapping) -> Project:
    data = llama_inference().model_dump(mode="json")
    data["run"] |= {"engine": "analytic", "contention": False}
    data["run"]["inference"] |= {"batch": 1, "prompt_tokens": PROMPT, "output_tokens": OUTPUT}
    data["mapping"] |= mapping
    return Project.model_validate(data)


TRICKLE = ServingConfig(rate=1e-3, count=4, chunk=PROMPT)  # ~1000 s apart: no request meets another


def test_at_a_trickle_each_request_sees_the_single_request_ttft_and_tpot():
    project = _project()
    single = simulate(project).metrics_json()
    result = simulate_serving(project, TRICKLE)
    assert len(result.records) == 4
    for r in result.records:
        assert r.scheduled_s == r.arrival_s
        assert r.ttft_s == pytest.approx(single["ttft_s"], rel=1e-9)
        assert r.tpot_s == pytest.approx(single["tpot_s"], rel=1e-6)
    assert result.preemptions == 0


def test_past_capacity_the_queue_grows_and_so_does_ttft():
    result = simulate_serving(_project(), ServingConfig(rate=20_000, count=300, max_batch=16))
    ttft = np.array([r.ttft_s for r in sorted(result.records, key=lambda r: r.arrival_s)])
    quarter = len(ttft) // 4
    assert ttft[-quarter:].mean() > 5 * ttft[:quarter].mean()
    assert np.corrcoef(np.arange(len(ttft)), ttft)[0, 1] > 0.9


def test_littles_law_mean_in_flight_is_rate_times_mean_latency():
    rate = 150.0
    result = simulate_serving(_project(), ServingConfig(rate=rate, count=600, seed=3))
    m = result.metrics()
    assert m["mean_in_flight"] > 1.0  # requests do overlap
    assert m["mean_in_flight"] == pytest.approx(rate * m["e2e_s"]["mean"], rel=0.15)


def test_a_tiny_kv_cache_preempts_and_still_serves_every_request():
    project = _project()
    config = ServingConfig(rate=20_000, count=30, max_batch=8)
    models = build_instances(project, config.token_budget, None)
    whole = math.ceil((PROMPT + OUTPUT) / models[0].kv.block_tokens)
    models[0].kv = dataclasses.replace(models[0].kv, blocks=2 * whole - 2)  # two prompts fit, not their growth
    result = simulate_serving(project, config, models=models)
    assert result.preemptions > 0
    assert len(result.records) == 30 and {r.id for r in result.records} == set(range(30))
    assert any(r.preemptions for r in result.records)
    for r in result.records:
        assert r.arrival_s <= r.scheduled_s <= r.first_token_s <= r.finish_s
    series = result.kv_series["serve"]
    assert max(f for _, f in series) <= 1.0
    assert series[-1][1] == 0.0  # every page given back


def test_disaggregation_adds_exactly_the_kv_transfer_at_a_trickle():
    together = simulate_serving(_project(tp=1), TRICKLE)
    apart = simulate_serving(_project(tp=1, dp=2, global_batch=2), dataclasses.replace(TRICKLE, disaggregate=(1, 1)))
    project = _project(tp=1, dp=2, global_batch=2)
    hw = make_plan(project).hw
    kv = kv_cache_bytes(project.workload, project.workload.layers, 1, 1, PROMPT, 2.0)
    transfer = point_to_point(hw, [(0, 1)], kv).time(hw)  # device 0 prefills, device 1 decodes
    assert transfer > 0
    for a, b in zip(together.records, apart.records, strict=True):
        assert b.ttft_s == pytest.approx(a.ttft_s, rel=1e-9)
        assert b.transfer_s == pytest.approx(transfer, rel=1e-9)
        assert b.e2e_s - a.e2e_s == pytest.approx(transfer, rel=1e-6)
    assert set(apart.kv_series) == {"prefill", "decode"}


def test_speculative_decoding_costs_more_when_nothing_is_accepted_and_gains_k_plus_1_when_all_is():
    assert SpecDecoding(4, 0.0).tokens_per_step == 1.0
    assert SpecDecoding(4, 0.5).tokens_per_step == pytest.approx((1 - 0.5**5) / 0.5)
    assert SpecDecoding(4, 1 - 1e-9).tokens_per_step == pytest.approx(5.0, rel=1e-6)
    project = _project()
    plain = simulate_serving(project, TRICKLE)
    rejected = simulate_serving(project, dataclasses.replace(TRICKLE, spec=SpecDecoding(4, 0.0)))
    accepted = simulate_serving(project, dataclasses.replace(TRICKLE, spec=SpecDecoding(4, 1.0)))
    tpot = [np.mean([r.tpot_s for r in res.records]) for res in (plain, rejected, accepted)]
    assert tpot[1] > tpot[0] > tpot[2]
    per_request = 1 + math.ceil((OUTPUT - 1) / 5)  # the prefill, then verify steps of 5 tokens
    assert accepted.iterations == len(accepted.records) * per_request
    assert rejected.iterations == plain.iterations


def test_progress_rises_to_one_and_cancel_stops_the_simulation():
    seen: list[float] = []
    simulate_serving(_project(), ServingConfig(rate=2000, count=200), progress=lambda f, _t: seen.append(f))
    assert seen and seen == sorted(seen) and seen[-1] == 1.0
    with pytest.raises(Cancelled):
        simulate_serving(_project(), ServingConfig(rate=2000, count=200), cancel=lambda: True)


def test_a_rate_sweep_finds_the_highest_rate_meeting_the_slo():
    project = _project()
    trickle = simulate_serving(project, TRICKLE).records[0]
    config = ServingConfig(count=150, slo_ttft_s=3 * trickle.ttft_s, slo_tpot_s=3 * trickle.tpot_s)
    sweep = sweep_rates(project, config, [1e5, 10.0, 100.0])
    assert sweep.rates == [10.0, 100.0, 1e5]
    met = [res.meets_slo() for res in sweep.results]
    assert met[0] and not met[-1]
    assert sweep.best_rate == max(r for r, ok in zip(sweep.rates, met, strict=True) if ok)
    p50 = [res.metrics()["ttft_s"]["p50"] for res in sweep.results]
    assert p50 == sorted(p50)


def test_data_parallel_replicas_share_the_queue_and_serve_a_burst_sooner():
    burst = ServingConfig(rate=50_000, count=120, max_batch=8)
    one = simulate_serving(_project(tp=1), burst)
    two = simulate_serving(_project(tp=1, dp=2, global_batch=2), burst)
    assert two.kv_pages["serve"] == 2 * one.kv_pages["serve"]
    assert two.span_s < 0.7 * one.span_s
    assert len(two.records) == 120


def test_a_prefill_group_with_room_for_one_prompt_hands_every_request_over():
    project = _project(tp=1, dp=2, global_batch=2)
    config = ServingConfig(rate=50_000, count=20, disaggregate=(1, 1))
    models = build_instances(project, config.token_budget, config.disaggregate)
    one = math.ceil(PROMPT / models[0].kv.block_tokens)
    models[0].kv = dataclasses.replace(models[0].kv, blocks=one)  # the next prompt waits for a transfer
    result = simulate_serving(project, config, models=models)
    assert len(result.records) == 20 and all(r.transfer_s > 0 for r in result.records)
    firsts = np.sort([r.first_token_s for r in result.records])
    transfer = min(r.transfer_s for r in result.records)
    assert (np.diff(firsts) >= transfer * (1 - 1e-9)).all()  # one prompt at a time: each waits for a transfer


def test_time_between_tokens_has_one_gap_per_token_after_the_first_and_they_add_up_to_the_decode_time():
    result = simulate_serving(_project(), ServingConfig(rate=300, count=80, chunk=64, seed=5))
    recs = result.records
    assert result.tbt_s.size == sum(r.output_tokens - 1 for r in recs)
    assert result.tbt_s.sum() == pytest.approx(sum(r.finish_s - r.first_token_s for r in recs), rel=1e-9)
    m = result.metrics()["tbt_s"]
    assert m["p50"] <= m["p99"] and m["mean"] == pytest.approx(
        sum(r.finish_s - r.first_token_s for r in recs) / result.tbt_s.size, rel=1e-9
    )
