"""TEGroupedMLP's fp8 padding (``plan.experts.fp8_padded``): an fp8 grouped GEMM needs every expert's rows in
multiples of 16 (32 under MXFP8), so Megatron-Core pads the permuted token-slots before fc1 and unpads fc2's
output (Transformer Engine ``Fp8Padding``/``Fp8Unpadding``), each a copy that reads and writes the slots, and its
backward the inverse copy of the gradient. Skipped when every split is aligned already: never dropless in
practice, and drop-and-pad whenever ep · etp capacities are a multiple of the alignment.

Expected bytes are derived from the plan's own all-to-all (the slots the padding copies are the slots the
dispatch delivered), not from the function under test."""

from __future__ import annotations

import math

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.mapping import Fp8Scaling
from tilewright.engine.ir.ops import ExpertInfo, MoERole
from tilewright.engine.ir.workload import MoESpec
from tilewright.engine.plan import experts
from tilewright.engine.plan.experts import dispatch_work, fp8_padded
from tilewright.engine.simulate import make_plan, simulate

EXPERTS, TOP_K, LAYERS, SEQ, HIDDEN, EP = 16, 2, 2, 1024, 1024, 4


def _spec(capacity_factor: float | None = None) -> LlamaSpec:
    return LlamaSpec(name="moe", layers=LAYERS, hidden=HIDDEN, heads=16, ffn=4 * HIDDEN, vocab=32000, seq_len=SEQ,
                     moe=MoESpec(experts=EXPERTS, top_k=TOP_K, expert_ffn=HIDDEN, capacity_factor=capacity_factor))


def _project(dtype: str = "fp8", capacity_factor: float | None = None, engine: str = "analytic") -> Project:
    return Project(name="pad", hardware=load_system("dgx-h100"), workload=_spec(capacity_factor),
                   mapping=Mapping(tp=1, dp=8, ep=EP, micro_batch=1, global_batch=16),
                   run=RunSettings(dtype=dtype, engine=engine, contention=False))


def _info(capacity_factor: float | None) -> ExpertInfo:
    return ExpertInfo(role=MoERole.expert, experts=128, top_k=8, capacity_factor=capacity_factor, tokens=4096,
                      tokens_fraction=8 / 128)


def test_padding_needs_fp8():
    assert not fp8_padded(_info(None), False, 8192, 8)


def test_dropless_always_pads():
    """The router's counts are random: every local expert aligned by chance is negligible (about 16^-local)."""
    for fp8 in (True, Fp8Scaling.tensor, Fp8Scaling.block, Fp8Scaling.mxfp8):
        assert fp8_padded(_info(None), fp8, 8192, 8)


def test_drop_and_pad_pads_only_unaligned_capacities():
    """Megatron-Core's capacity is ⌈tokens · top_k / experts · factor⌉ of the rank's tokens, and a local expert
    receives one from each of the ep · etp ranks. Qwen3-30B's token-drop rows: 8192 tokens, top-8 of 128 at
    factor 1 → 512 rows each, aligned; 8191 tokens → 512 still (ceil); 8000 → 500, × 4 ranks = 2000 = 125 · 16
    (aligned at 16, not at MXFP8's 32), × 8 ranks = 4000 = 125 · 32 (aligned at both); × 1 rank 500, unaligned."""
    assert not fp8_padded(_info(1.0), True, 8192, 8)
    assert not fp8_padded(_info(1.0), True, 8191, 8)
    assert math.ceil(8000 * 8 / 128) == 500
    assert not fp8_padded(_info(1.0), True, 8000, 4)
    assert fp8_padded(_info(1.0), Fp8Scaling.mxfp8, 8000, 4)
    assert not fp8_padded(_info(1.0), Fp8Scaling.mxfp8, 8000, 8)
    assert fp8_padded(_info(1.0), True, 8000, 1)


def _a2a_bytes(plan, kind: str) -> list[float]:
    """Bytes per device of every expert all-to-all of stage 0's first pass of a kind (never overlapped here)."""
    return [s.comm[1] for s in plan.stages[0].passes[(0, kind)].segments if s.comm and s.comm[0].startswith("ep:")]


def _local_bytes(plan, kind: str) -> float:
    return sum(s.local_bytes for st in plan.stages for (_c, k), ps in st.passes.items() if k == kind
               for s in ps.segments)


@pytest.mark.parametrize("kind", ["F", "B"])
def test_the_plan_copies_what_the_all_to_all_delivered(kind, monkeypatch):
    """Per MoE layer and pass, fp8 dropless: two copies (the padding of fc1's input and the unpadding of fc2's
    output, or their gradients' inverses), each reading and writing the slots one all-to-all brings (tp = etp = 1:
    no gather). The plan's device-memory traffic exceeds the same plan without the padding by exactly that."""
    padded = make_plan(_project())
    monkeypatch.setattr(experts, "fp8_padded", lambda *a, **k: False)
    plain = make_plan(_project())
    a2a = _a2a_bytes(padded, kind)
    assert len(a2a) == 2 * LAYERS and len(set(a2a)) == 1  # dispatch and combine of each layer, equal
    extra = _local_bytes(padded, kind) - _local_bytes(plain, kind)
    assert extra == pytest.approx(LAYERS * 2 * 2 * a2a[0], rel=1e-9)


def test_bf16_and_aligned_token_drop_copy_nothing(monkeypatch):
    """bf16 runs no fp8 GEMM; a drop-and-pad run at capacity 1 here has 1024 · 2 / 16 = 128 rows per capacity:
    aligned, so TE returns its input untouched. Either plan is the plan without the padding."""
    for project in (_project(dtype="bf16"), _project(capacity_factor=1.0)):
        with_pad = make_plan(project)
        monkeypatch.setattr(experts, "fp8_padded", lambda *a, **k: False)
        without = make_plan(project)
        monkeypatch.undo()
        for kind in ("F", "B"):
            assert _local_bytes(with_pad, kind) == _local_bytes(without, kind)


def test_serving_copies_nothing():
    """A serving runtime (``framework`` False) is not TEGroupedMLP: no padding."""
    plan = make_plan(_project())
    op = next(op for op in plan.workload.layer_ops(plan.workload.block_layers[0]) if op.name.endswith("experts_up"))
    compute = plan.stages[0].dev.compute
    assert dispatch_work(op, False, 1, 1, EP, 2, compute, True).pad_bytes > 0
    assert dispatch_work(op, False, 1, 1, EP, 2, compute, True, framework=False).pad_bytes == 0.0


def test_both_engines_agree():
    a, e = simulate(_project(engine="analytic")), simulate(_project(engine="event"))
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)
    for key, seconds in a.time_breakdown_s.items():  # the event engine also lists the categories at 0
        assert e.time_breakdown_s.get(key, 0.0) == pytest.approx(seconds, rel=1e-9, abs=1e-12), key
