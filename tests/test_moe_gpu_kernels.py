"""Routed experts on a GPU as Megatron-Core runs them: a grouped GEMM (one GEMM per local expert, each tiled on
its own, on Transformer Engine's concurrent streams) and the token dispatcher's own work (the permutation and
the sort by local expert, streamed through memory; the dropless forward's host sync per MoE layer).

Expected values are derived here from the tile and unit counts of the preset (tile padding and waves counted by
hand), from the model's dimensions and from Megatron-Core's dispatcher (``token_dispatcher.py``); only the
efficiency curve's fill of one kernel (``DeviceModel.matmul_parts``) is read from the engine as a primitive."""

from __future__ import annotations

import math

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.ops import ExpertInfo, MoERole, Op, OpKind, TensorSplit
from tilewright.engine.perf import op_cost
from tilewright.engine.plan import experts, pass_builder
from tilewright.engine.simulate import make_plan

SEQ, HIDDEN, EXPERTS, TOP_K, MB, FFN = 1024, 1024, 8, 2, 2, 2048
BF16 = 2


def _gpu():
    """The dgx-a100 preset's GPU compute (a tile grid of 256 × 128 tiles over 108 SMs)."""
    system = load_system("dgx-a100")

    def find(c):
        if c.compute is not None and c.compute.gemm_tile is not None:
            return c.compute
        return next((x for x in map(find, c.children) if x is not None), None)

    return find(system)


def _hand_efficiency(per_rows: float, experts_n: int, n: float, tile: tuple[int, int], units: int) -> float:
    """Per-expert row padding (tile height: the power of two ≥ the rows, capped at the tile) and column tiles,
    all experts' tiles dealt to the units in waves (no split-K: the cases below have a wave or more)."""
    tm = min(tile[0], max(16, 2 ** math.ceil(math.log2(per_rows))))
    tn = min(tile[1], max(16, 2 ** math.ceil(math.log2(n))))
    row_tiles, col_tiles = math.ceil(per_rows / tm), math.ceil(n / tn)
    tiles = experts_n * row_tiles * col_tiles
    waves = math.ceil(tiles / units)
    return (experts_n * per_rows * n) / (tiles * tm * tn) * tiles / (waves * units)


def test_each_expert_pads_its_own_rows_to_whole_tiles():
    """8 experts of 300 rows: each pads to 2 row tiles of 256 (512 rows), where one GEMM over the 2,400 rows
    would pad only to 2,560 — the grouped GEMM wastes more, and the engine counts it per expert."""
    gpu = _gpu()
    tile, units = gpu.gemm_tile, gpu.gemm_units
    n, k = 1024.0, 4096.0
    grouped = op_cost.grouped_efficiency(gpu, (8 * 300.0, n, k), 8 * 300.0, 8)
    assert grouped == pytest.approx(_hand_efficiency(300, 8, n, tile, units), rel=1e-12)
    assert grouped < gpu.shape_efficiency(8 * 300.0, n, k)


def test_whole_tiles_per_expert_cost_nothing_more():
    """Rows per expert a multiple of the tile: no padding, and the experts' tiles share waves as one GEMM's."""
    gpu = _gpu()
    m = 16 * 2 * gpu.gemm_tile[0]
    assert op_cost.grouped_efficiency(gpu, (m, 1024.0, 4096.0), m, 16) == pytest.approx(
        gpu.shape_efficiency(m, 1024.0, 4096.0), rel=1e-12
    )


def test_the_weight_gradient_writes_one_output_per_expert():
    """The weight gradient is K × N per expert reducing over its own rows: 8 experts' outputs give 8× the
    tiles of one K × N GEMM — on 108 units, 1024 × 1024 (32 tiles) fills under a third of a wave alone,
    8 of them 256 tiles in 3 waves (split-K aside: each reduces over only 256 rows)."""
    gpu = _gpu()
    tile, units = gpu.gemm_tile, gpu.gemm_units
    tokens, k, n = 8 * 256.0, 1024.0, 1024.0
    eff = op_cost.grouped_efficiency(gpu, (k, n, tokens), tokens, 8)
    tiles = 8 * math.ceil(k / tile[0]) * math.ceil(n / tile[1])
    assert eff == pytest.approx(tiles / (math.ceil(tiles / units) * units), rel=1e-12)


def _expert_op(experts_total: int, ep: int, rows: int) -> Op:
    """A routed-expert up projection as one ep rank holds it (``experts.shard_experts``: params / ep)."""
    info = ExpertInfo(role=MoERole.expert, experts=experts_total, top_k=TOP_K, tokens=rows // TOP_K,
                      tokens_fraction=TOP_K / experts_total)
    return Op(name="block0.experts_up", layer=0, kind=OpKind.matmul, split=TensorSplit.column,
              flops=2.0 * rows * FFN * HIDDEN, params=experts_total * FFN * HIDDEN / ep, gemm=(rows, FFN, HIDDEN),
              in_elems=rows * HIDDEN, out_elems=rows * FFN, moe=info)


def _device():
    from tilewright.engine.perf.device import device_model

    gpu = _gpu()
    return device_model(gpu, [], None, "bf16")


