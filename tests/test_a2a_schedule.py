"""The overlapped expert all-to-all pairs as Megatron-Core's combined 1F1B runs it (``PassComms._a2a``,
``plan.schedules``):

- forward layer i runs beside backward layer N − 1 − i (``TransformerLayerSchedulePlan.run``), so the backward's
  first all-to-all (the combine gradient of the chunk's last layer) runs beside the forward's first attention and
  the backward's last attention node covers the forward's last combine: the backward charges its first all-to-all
  against that trailing node, not against what ran before it (nothing, or the output head's backward);
- the embedding, the output head and the loss run outside the paired layers and cover nothing;
- the warmup's forwards and the cooldown's backwards run alone, their all-to-alls exposed whole, and the
  interleaved schedule warms up one virtual micro-batch more (``schedules.get_pp_rank_microbatches``);
- Megatron-Core refuses the overlap with pp > 1 without interleaving and with full recomputation.

Expected exposures are derived from a made-up all-to-all's seconds, the compute beside each and the 24 of the
H100's 132 SMs the all-to-all's kernel holds (``perf.comm_sm``), as ``test_a2a_pairing`` does."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.mapping import Recompute, Schedule
from tilewright.engine.plan.checks import check_project
from tilewright.engine.plan.pass_builder import PassBuilder
from tilewright.engine.plan.schedules import stage_order
from tilewright.engine.plan.sharding import EP_PREFIX
from tilewright.engine.plan.steps import training_table
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.search.parallel.extended import Extensions, variants
from tilewright.engine.simulate import make_plan, simulate

from tests.a2a_fixtures import LATENCY, NBYTES, SMS, UNITS, a2a_seconds, h100_builder
from tests.agreement import assert_engines_agree

_seconds = a2a_seconds


def _shown(cover_s: float) -> float:
    """Seconds an all-to-all beside ``cover_s`` of compute shows (its time beyond the compute stretched by the SMs
    it holds), when that is above its floor."""
    left = _seconds(NBYTES) - cover_s * UNITS / (UNITS - SMS)
    assert left > LATENCY  # the cases below stay clear of the floor's step (``plan.exposed``)
    return left


def _builder(kind: str) -> tuple[PassBuilder, object, list]:
    """A pass builder over a real H100 whose all-to-alls take ``_seconds``, a block op to hang them on, and the
    output head's ops."""
    b, op, plan = h100_builder(kind)
    head = [o for o in plan.workload.ops() if o.name.startswith("head.")]
    assert head
    return b, op, head


def _exposed_a2a(b: PassBuilder) -> list[float]:
    return [s.comm[1] for s in b.out.segments if s.comm and s.comm[0] == EP_PREFIX + "all-to-all"]


def test_the_backward_charges_its_first_all_to_all_against_its_last_attention_node():
    """Two layers in backward order: [combine′ | MLP′ 300 µs | dispatch′ | attention′ 100 µs] then [combine′ |
    MLP′ 300 µs | dispatch′ | attention′ 50 µs]. The head's backward runs first and covers nothing. Each
    all-to-all shows what is left beside the node before it, the first beside the trailing 50 µs: the combine
    gradient after the first layer's attention (100 µs) and the first one (beside 50 µs) show, the dispatches'
    gradients hide behind the MLPs."""
    b, op, head = _builder("B")
    for h in reversed(head):  # the output head and the loss, before the paired layers
        b.add_op(h, backward=True)
    assert b.node_busy == 0.0  # they cover nothing (``in_paired_layer``)
    assert b._a2a(op, NBYTES) == 0.0  # held back: charged at the pass's end
    b.layer_busy += 300e-6
    assert b._a2a(op, NBYTES) == 0.0  # the dispatch's gradient, beside the MLP: hidden
    b.layer_busy += 100e-6
    b.next_layer()
    second = b._a2a(op, NBYTES)
    assert _seconds(second) == pytest.approx(_shown(100e-6), rel=1e-9)
    b.layer_busy += 300e-6
    assert b._a2a(op, NBYTES) == 0.0
    b.layer_busy += 50e-6
    out = b.finish()
    last = out.segments[-1]
    assert last.comm is not None and last.comm[0] == EP_PREFIX + "all-to-all"
    assert _seconds(last.comm[1]) == pytest.approx(_shown(50e-6), rel=1e-9)
    assert len(_exposed_a2a(b)) == 1  # ``second`` was the caller's to charge (``add_op``)


