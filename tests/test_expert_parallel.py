"""Expert parallelism (``mapping.ep``): all-to-all dispatch/combine, expert weights per device, imbalance."""

from __future__ import annotations

import pytest
from tilewright.engine.errors import InputError
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.ops import MoERole
from tilewright.engine.plan.checks import raise_for_problems
from tilewright.engine.simulate import make_plan, simulate

SEQ, HIDDEN, EXPERTS, TOP_K = 1024, 1024, 8, 2
SPEC = GPTSpec(
    name="moe",
    layers=2,
    hidden=HIDDEN,
    heads=16,
    seq_len=SEQ,
    vocab=32000,
    moe={"experts": EXPERTS, "top_k": TOP_K, "expert_ffn": 2 * HIDDEN},
)


def _project(ep: int = 1, engine: str = "analytic", imbalance: float = 1.0, tp: int = 1, spec=SPEC) -> Project:
    mapping = Mapping(tp=tp, dp=8 // tp, ep=ep, expert_imbalance=imbalance, micro_batch=2, global_batch=16 // tp)
    return Project(
        name="moe",
        hardware=load_system("dgx-a100"),
        workload=spec,
        mapping=mapping,
        run=RunSettings(dtype="bf16", engine=engine, contention=False),
    )


def _a2a(plan, kind: str = "F"):
    return [seg.comm for seg in plan.stages[0].passes[(0, kind)].segments if seg.comm and seg.comm[0].startswith("ep:")]


@pytest.mark.parametrize("tp", [1, 2])
def test_each_token_goes_to_its_top_k_experts_and_back(tp):
    """Per MoE layer and micro-batch of b sequences: dispatch and combine each move s·b·top_k hidden vectors
    (bf16) per device, 1/tp of them per tensor rank; (ep − 1)/ep of them leave the device."""
    plan = make_plan(_project(ep=4, tp=tp))
    per_rank = SEQ * 2 * TOP_K * HIDDEN * 2 / tp
    moe_layers = sum(
        1 for li in plan.workload.layers if any(op.moe is not None for op in plan.workload.layer_ops(li.index))
    )
    for kind in ("F", "B"):
        comms = _a2a(plan, kind)
        assert len(comms) == 2 * moe_layers
        assert all(nbytes == pytest.approx(per_rank) for _, nbytes in comms)
    coll = plan.tp_collective(0, 0, *_a2a(plan)[0])
    assert coll.phases[0].bytes_per_member == pytest.approx(3 / 4 * per_rank)


def test_expert_weights_split_over_the_expert_ranks():
    one, four = make_plan(_project(1)), make_plan(_project(4))
    experts = sum(op.params for op in one.workload.ops() if op.moe is not None and op.moe.role is MoERole.expert)
    assert one.stages[0].params - four.stages[0].params == pytest.approx(experts * (1 - 1 / 4))
    assert simulate(_project(4)).peak_memory_bytes < simulate(_project(1)).peak_memory_bytes


def test_an_imbalanced_router_slows_the_expert_gemms_only():
    even, skewed = make_plan(_project(4)), make_plan(_project(4, imbalance=1.5))
    expert_flops = (
        sum(op.flops for op in even.workload.ops() if op.moe is not None and op.moe.role is MoERole.expert) * 2
    )  # micro-batch 2
    extra = skewed.stages[0].passes[(0, "F")].flops - even.stages[0].passes[(0, "F")].flops
    assert extra == pytest.approx(0.5 * expert_flops)
    assert simulate(_project(4, imbalance=1.5)).iteration_time_s > simulate(_project(4)).iteration_time_s


@pytest.mark.parametrize("ep", [2, 8])
def test_both_engines_agree(ep):
    a, e = simulate(_project(ep, "analytic")), simulate(_project(ep, "event"))
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_the_all_to_all_is_reported_as_expert_communication_not_tensor(engine):
    """Per micro-batch the stage waits for its dispatch and combine all-to-alls: that time is ``ep_comm``
    (its own colour in the studio), the tensor group's collectives stay ``tp_comm``."""
    project = _project(4, engine, tp=2)
    plan = make_plan(project)
    per_micro_batch = sum(plan.tp_time(0, 0, *c) for kind in ("F", "B") for c in _a2a(plan, kind))
    result = simulate(project)
    b = result.time_breakdown_s
    assert b["ep_comm"] == pytest.approx(plan.micro_batches * per_micro_batch, rel=1e-9)
    assert b["tp_comm"] > 0 and b.get("cp_comm", 0.0) == 0
    assert simulate(_project(1, engine, tp=2)).time_breakdown_s.get("ep_comm", 0.0) == 0


def test_ep_needs_experts_and_a_dividing_dp():
    dense = GPTSpec(name="dense", layers=2, hidden=HIDDEN, heads=16, seq_len=SEQ, vocab=32000)
    with pytest.raises(InputError, match="mapping.ep"):
        raise_for_problems(_project(2, spec=dense), "test")
    with pytest.raises(InputError, match="does not divide dp"):
        raise_for_problems(_project(3), "test")


def test_search_explores_expert_parallelism_and_times_it_as_run_does():
    """The search's second stage varies ep on the MoE model; every ep candidate it ranks is timed as
    ``tilewright run`` times that mapping with the analytic engine, and adding the stage never makes the
    best mapping slower."""
    from tilewright.engine.search.parallel.extended import first_stage_only
    from tilewright.engine.search.parallel.search import search

    project = _project(1)
    dense = search(project, 8, 16, resimulate=False, extensions=first_stage_only())
    full = search(project, 8, 16, resimulate=False)
    ranked_ep = [r for r in full.ranked if r.candidate.ep > 1]
    assert ranked_ep and full.extended > 0
    assert full.ranked[0].iteration_time_s <= dense.ranked[0].iteration_time_s * (1 + 1e-9)
    for r in ranked_ep[:2]:
        c = r.candidate
        etp = c.expert_tp or c.tp  # expert tp below tp folds ep over tp × dp (``plan.experts``)
        assert (c.tp * c.dp) % (c.ep * etp) == 0 and EXPERTS % c.ep == 0
        mapping = c.mapping(16, project.mapping)
        assert mapping.ep == c.ep
        run = simulate(project.model_copy(update={"mapping": mapping}))
        assert r.iteration_time_s == pytest.approx(run.iteration_time_s, rel=1e-9)


def test_search_flags_narrow_the_second_stage(capsys):
    """--ep/--zero/--no-offload restrict what the second stage tries and what the ranking shows."""
    import json

    from tilewright.engine.cli import main

    base = ["search", "--system", "dgx-h100", "--model", "gpt", "--layers", "4", "--hidden", "2048", "--heads",
            "16", "--moe-experts", "8", "--moe-top-k", "2", "--devices", "16", "--global-batch", "32",
            "--no-simulate", "--json", "--quiet"]
    assert main(base) == 0
    free = json.loads(capsys.readouterr().out)["candidates"]
    assert any(c["ep"] > 1 for c in free)  # by default an MoE model's experts are spread
    assert main([*base, "--ep", "1", "--zero", "0,1", "--no-offload"]) == 0
    narrowed = json.loads(capsys.readouterr().out)["candidates"]
    assert narrowed and all(c["ep"] == 1 and c["zero"] <= 1 and not c["fsdp"] for c in narrowed)
    assert all(c["offload_optimizer"] is None for c in narrowed)
    assert main([*base, "--zero", "4"]) == 2
    assert "--zero: '4': choose from 0, 1, 2, 3, fsdp" in capsys.readouterr().err
    assert main([*base, "--ep", "0"]) == 2
