"""``LlamaSpec.rope_fusion`` False: Megatron-Core's unfused RoPE (``rope_utils._apply_rotary_pos_emb_bshd``) after the
qkv op, once for the query heads and once for the key heads (``plan.eager_rope``).

Expected bytes and launches are restated from that function and PyTorch's autograd: forward six floor kernels over
the frequencies and six over the tensor (t·cos 2T, −x2 T, cat 2T, ·sin 2T, sum 3T, cat 2T: 12 T); backward nine
(·sin 2T, neg T, chunk's cat 2T, ·cos 2T, the two uses summed 3T, the slice's zeros T and copy 2T, the empty
slice's zeros T, their sum 3T: 17 T). The plan is read only for what it charged."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload

LAYERS, SEQ, HIDDEN, HEADS, KV, TP, MB = 2, 256, 512, 8, 2, 2, 2
HEAD_DIM = HIDDEN // HEADS
FWD_PASSES, FWD_KERNELS = 2 + 1 + 2 + 2 + 3 + 2, 6 + 6  # per rotated tensor
BWD_PASSES, BWD_KERNELS = 2 + 1 + 2 + 2 + 3 + 1 + 2 + 1 + 3, 9


def _spec(fusion: bool | None) -> LlamaSpec:
    extra = {} if fusion is None else {"rope_fusion": fusion}
    return LlamaSpec(name="rope", layers=LAYERS, hidden=HIDDEN, heads=HEADS, kv_heads=KV, ffn=4 * HIDDEN, vocab=8000,
                     seq_len=SEQ, **extra)


def _project(spec: LlamaSpec | GPTSpec, engine: str = "analytic") -> Project:
    return Project(name="rope", hardware=load_system("dgx-h100"), workload=spec,
                   mapping=Mapping(tp=TP, dp=4, micro_batch=MB, global_batch=16, host_framework="mcore-te"),
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def _sum(plan, kind: str, field: str) -> float:
    return sum(getattr(s, field) for st in plan.stages for (_c, k), ps in st.passes.items() if k == kind
               for s in ps.segments)


def test_the_qkv_op_carries_the_rotated_heads():
    ops = [op for op in build_workload(_spec(False)).ops() if op.name.endswith("qkv")]
    assert len(ops) == LAYERS
    assert all(op.rope == (SEQ * HEADS * HEAD_DIM, SEQ * KV * HEAD_DIM) for op in ops)
    assert all(op.rope is None for op in build_workload(_spec(None)).ops())


def test_fused_is_the_default_and_changes_nothing():
    spec = _spec(None)
    assert spec.rope_fusion and "rope_fusion" not in spec.model_dump(mode="json")
    assert _spec(False).model_dump(mode="json")["rope_fusion"] is False
    assert simulate(_project(_spec(True))).iteration_time_s == simulate(_project(spec)).iteration_time_s


def test_bytes_and_launches_are_the_eager_chain():
    """Per layer: the query's and the key's elements on a rank (split by tp like qkv's output) at 2 B, times the
    chain's passes; each kernel one launch on the host."""
    fused, eager = make_plan(_project(_spec(True))), make_plan(_project(_spec(False)))
    compute = eager.stages[0].dev.compute
    tensors = [SEQ * heads * HEAD_DIM * MB / TP * 2 for heads in (HEADS, KV)]
    for kind, passes, kernels in (("F", FWD_PASSES, FWD_KERNELS), ("B", BWD_PASSES, BWD_KERNELS)):
        added = _sum(eager, kind, "local_bytes") - _sum(fused, kind, "local_bytes")
        assert added == pytest.approx(LAYERS * passes * sum(tensors), rel=1e-9)
        host = _sum(eager, kind, "host_s") - _sum(fused, kind, "host_s")
        assert host == pytest.approx(LAYERS * 2 * kernels * compute.host_dispatch_s, rel=1e-9)


def test_both_engines_agree_and_the_iteration_grows():
    runs = {(f, e): simulate(_project(_spec(f), e)) for f in (True, False) for e in ("analytic", "event")}
    assert runs[(False, "analytic")].iteration_time_s > runs[(True, "analytic")].iteration_time_s
    for f in (True, False):
        assert runs[(f, "event")].iteration_time_s == pytest.approx(runs[(f, "analytic")].iteration_time_s, rel=1e-9)


def test_learned_positions_have_no_rotary_field():
    with pytest.raises(ValueError, match="rope_fusion"):
        GPTSpec(name="g", layers=2, hidden=256, heads=8, seq_len=128, vocab=4096, rope_fusion=False)


def test_gpt_oss_rows_run_the_eager_rope():
    """calibrate_nemo_h100: gpt-oss's recipe sets no apply_rope_fusion (Megatron-Core's default is off, and YaRN's
    scaling turns it off); the Llama rows' providers set it on."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from nemo_h100_published import rows
    from nemo_h100_run import project_for

    seen = set()
    for row in rows():
        spec = project_for(row).workload
        want = row.pub.model != "gpt-oss-120b"
        assert getattr(spec, "rope_fusion", True) == want, row.label
        seen.add(want)
    assert seen == {True, False}
