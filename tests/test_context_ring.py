"""Context parallelism's ring in the results and on the links (``plan.context``): its bytes per step derived
by hand from Transformer Engine's ring attention, all of them on the real links in the event engine (hidden or
exposed), the exposed part reported as ``cp_comm`` by both engines, and its attention run as a flash kernel."""

from __future__ import annotations

import pytest
from tilewright.engine.engines.energy import iteration_traffic
from tilewright.engine.engines.event.simulation import Simulation
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.ops import OpKind
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.plan.context import ContextComm, kv_block_bytes
from tilewright.engine.plan.passes import fused_edges
from tilewright.engine.plan.program import program_for
from tilewright.engine.results.timeline import CATEGORIES
from tilewright.engine.simulate import make_plan, simulate

SEQ, HIDDEN, HEADS, KV_HEADS = 32768, 4096, 32, 8
HEAD_DIM = HIDDEN // HEADS
GQA = GPTSpec(name="gqa", layers=2, hidden=HIDDEN, heads=HEADS, kv_heads=KV_HEADS, seq_len=SEQ, vocab=32000)
BF16 = 2


def _project(cp: int, tp: int = 1, dp: int = 1, engine: str = "analytic", contention: bool = False,
             spec: GPTSpec = GQA, global_batch: int = 2) -> Project:
    mapping = Mapping(tp=tp, pp=1, dp=dp, cp=cp, micro_batch=1, global_batch=global_batch)
    return Project(name="ring", hardware=load_system("dgx-h100"), workload=spec, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine=engine, contention=contention))