def test_one_grouped_kernel_pays_one_fill_however_many_local_experts():
    """Without per-expert kernels (vLLM's fused MoE, ``torch._grouped_mm``) a grouped GEMM is one kernel: one
    fill of all its FLOPs, with 16 local experts as with 4. The rows (a multiple of the tile per expert) and the
    FLOPs are the same, so the throughput part is too."""
    dev = _device()
    rows = 16 * 512
    many, few = _expert_op(128, 8, rows), _expert_op(32, 8, rows)  # 16 and 4 local experts
    assert op_cost._experts_reached(many) == 16 and op_cost._experts_reached(few) == 4
    t_many = op_cost.op_time(many, dev, 1, 1, False, False, BF16)
    t_few = op_cost.op_time(few, dev, 1, 1, False, False, BF16)
    peak = dev.matmul_peak(None, True)
    flops = 2.0 * rows * FFN * HIDDEN
    eff = _gpu().shape_efficiency(rows, FFN, HIDDEN)  # whole tiles per expert: no grouped padding
    _, whole = dev.matmul_parts(flops / eff, peak)
    fixed = dev.compute.fixed_op_s
    assert t_many.overhead_s == pytest.approx(fixed + whole, rel=1e-9)
    assert t_few.overhead_s == pytest.approx(fixed + whole, rel=1e-9)
    assert t_many.compute_s == pytest.approx(t_few.compute_s, rel=1e-9)


# experts without biases: a biased expert's per-expert eager bias kernels (``plan.experts.expert_bias_kernels``,
# tests/test_moe_expert_bias.py) would add to the dispatcher's bytes and launches counted here
MOE = GPTSpec(name="moe", layers=2, hidden=HIDDEN, heads=16, seq_len=SEQ, vocab=32000, mlp_bias=False,
              moe={"experts": EXPERTS, "top_k": TOP_K, "expert_ffn": FFN})


def _plan(ep: int, spec: GPTSpec = MOE, off: bool = False, monkeypatch=None):
    if off:
        monkeypatch.setattr(pass_builder, "dispatch_work", lambda *a, **k: experts.NO_DISPATCH)
    project = Project(name="moe", hardware=load_system("dgx-a100"), workload=spec,
                      mapping=Mapping(tp=2, dp=8, ep=ep, expert_imbalance=1.0, micro_batch=MB, global_batch=8 * MB * 2),
                      run=RunSettings(dtype="bf16", engine="analytic", contention=False))
    return make_plan(project)


def _segments(plan, kind):
    return [s for st in plan.stages for (_c, k), ps in st.passes.items() if k == kind for s in ps.segments]


def test_a_dropless_forward_drains_the_host_once_per_moe_layer():
    """Megatron-Core copies the per-expert token counts to the host and waits for them once per MoE layer
    forward (``before_ep_alltoall``); the backward reuses them; a capacity factor pads and never syncs."""
    gpu = _gpu()
    plan = _plan(ep=4)
    syncs = [s for s in _segments(plan, "F") if s.label == "MoE host synchronisation"]
    assert len(syncs) == MOE.layers  # every block is MoE
    for s in syncs:
        assert s.busy_s == pytest.approx(gpu.host_sync_s + gpu.host_dispatch_s)
        assert s.dispatch_wait_s == s.busy_s
    assert not [s for s in _segments(plan, "B") if s.label == "MoE host synchronisation"]
    padded = MOE.model_copy(update={"moe": MOE.moe.model_copy(update={"capacity_factor": 1.25})})
    assert not [s for s in _segments(_plan(ep=4, spec=padded), "F") if s.label == "MoE host synchronisation"]


@pytest.mark.parametrize("ep", [4, 8])
@pytest.mark.parametrize("kind", ["F", "B"])
def test_permutations_stream_the_token_slots(ep, kind, monkeypatch):
    """Per MoE layer and tensor rank (tokens split over tp 2): the permutation reads and writes the s·b·top_k
    token-slots' hidden vectors; with more than one local expert (ep 4: 2) the sort by expert and the sort
    back each do too, over the expert-tensor group's gathered slots (etp = tp = 2 of them), with one (ep 8)
    neither runs. The backward runs the inverses: the same bytes. (The framework's other host work around the
    MoE ops is ``plan.moe_host``'s, left out here.)"""
    monkeypatch.setattr(experts, "framework_host", lambda *a, **k: None)
    plan = _plan(ep)
    etp = 2
    slots_bytes = SEQ * MB * TOP_K * HIDDEN * BF16 / 2
    sorts = 2 if EXPERTS // ep > 1 else 0
    expected = MOE.layers * 2 * slots_bytes * (1 + sorts * etp)
    on = sum(s.local_bytes for s in _segments(plan, kind))
    host_on = sum(s.host_s for s in _segments(plan, kind))
    off_plan = _plan(ep, off=True, monkeypatch=monkeypatch)
    off = sum(s.local_bytes for s in _segments(off_plan, kind))
    host_off = sum(s.host_s for s in _segments(off_plan, kind))
    assert on - off == pytest.approx(expected, rel=1e-9)
    syncs = MOE.layers * (_gpu().host_sync_s + _gpu().host_dispatch_s) if kind == "F" else 0.0
    assert host_on - host_off - syncs == pytest.approx(MOE.layers * (1 + sorts) * _gpu().host_dispatch_s, rel=1e-9)
