"""ZeRO with context parallelism: the weights' state is sharded, gathered and reduced over the dp · cp replicas.

Context ranks hold the same weights, and Megatron-Core's distributed optimizer and its gradient and parameter
buffers live on the data-parallel group *with* context parallelism (``plan.sharding``). Expected numbers are
derived by hand from the model's shape, not read back from the plan.
"""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan import stage_options
from tilewright.engine.simulate import make_plan, simulate

H, L, V, S = 2048, 4, 51200, 8192
SPEC = GPTSpec(name="gpt-long", layers=L, hidden=H, heads=16, seq_len=S, vocab=V)
TP = 2
NVLINK_BYTES_PER_S = 300e9 * 0.75  # dgx-a100 preset: NVLink3 300 GB/s per direction, efficiency 0.75
# NCCL's Simple protocol over NVSwitch, the slowest to start (dgx-a100 preset, from NCCL's tuning model):
# per collective and per ring step
NCCL_FIXED_S, NCCL_STEP_S = 8.4e-6, 3.4e-6
# mixed precision with Adam (bf16): bf16 weights, fp32 gradient buffer, fp32 master copy + two fp32 moments
WEIGHT_B, GRAD_B, OPTIMIZER_B = 2, 4, 4 + 4 + 4


def _params_per_device() -> float:
    """Parameters one tensor rank holds (pp 1): the vocabulary-split word embedding and every layer's
    weights and column/row-split biases over tp (qkv 3h, out_proj h, mlp_up 4h, mlp_down h), the position
    embedding and the layer norms (two per block and the final one, 2h each) whole."""
    split = V * H + L * (12 * H * H + 9 * H)
    whole = S * H + L * 2 * 2 * H + 2 * H
    return split / TP + whole


def _project(cp: int, dp: int, zero: int = 1, engine: str = "analytic", **mapping) -> Project:
    m = {"tp": TP, "dp": dp, "cp": cp, "micro_batch": 1, "global_batch": 4 * dp, "zero": zero} | mapping
    return Project(
        name="cp-zero",
        hardware=load_system("dgx-a100"),
        workload=SPEC,
        mapping=Mapping(**m),
        run=RunSettings(dtype="bf16", engine=engine, contention=False),
    )


@pytest.mark.parametrize(("cp", "dp"), [(2, 2), (2, 1), (1, 4), (1, 2)])
def test_zero1_shards_the_optimizer_state_over_dp_times_cp(cp, dp):
    """ZeRO-1 on tp 2 (8 GPUs with cp 2, dp 2): optimizer state per device = params/tp × 12 B / (dp·cp);
    weights and gradients stay whole. cp 1 is the plain data-parallel case."""
    p = _params_per_device()
    st = make_plan(_project(cp, dp)).stages[0]
    assert st.params == pytest.approx(p, rel=1e-12)
    assert st.state.optimizer == pytest.approx(p * OPTIMIZER_B / (dp * cp), rel=1e-12)
    assert st.state.weights == pytest.approx(p * WEIGHT_B, rel=1e-12)
    assert st.state.gradients == pytest.approx(p * GRAD_B, rel=1e-12)


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_zero_stages_free_memory_by_dp_times_cp_in_both_engines(engine):
    """Peak memory per device drops stage by stage by the (dp·cp − 1)/(dp·cp) share of each category;
    stage 3 adds the largest layer's gathered weights twice and its full gradient (``plan.sharding``)."""
    cp, dp = 2, 2
    peaks = [simulate(_project(cp, dp, z, engine)).peak_memory_bytes for z in range(4)]
    p = _params_per_device()
    shard = 1 - 1 / (dp * cp)
    assert peaks[0] - peaks[1] == pytest.approx(OPTIMIZER_B * p * shard, rel=1e-6)
    assert peaks[1] - peaks[2] == pytest.approx(GRAD_B * p * shard, rel=1e-6)
    largest = V * H / TP + S * H  # the embedding layer: word embedding over tp, positions whole
    working_set = largest * (2 * WEIGHT_B + GRAD_B)
    assert peaks[2] - peaks[3] == pytest.approx(WEIGHT_B * p * shard - working_set, rel=1e-6)


def _ring_s(nbytes: float, ranks: int) -> float:
    """Bandwidth term of a ring all-gather / reduce-scatter of ``nbytes`` over ``ranks`` GPUs of one node."""
    return (ranks - 1) / ranks * nbytes / NVLINK_BYTES_PER_S