def test_the_backward_first_all_to_all_hides_behind_a_long_enough_trailing_node():
    """The reviewer's case: the first all-to-all had nothing beside it on every stage but the last and showed
    whole; beside a trailing attention node longer than it (stretched by its SMs) it shows nothing."""
    b, op, _ = _builder("B")
    assert b._a2a(op, NBYTES) == 0.0
    b.layer_busy += 300e-6
    assert b._a2a(op, NBYTES) == 0.0
    b.layer_busy += 300e-6  # ≥ 220 µs · 132/108
    b.finish()
    assert _exposed_a2a(b) == []
    assert b.out.a2a_slack[0] == 0.0  # no delayed weight gradient runs before the first all-to-all


def test_the_embedding_covers_nothing_in_the_forward():
    """A first stage's forward: the embedding runs before the first layer's attention, outside the paired
    layers; the first dispatch hides behind the attention alone."""
    plan = make_plan(Project(name="a2a", hardware=load_system("dgx-h100"),
                             workload=GPTSpec(name="g", layers=1, hidden=1024, heads=8, seq_len=512, vocab=8192),
                             mapping=Mapping(tp=1, pp=1, dp=1, micro_batch=1, global_batch=1),
                             run=RunSettings(dtype="bf16")))
    b, op, _ = _builder("F")
    embedding = [o for o in plan.workload.ops() if o.name.startswith("embedding.")]
    assert embedding
    for e in embedding:
        b.add_op(e, backward=False)
    assert b.node_busy == 0.0 and b._busy > 0
    b.layer_busy += 80e-6
    assert _seconds(b._a2a(op, NBYTES)) == pytest.approx(_shown(80e-6), rel=1e-9)


@pytest.mark.parametrize(("pp", "m", "v"), [(1, 4, 1), (4, 8, 2), (2, 6, 3), (4, 4, 2)])
def test_the_combined_1f1b_runs_its_warmup_and_cooldown_alone(pp, m, v):
    """Megatron-Core's combined 1F1B: one virtual micro-batch more of warmup than the interleaved schedule
    ((pp − rank − 1)·2 + (v − 1)·pp + 1, all of them when m = pp), the first forward alone without a pipeline;
    those forwards and as many closing backwards run alone, every other forward beside a backward."""
    schedule = Schedule.interleaved if v > 1 else Schedule.one_f_one_b
    total = m * v
    for rank in range(pp):
        steps = stage_order(schedule, rank, pp, m, v, overlap_ep=True)
        plain = stage_order(schedule, rank, pp, m, v)
        assert sorted((s.kind, s.micro_batch, s.chunk) for s in steps) == sorted(
            (s.kind, s.micro_batch, s.chunk) for s in plain)
        if pp == 1:
            warm = 1
        elif m == pp:
            warm = total
        else:
            warm = min((pp - rank - 1) * 2 + (v - 1) * pp + 1, total)
        # the warmup, then each steady step's forward before the backward beside it
        assert next(i for i, s in enumerate(steps) if s.kind == "B") == (warm + 1 if warm < total else total)
        assert [s.alone for s in steps[:warm]] == [True] * warm and all(s.kind == "F" for s in steps[:warm])
        assert [s.alone for s in steps[len(steps) - warm:]] == [True] * warm
        assert not any(s.alone for s in steps[warm:len(steps) - warm])
        rows = training_table(schedule, pp, m, v, True)[rank]
        assert [r.alone for r in rows] == [s.alone for s in steps]
        assert all(r.dkey == (rank, r.chunk, r.kind, True) for r in rows if r.alone)


# narrow experts over two DGX-H100 nodes: the all-to-alls outlast the nodes beside them
SPEC = GPTSpec(name="moe", layers=2, hidden=1024, heads=8, seq_len=2048, vocab=32000,
               moe={"experts": 16, "top_k": 4, "expert_ffn": 256, "shared_experts": 1})


