"""Tied word embeddings with pipeline parallelism (``engine.plan.tied``): Megatron-LM keeps a copy of the word
embedding on the last stage (weight, gradient and optimizer state) and all-reduces the two copies' gradients
over the embedding group — the first and the last stage of each pipeline — after the data-parallel reduction,
before the optimizer step.

Expected sizes come from the model's dimensions, expected seconds from the dgx-a100 preset's NVSwitch figures
(a ring all-reduce over 2 ranks: each sends and receives the whole buffer once, in one step each way)."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.ops import TensorSplit
from tilewright.engine.simulate import make_plan, simulate

VOCAB, HIDDEN = 51200, 1024
SPEC = GPTSpec(name="gpt-tied", layers=4, hidden=HIDDEN, heads=16, seq_len=1024, vocab=VOCAB)
FP32 = 4  # gradients in mixed precision
NVLINK_BYTES_PER_S = 300e9 * 0.75  # dgx-a100 preset: NVLink3 300 GB/s per direction, efficiency 0.75
NCCL_SIMPLE_RING_S = (8.4e-6, 3.4e-6)  # dgx-a100 preset: NCCL Simple ring, per collective and per step (NVLink)
SPLIT = {TensorSplit.column, TensorSplit.row, TensorSplit.heads, TensorSplit.vocab}  # Megatron: 1/tp per rank


def _project(tied: bool = True, pp: int = 2, tp: int = 2, dp: int = 2, engine: str = "analytic", **mapping) -> Project:
    m = {"tp": tp, "pp": pp, "dp": dp, "micro_batch": 1, "global_batch": 4 * dp} | mapping
    return Project(
        name="tied",
        hardware=load_system("dgx-a100"),
        workload=SPEC.model_copy(update={"tie_embeddings": tied}),
        mapping=Mapping(**m),
        run=RunSettings(dtype="bf16", engine=engine, contention=False),
    )


def _run(project: Project, **run) -> Project:
    return project.model_copy(update={"run": project.run.model_copy(update=run)})


@pytest.mark.parametrize(("tp", "zero", "dp"), [(2, 0, 2), (4, 1, 1), (2, 2, 2), (1, 3, 4)])
def test_the_embedding_group_all_reduces_the_copys_gradient(tp, zero, dp):
    """vocab × hidden / tp gradients per device (fp32), or with ZeRO-2/3 the device's 1/dp shard of them; over
    2 ranks the ring all-reduce moves the whole buffer once per rank. tp · pp · dp ≤ 8: one NVSwitch node."""
    plan = make_plan(_project(tp=tp, zero=zero, dp=dp))
    nbytes = VOCAB * HIDDEN / tp * FP32 / (dp if zero >= 2 else 1)
    assert plan.tied_bytes == pytest.approx(nbytes)
    coll = plan.tied_collective()
    assert sum(ph.bytes_per_member for ph in coll.phases) * coll.payload_fraction == pytest.approx(nbytes)
    bandwidth = nbytes / NVLINK_BYTES_PER_S
    base, step = NCCL_SIMPLE_RING_S
    # a ring all-reduce over 2 ranks: 2 steps, a reduce-scatter and an all-gather
    assert bandwidth < coll.time(plan.hw) <= bandwidth + base + 2 * step + 1e-12
    assert plan.tied_ranks() == (0, 1)


def test_the_all_reduce_pairs_each_first_stage_device_with_its_last_stage_peer():
    """Megatron's embedding group: for each replica and tensor rank, the first and last stage's device. Pairs
    run at once, each on its own two devices' links: every device of both stages sends the buffer once."""
    plan = make_plan(_project(pp=4, tp=2, dp=1))
    coll = plan.tied_collective()
    devices = {d for r in (0, 3) for g in plan.stages[r].groups for d in g}
    middle = {d for r in (1, 2) for g in plan.stages[r].groups for d in g}
    used = {lk for ph in coll.phases for lk in ph.usage}
    touched = {plan.hw.links[lk].src for lk in used} | {plan.hw.links[lk].dst for lk in used}
    node_of = {plan.hw.devices[d].node: d for d in range(len(plan.hw.devices))}
    assert {node_of[n] for n in touched if n in node_of} == devices
    assert not middle & {node_of[n] for n in touched if n in node_of}


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_tied_pays_the_all_reduce_as_dp_comm_untied_does_not(engine):
    """Untied, the last stage holds its own logits weight (as many parameters as the copy), so everything else
    is equal: the tied run's dp_comm is larger by exactly the all-reduce."""
    tied, untied = simulate(_project(True, engine=engine)), simulate(_project(False, engine=engine))
    plan = make_plan(_project(True))
    assert [st.params for st in plan.stages] == [st.params for st in make_plan(_project(False)).stages]
    extra = tied.time_breakdown_s["dp_comm"] - untied.time_breakdown_s["dp_comm"]
    nbytes = VOCAB * HIDDEN / 2 * FP32
    base, step = NCCL_SIMPLE_RING_S
    assert nbytes / NVLINK_BYTES_PER_S < extra <= nbytes / NVLINK_BYTES_PER_S + base + 2 * step + 1e-12
    assert tied.iteration_time_s > untied.iteration_time_s


