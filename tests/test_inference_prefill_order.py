"""Prefill order (run.inference.prefill, default the device's compute.runtime_prefill): a batch prefilled at
once gives every sequence its first token at the prefill's end; prefilled one sequence after another
(tt-transformers), the first sequence's first token comes after one sequence's prefill, the decode that
follows is the same."""

from __future__ import annotations

import math

import pytest
from tilewright.engine.io.presets import load_model, load_system
from tilewright.engine.ir import Mapping, Project, RunSettings
from tilewright.engine.ir.common import PrefillOrder
from tilewright.engine.simulate import simulate


def _n150(engine: str, batch: int, prefill: str | None, pp: int = 1) -> Project:
    system = load_system("wormhole-n300" if pp > 1 else "wormhole-n150")
    return Project(
        name="prefill-order",
        hardware=system,
        workload=load_model("llama2-7b"),
        mapping=Mapping(pp=pp, formats={"weights": "bfp8", "activations": "bf16", "kv_cache": "bfp8"}),
        run=RunSettings(
            mode="infer",
            engine=engine,
            contention=False,
            inference={"batch": batch, "prompt_tokens": 128, "output_tokens": 4, "prefill": prefill},
        ),
    )


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_sequential_first_token_is_one_sequences_prefill(engine):
    one = simulate(_n150(engine, 1, "sequential"))
    four = simulate(_n150(engine, 4, "sequential"))
    batched = simulate(_n150(engine, 4, "batched"))
    assert math.isclose(four.ttft_s, one.ttft_s, rel_tol=1e-9)
    step = load_system("wormhole-n150").children[0].compute.runtime_step_s or 0.0  # the runtime's host work, once
    assert math.isclose(four.prefill_s - step, 4 * (one.prefill_s - step), rel_tol=1e-9)  # the sequences follow
    assert math.isclose(batched.ttft_s, batched.prefill_s, rel_tol=1e-12)  # everyone's token at the end
    assert four.ttft_s < batched.ttft_s
    assert math.isclose(four.tpot_s, batched.tpot_s, rel_tol=1e-9)  # the decode does not change
    assert any("sequential prefill" in n for n in four.notes)
    assert not any("sequential prefill" in n for n in batched.notes)


def test_the_device_runtime_sets_the_default():
    assert load_system("wormhole-n150").children[0].compute.runtime_prefill is PrefillOrder.sequential
    assert load_system("dgx-a100").children[0].children[0].compute.runtime_prefill is PrefillOrder.batched
    default = simulate(_n150("analytic", 4, None))
    explicit = simulate(_n150("analytic", 4, "sequential"))
    assert default.ttft_s == explicit.ttft_s
    assert default.ttft_s < default.prefill_s


def test_engines_agree_on_a_pipeline():
    a = simulate(_n150("analytic", 4, "sequential", pp=2))
    e = simulate(_n150("event", 4, "sequential", pp=2))
    assert math.isclose(a.ttft_s, e.ttft_s, rel_tol=1e-9)
    assert a.ttft_s < a.prefill_s


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_sequential_first_token_counts_the_tensor_parallel_collectives(engine):
    def n300(batch: int) -> Project:
        p = _n150(engine, batch, "sequential")
        return p.model_copy(
            update={"hardware": load_system("wormhole-n300"), "mapping": p.mapping.model_copy(update={"tp": 2})}
        )

    one, four = simulate(n300(1)), simulate(n300(4))
    assert one.time_breakdown_s["tp_comm"] > 0
    assert math.isclose(four.ttft_s, one.ttft_s, rel_tol=1e-9)