def _block(cp: int, tp: int) -> float:
    """One rank's K/V block, per tensor rank: 2 (K and V) × its s/cp tokens × its kv heads × head size, bf16."""
    return 2 * (SEQ // cp) * (KV_HEADS // tp) * HEAD_DIM * BF16


def _attention(plan):
    return next(op for op in plan.workload.ops() if op.kind is OpKind.attention)


@pytest.mark.parametrize(("cp", "tp"), [(2, 1), (8, 2), (4, 8)])
def test_a_block_is_one_ranks_keys_and_values(cp, tp):
    plan = make_plan(_project(cp, tp))
    assert kv_block_bytes(_attention(plan), 1 / cp, tp, BF16) == pytest.approx(_block(cp, tp))


@pytest.mark.parametrize("cp", [2, 3, 8])
def test_the_forward_sends_cp_minus_one_blocks_and_the_backward_their_gradients_too(cp):
    """Whatever is hidden or shown, the forward moves (cp − 1) blocks per rank, the backward 2 (cp − 1): the
    K/V blocks again and their dK/dV (TE ``AttnFuncWithCPAndKVP2P``)."""
    spec = GQA.model_copy(update={"seq_len": 3 * 8 * 1024})
    plan = make_plan(_project(cp, spec=spec))
    op, block = _attention(plan), 2 * (spec.seq_len // cp) * KV_HEADS * HEAD_DIM * BF16
    ring = ContextComm(cp, lambda kind, nbytes: 1e-6 + nbytes / 1e11)
    for backward, blocks in ((False, cp - 1), (True, 2 * (cp - 1))):
        for attention_s in (0.0, 1e-4, 1.0):
            shown, hidden = ring.exchange(op, 1 / cp, 1, BF16, backward, attention_s)
            assert sum(n for _k, n in shown) + sum(n for _k, n in hidden) == pytest.approx(blocks * block)


def test_each_step_hides_behind_its_share_of_the_attention():
    """cp 4, one block takes 1 s. Forward: 3 one-block steps beside 4 s of attention (1 s per step): nothing
    shows. Backward: steps of 1, 2, 2, 1 blocks beside 1 s each: the two double steps show 1 s each, so 2 of
    its 6 s show — a third of its bytes (6 blocks) is charged, two thirds stay behind the kernels."""
    plan = make_plan(_project(4))
    op, block = _attention(plan), _block(4, 1)
    ring = ContextComm(4, lambda kind, nbytes: nbytes / block)
    assert ring.exchange(op, 0.25, 1, BF16, False, 4.0) == ([], (("cp:ring", pytest.approx(3 * block)),))
    shown, hidden = ring.exchange(op, 0.25, 1, BF16, True, 4.0)
    assert shown == [("cp:ring", pytest.approx(2 * block))]
    assert hidden == (("cp:ring", pytest.approx(4 * block)),)


def _ring_on_links(project: Project, block: float) -> tuple[float, float]:
    """(cp_comm bytes on every link of an event run, bytes a ring of ``block``-byte blocks should put there)."""
    plan = make_plan(project)
    sim = Simulation(program_for(plan), contention=project.run.contention)
    sim.run()
    carried = sum(cats.get("cp_comm", 0.0) for cats in sim.net.link_category_bytes().values())
    m, cp = project.mapping, project.mapping.cp
    groups = plan.stages[0].groups
    hops = sum(len(plan.hw.device_route(groups[d * cp + c][i], groups[d * cp + (c + 1) % cp][i]))
               for d in range(m.dp) for c in range(cp) for i in range(m.tp))  # every rank's send to the next
    attention_layers = sum(1 for op in plan.workload.ops() if op.kind is OpKind.attention)
    blocks = 3 * (cp - 1)  # forward cp − 1, backward 2 (cp − 1)
    return carried, hops * blocks * block * attention_layers * m.micro_batches


def test_a_hidden_ring_still_crosses_its_links():
    """cp 4 inside one node: the attention hides the whole ring (no cp_comm), yet every block is on the
    NVLinks it crosses, drawn as context-ring traffic."""
    project = _project(4, dp=2, engine="event", global_batch=4)
    result = simulate(project)
    assert result.time_breakdown_s.get("cp_comm", 0.0) == 0.0
    carried, expected = _ring_on_links(project, _block(4, 1))
    assert carried == pytest.approx(expected, rel=1e-9)
    tl = result.timeline
    a = tl.arrays()
    link_cats = {CATEGORIES[c] for lane, c in zip(a["lane"], a["category"], strict=True)
                 if tl.lanes[lane].group == "links"}
    assert "cp_comm" in link_cats


def test_a_ring_across_nodes_shows_and_both_engines_report_it():
    """cp 16 over two DGX nodes, tp 1: two of each ring's sends cross the NICs, far slower than the attention
    beside them, so part of the ring shows as cp_comm — the same in both engines, with or without contention
    — and all of its bytes, shown or hidden, are on the links."""
    spec = GQA.model_copy(update={"kv_heads": HEADS})  # full K/V heads: a ring slow enough to show
    times = []
    for contention in (False, True):
        a = simulate(_project(16, engine="analytic", contention=contention, spec=spec))
        e = simulate(_project(16, engine="event", contention=contention, spec=spec))
        assert a.time_breakdown_s["cp_comm"] > 0
        assert e.time_breakdown_s["cp_comm"] == pytest.approx(a.time_breakdown_s["cp_comm"], rel=1e-9)
        assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)
        times.append(a.iteration_time_s)
        compute_lanes = [i for i, lane in enumerate(e.timeline.lanes) if lane.group == "compute"]
        arr = e.timeline.arrays()
        assert any(lane in compute_lanes and CATEGORIES[c] == "cp_comm"
                   for lane, c in zip(arr["lane"], arr["category"], strict=True))
    block = 2 * (SEQ // 16) * HEADS * HEAD_DIM * BF16
    carried, expected = _ring_on_links(_project(16, engine="event", spec=spec), block)
    assert carried == pytest.approx(expected, rel=1e-9)


def test_energy_counts_the_ring_the_event_engine_moves():
    """The energy's traffic count (from the plan, both engines) has every link byte the event engine moved,
    the hidden ring included."""
    project = _project(4, dp=2, engine="event", global_batch=4)
    plan = make_plan(project)
    sim = Simulation(program_for(plan), contention=False, aggregate=False)
    sim.run()
    moved = sim.net.link_bytes()
    counted = iteration_traffic(program_for(plan)).link_bytes
    assert sum(counted.values()) == pytest.approx(sum(moved.values()), rel=1e-9)
    ring = sum(c.get("cp_comm", 0.0) for c in sim.net.link_category_bytes().values())
    assert ring > 0


def test_ring_attention_never_materialises_its_scores():
    """Megatron-Core runs cp > 1 only through TE's fused attention: at cp 8 a layer's forward moves a fraction
    of what its scores alone would take through DRAM (heads × s/8 × s, bf16), and no op of the attention core
    (softmax, its dropout) touches memory."""
    def forward_bytes(layers: int) -> float:
        plan = make_plan(_project(8, spec=GQA.model_copy(update={"layers": layers})))
        return sum(seg.local_bytes for seg in plan.stages[0].passes[(0, "F")].segments)

    scores = HEADS * (SEQ // 8) * SEQ * BF16
    assert 0 < (forward_bytes(4) - forward_bytes(2)) / 2 < scores / 4
    plan = make_plan(_project(8))
    layer = plan.workload.layer_ops(plan.workload.block_layers[0])
    names = [op.name.split(".", 1)[-1] for op in layer]
    edges = fused_edges([names[names.index("attention"):names.index("attention_dropout") + 1]])
    dev = plan.stages[0].dev
    for op in layer:
        if op.kind in (OpKind.softmax, OpKind.dropout) and op.selective:
            local = op.name.split(".", 1)[-1]
            fused_in = any(b == local for _a, b in edges)
            fused_out = any(a == local for a, _b in edges)
            for backward in (False, True):
                t = op_time(op, dev, 1 / 8, 1, False, backward, BF16, fused_in, fused_out)
                assert t.local_bytes == 0.0


@pytest.mark.parametrize("cp", [2, 8])
def test_every_ring_step_costs_the_host_its_call_hidden_or_not(cp):
    """Transformer Engine issues each step's send/receive from Python whether the step hides or not: a pass's
    host time grows by one collective call per step that moves a block — cp − 1 per attention forward, cp per
    backward — over the same run whose calls cost nothing (the rest of the host's work is the same)."""
    call = load_system("dgx-h100").children[0].children[0].compute.host_collective_s
    assert call > 0

    def host(p: Project, kind: str) -> float:
        return sum(s.host_s for s in make_plan(p).stages[0].passes[(0, kind)].segments)

    p = _project(cp)
    free = p.model_copy(update={"hardware": _without_calls(p.hardware)})
    layers = GQA.layers
    assert host(p, "F") - host(free, "F") == pytest.approx(layers * (cp - 1) * call, rel=1e-9)
    assert host(p, "B") - host(free, "B") == pytest.approx(layers * cp * call, rel=1e-9)


def _without_calls(hw):
    """``hw`` with every device's collective-call host time set to 0."""
    def walk(c):
        update = {"children": [walk(ch) for ch in c.children]}
        if c.compute is not None:
            update["compute"] = c.compute.model_copy(update={"host_collective_s": 0.0})
        return c.model_copy(update=update)
    return walk(hw)