def _project(global_batch: int, overlap: bool = True, engine: str = "analytic") -> Project:
    mapping = Mapping(tp=1, pp=1, dp=16, ep=16, expert_imbalance=1.0, micro_batch=1, global_batch=global_batch,
                      overlap_ep_comm=overlap)
    return Project(name="moe", hardware=load_system("dgx-h100"), workload=SPEC, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def test_the_unpaired_first_forward_and_last_backward_show_their_all_to_alls_whole():
    """Without a pipeline, m micro-batches run one forward and one backward alone and m − 1 of each paired:
    ep_comm(m) = (m − 1)·e + a, where e is a paired micro-batch's (the step from m to 2m adds m of them) and a
    the unpaired pair's, each all-to-all whole: what a micro-batch shows without the overlap."""
    m = 4  # global batch 64 over dp 16
    one, two = simulate(_project(64)), simulate(_project(128))
    paired = (two.time_breakdown_s["ep_comm"] - one.time_breakdown_s["ep_comm"]) / m
    alone = simulate(_project(64, overlap=False)).time_breakdown_s["ep_comm"] / m
    assert paired < alone  # the pairing hides some
    assert one.time_breakdown_s["ep_comm"] == pytest.approx((m - 1) * paired + alone, rel=1e-9)
    assert_engines_agree(one, simulate(_project(64, engine="event")))


def test_megatron_core_refuses_the_overlap_where_it_asserts():
    """transformer_config.py: a pipeline needs interleaving, and full recomputation is refused."""
    def problems(**kw) -> list[str]:
        base = dict(tp=1, pp=2, dp=8, ep=8, micro_batch=1, global_batch=64, overlap_ep_comm=True)
        p = _project(64).model_copy(update={"mapping": Mapping(**{**base, **kw})})
        return [pr.path for pr in check_project(p) if "overlap_moe_expert_parallel_comm" in pr.reason
                or "virtual_pipeline_model_parallel_size" in pr.reason]

    assert problems() == ["mapping.overlap_ep_comm"]  # pp 2, no interleaving
    assert problems(interleave=2) == []
    assert problems(pp=1, dp=16, ep=16) == []
    assert problems(pp=1, dp=16, ep=16, recompute=Recompute.full) == ["mapping.overlap_ep_comm"]
    assert problems(pp=1, dp=16, ep=16, recompute=Recompute.selective) == []
    assert problems(overlap_ep_comm=False) == []


def test_the_search_offers_no_overlap_megatron_core_refuses():
    """The extended search's overlapped variants (``search.parallel.extended``) leave out what the checks
    refuse, rather than timing it as None and dropping it unseen."""
    ext = Extensions(overlap=True, eps=[1, 8], zeros=[0, 1], recipes=[])
    for seed, offered in ((Candidate(tp=1, pp=2, dp=8, micro_batch=1), False),
                          (Candidate(tp=1, pp=2, dp=8, micro_batch=1, interleave=2), True),
                          (Candidate(tp=1, pp=1, dp=16, micro_batch=1, recompute=Recompute.full), False),
                          (Candidate(tp=1, pp=1, dp=16, micro_batch=1), True)):
        found = [c for c in variants(seed, ext, SPEC, True) if c.overlap_ep]
        assert bool(found) == offered, seed


def test_what_auto_fits_holds_the_combined_1f1b_extra_warmup_micro_batch():
    """The combined 1F1B warms up one micro-batch more (``plan.schedules``), so the sizes ``memory_levels`` 'auto'
    fits hold one more micro-batch's stored activations: (pp + 1) / pp of the plain 1F1B's, the workspace aside."""
    from tilewright.engine.perf.memory import StateBytes
    from tilewright.engine.plan.residency import stage_sizes
    from tilewright.engine.workloads import build_workload

    spec = GPTSpec(name="moe", layers=4, hidden=1024, heads=8, seq_len=512, vocab=8192,
                   moe={"experts": 8, "top_k": 2, "expert_ffn": 2048})
    graph = build_workload(spec)
    layers = [graph.layer_ops(i) for i in graph.block_layers]
    ops = [op for ls in layers for op in ls]
    state = StateBytes(0.0, 0.0, 0.0)

    def acts(overlap: bool, micro_batches: int = 8) -> float:
        m = Mapping(tp=1, pp=2, dp=4, ep=4, micro_batch=1, global_batch=4 * micro_batches, interleave=2,
                    schedule="interleaved-1f1b", overlap_ep_comm=overlap)
        p = Project(name="moe", hardware=load_system("dgx-h100"), workload=spec, mapping=m,
                    run=RunSettings(dtype="bf16"))
        return stage_sizes(p, ops, layers, state, 2.0, 1.0)["activations"]

    workspace = acts(False, 1) - (acts(False, 2) - acts(False, 1))  # one micro-batch's stored bytes off
    assert acts(True) - workspace == pytest.approx((acts(False) - workspace) * 3 / 2, rel=1e-9)