@pytest.mark.parametrize(("cp", "dp"), [(2, 2), (2, 1)])
def test_zero3_gathers_every_layer_over_the_dp_cp_group(cp, dp):
    """ZeRO-3: every layer's forward gathers its weights (bf16, per tensor rank) — all the device's
    parameters per micro-batch — and each gather runs over dp·cp ranks: its time is the ring's bandwidth
    term over dp·cp ranks plus at most NCCL's start-up and step latencies. With dp 1 the context ranks alone
    shard the weights."""
    plan = make_plan(_project(cp, dp, 3))
    st = plan.stages[0]
    gathers = [seg.comm for (_c, kind), ps in st.passes.items() if kind == "F"
               for seg in ps.segments if seg.comm is not None and seg.comm[0] == "dp:all-gather"]
    p = _params_per_device()
    assert sum(n for _k, n in gathers) == pytest.approx(p * WEIGHT_B, rel=1e-12)
    ranks = dp * cp
    for kind, n in gathers:
        t = plan.tp_time(0, 0, kind, n)
        latency = t - _ring_s(n, ranks)
        assert 0 < latency <= (NCCL_FIXED_S + (ranks - 1) * NCCL_STEP_S) * (1 + 1e-9)
    assert st.state.weights == pytest.approx(p * WEIGHT_B / ranks, rel=1e-12)
    assert st.state.gradients == pytest.approx(p * GRAD_B / ranks, rel=1e-12)


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_context_ranks_shard_like_as_many_data_parallel_replicas(zero):
    """cp 2 × dp 2 and dp 4 put four replicas of each tensor rank in one node: the sharded state and the
    data-parallel traffic are the same."""
    a, b = _project(2, 2, zero), _project(1, 4, zero)
    assert make_plan(a).stages[0].state == make_plan(b).stages[0].state
    ra, rb = simulate(a), simulate(b)
    assert ra.time_breakdown_s["dp_comm"] == pytest.approx(rb.time_breakdown_s["dp_comm"], rel=1e-12)


@pytest.mark.parametrize(
    "mapping",
    [{"zero": 1}, {"zero": 2}, {"zero": 3}, {"fsdp": True}, {"zero": 3, "dp": 1}, {"zero": 2, "dp": 1, "pp": 2}],
)
def test_both_engines_agree(mapping):
    m = {"cp": 2, "dp": 2} | mapping
    cp, dp = m.pop("cp"), m.pop("dp")
    zero = m.pop("zero", 0)
    analytic = simulate(_project(cp, dp, zero, "analytic", **m))
    event = simulate(_project(cp, dp, zero, "event", **m))
    t = analytic.iteration_time_s
    assert event.iteration_time_s == pytest.approx(t, rel=1e-9)
    for k, v in analytic.time_breakdown_s.items():
        assert event.time_breakdown_s.get(k, 0.0) == pytest.approx(v, abs=1e-9 * t), k
    assert event.peak_memory_bytes == pytest.approx(analytic.peak_memory_bytes, rel=1e-12)


def test_tied_embedding_reduces_its_dp_cp_shard():
    """pp 2 ties the word embedding's copy on the last stage; with ZeRO-2 each device all-reduces its
    1/(dp·cp) shard of the copy's fp32 gradient with the first stage."""
    plan = make_plan(_project(2, 2, 2, pp=2, global_batch=16))
    assert plan.tied is not None
    assert plan.tied.params == pytest.approx(V * H / TP, rel=1e-12)
    assert plan.tied_bytes == pytest.approx(V * H / TP * GRAD_B / 4, rel=1e-12)


@pytest.mark.parametrize("cp", [1, 2])
def test_residency_sizes_are_what_the_plan_holds(cp, monkeypatch):
    """``memory_levels`` ``auto`` fits each category's bytes per device: the same as the plan's memory
    peak, with each device's share of the sequence (micro_batch / cp) and the dp·cp optimizer shard."""
    seen: list[dict[str, float]] = []
    original = stage_options.stage_residency

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        if out is not None:
            seen.append(out[1])
        return out

    monkeypatch.setattr(stage_options, "stage_residency", spy)
    project = _project(cp, 2, 1, memory_levels={"activations": "auto"})
    held = simulate(project).memory_breakdown_bytes
    assert len(seen) == 1
    sizes = seen[0]
    for cat in ("weights", "gradients", "optimizer"):
        assert sizes[cat] == pytest.approx(held[cat], rel=1e-12), cat
    assert sizes["activations"] == pytest.approx(held["activations"] + held["workspace"], rel=1e-12)
    assert sizes["optimizer"] == pytest.approx(_params_per_device() * OPTIMIZER_B / (2 * cp), rel=1e-12)