@pytest.mark.parametrize("mapping", [{"pp": 1, "dp": 4}, {"pp": 2}])
def test_one_stage_or_untied_pays_nothing(mapping):
    """One stage holds embedding and logits together: no copy, nothing to reduce; untied: nothing to tie."""
    tied = "pp" in mapping and mapping["pp"] == 1
    plan = make_plan(_project(tied, **mapping))
    assert plan.tied is None and plan.tied_bytes == 0 and not plan.tied_collective().phases
    assert plan.tied_ranks() == ()
    result = simulate(_project(tied, engine="event", **mapping))
    assert not [s for s in _slices(result) if "tied" in s[0]]


def test_the_last_stage_holds_the_copy_and_its_optimizer_state():
    """Megatron's last stage holds the word embedding's copy as a parameter of its chunk: its weights, its fp32
    gradient and its Adam state (the optimizer steps both copies), sharded like any weight by ZeRO-1."""
    plan = make_plan(_project(zero=1))
    tp, dp = 2, 2
    last = plan.stages[-1]
    own = sum(
        op.params / (tp if op.split in SPLIT else 1)
        for idx in last.chunk_layers.values()
        for i in idx
        for op in plan.workload.layer_ops(i)
    )
    copy = VOCAB * HIDDEN / tp
    assert last.params == pytest.approx(own + copy)
    assert last.state.weights == pytest.approx((own + copy) * 2)  # bf16
    assert last.state.optimizer == pytest.approx((own + copy) * 12 / dp)  # fp32 master, momentum, variance
    first = plan.stages[0]
    first_own = sum(
        op.params / (tp if op.split in SPLIT else 1)
        for idx in first.chunk_layers.values()
        for i in idx
        for op in plan.workload.layer_ops(i)
    )
    assert first.params == pytest.approx(first_own)


def test_zero3_gathers_and_reduces_the_copy_with_the_head_layer():
    """ZeRO-3: the last stage's head layer gathers the copy's bf16 weights before its forward (the logits need
    them) and reduce-scatters its fp32 gradient after its backward, with the layer's own parameters."""
    plan = make_plan(_project(zero=3, overlap_param_gather=False, overlap_grad_reduce=False))
    tp = 2
    last = plan.stages[-1]
    head = max(i for idx in last.chunk_layers.values() for i in idx)
    own = sum(op.params / (tp if op.split in SPLIT else 1) for op in plan.workload.layer_ops(head))
    copy = VOCAB * HIDDEN / tp
    gathers = [s.comm for s in last.passes[(0, "F")].segments if s.comm and s.comm[0] == "dp:all-gather"]
    reduces = [s.comm for s in last.passes[(0, "B")].segments if s.comm and s.comm[0] == "dp:reduce-scatter"]
    assert gathers[-1][1] == pytest.approx((own + copy) * 2)  # the head is the stage's last layer forward
    assert reduces[0][1] == pytest.approx((own + copy) * FP32)  # and its first backward


def test_inference_holds_the_copy_but_reduces_nothing():
    project = _project()
    project = project.model_copy(update={"run": project.run.model_copy(update={"mode": "infer"})})
    plan = make_plan(project)
    training = make_plan(_project())
    assert plan.stages[-1].state.weights == pytest.approx(training.stages[-1].state.weights)
    assert plan.tied_bytes == 0 and not plan.tied_collective().phases


@pytest.mark.parametrize(
    "mapping",
    [
        {"zero": 1},
        {"zero": 2, "overlap_grad_reduce": True},
        {"zero": 3, "fsdp": True},
        {"schedule": "interleaved-1f1b", "interleave": 2},
        {"pp": 4, "tp": 1, "schedule": "gpipe"},
    ],
)
def test_both_engines_agree(mapping):
    a = simulate(_project(**mapping))
    for run in ({}, {"aggregate": False}):
        e = simulate(_run(_project(engine="event", **mapping), **run))
        assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)
        for category in ("dp_comm", "bubble", "optimizer"):
            assert e.time_breakdown_s[category] == pytest.approx(a.time_breakdown_s[category], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_the_timeline_shows_the_all_reduce_on_both_stages_before_the_optimizer(engine):
    slices = _slices(simulate(_project(engine=engine)))
    tied = [s for s in slices if s[0] == "tied embedding all-reduce"]
    assert sorted(s[1] for s in tied) == [0, 1] and tied[0][2] == pytest.approx(tied[1][2])
    for _label, stage, start, dur in tied:
        step = next(o for o in slices if o[0] == "optimizer step" and o[1] == stage)
        assert step[2] == pytest.approx(start + dur)


def _slices(result) -> list[tuple[str, int, float, float]]:
    """(label, stage, start, duration) of every timeline slice."""
    tl = result.timeline
    a = tl.arrays()
    return [
        (tl.labels[int(li)], int(st), float(t), float(d))
        for li, st, t, d in zip(a["label"], a["stage"], a["start"], a["dur"], strict=True)
    ]
