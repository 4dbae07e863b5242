"""PyTorch's context parallelism (``plan.torch_ring``) under the plain-PyTorch frameworks, against Transformer
Engine's ring (``plan.context``) under the Megatron ones.

Expected bytes are derived here from torch's ``_templated_ring_attention`` as read (K and V repeated to every
query head by torchtitan's ``repeat_kv``, one all-gather of every rank's K/V, dK/dV passed on in fp32 after each
backward step), not from the engine's helpers; the kernel rates from the dgx-h100 preset's ``sdpa_flash`` fields."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.ops import OpKind
from tilewright.engine.plan.context import ContextComm
from tilewright.engine.simulate import make_plan, simulate

SEQ, HIDDEN, HEADS, KV_HEADS = 32768, 4096, 32, 8
HEAD_DIM = HIDDEN // HEADS
GQA = GPTSpec(name="gqa", layers=2, hidden=HIDDEN, heads=HEADS, kv_heads=KV_HEADS, seq_len=SEQ, vocab=32000)
BF16, FP32 = 2, 4


def _project(cp: int, framework: str | None = "pytorch", engine: str = "analytic", spec: GPTSpec = GQA,
             dp: int = 1) -> Project:
    mapping = Mapping(tp=1, pp=1, dp=dp, cp=cp, micro_batch=1, global_batch=dp, host_framework=framework,
                      fusion=[["attention", "softmax"]])
    return Project(name="torch-ring", hardware=load_system("dgx-h100"), workload=spec, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine=engine))


def _attention(plan):
    return next(op for op in plan.workload.ops() if op.kind is OpKind.attention)


def _expanded_block(cp: int) -> float:
    """One rank's K and V after repeat_kv: 2 × its s/cp tokens × every query head × head size, bf16."""
    return 2 * (SEQ // cp) * HEADS * HEAD_DIM * BF16


def _ring(cp: int, seconds) -> ContextComm:
    return ContextComm(cp, seconds, torch_ring=True)


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_the_ring_moves_every_heads_keys_once_forward_and_fp32_gradients_backward(cp):
    """Whatever hides: the forward all-gathers cp expanded blocks (its output: every rank's K/V, 4x the GQA
    block at 32 / 8 heads); the backward gathers them again and sends its dK/dV (two fp32 tensors as large as
    the block's) cp times."""
    op = _attention(make_plan(_project(cp)))
    ring = _ring(cp, lambda kind, n: 1e-6 + n / 1e11)
    block = _expanded_block(cp)
    gqa_block = 2 * (SEQ // cp) * KV_HEADS * HEAD_DIM * BF16
    assert block == pytest.approx(gqa_block * HEADS / KV_HEADS)
    for attention_s in (0.0, 1e-3, 10.0):
        shown, hidden = ring.exchange(op, 1 / cp, 1, BF16, False, attention_s)
        moved = {k: 0.0 for k in ("cp:all-gather", "cp:ring")}
        for k, n in [*shown, *hidden]:
            moved[k] += n
        assert moved == {"cp:all-gather": pytest.approx(cp * block), "cp:ring": 0.0}
        shown, hidden = ring.exchange(op, 1 / cp, 1, BF16, True, attention_s)
        moved = {k: 0.0 for k in ("cp:all-gather", "cp:ring")}
        for k, n in [*shown, *hidden]:
            moved[k] += n
        assert moved["cp:all-gather"] == pytest.approx(cp * block)
        assert moved["cp:ring"] == pytest.approx(cp * block * FP32 / BF16)


def test_the_gather_hides_behind_step_zero_alone_and_the_last_gradient_send_never():
    """cp 4, attention 4 s (1 s per step, every step at the same rate here), the gather 3 s: it shows 2 s of 3
    (two thirds of its bytes) — it would hide whole behind the 4 s if it were spread over the steps. The
    backward's dK/dV sends take 0.5 s each: the first three hide behind steps 1-3, the fourth shows whole."""
    cp = 4
    op = _attention(make_plan(_project(cp)))
    block = _expanded_block(cp)
    gather_s, send_s = 3.0, 0.5

    def seconds(kind: str, n: float) -> float:
        return gather_s if kind == "cp:all-gather" else send_s

    ring = _ring(cp, seconds)
    shown, hidden = ring.exchange(op, 1 / cp, 1, BF16, False, 4.0)
    assert shown == [("cp:all-gather", pytest.approx(cp * block * 2 / 3))]
    assert hidden == (("cp:all-gather", pytest.approx(cp * block / 3)),)
    shown, hidden = ring.exchange(op, 1 / cp, 1, BF16, True, 4.0)
    grad = block * FP32 / BF16
    assert shown == [("cp:all-gather", pytest.approx(cp * block * 2 / 3)), ("cp:ring", pytest.approx(grad))]
    assert sum(n for k, n in hidden if k == "cp:ring") == pytest.approx(3 * grad)


def test_later_steps_run_at_the_unmasked_rate():
    """Under load balancing every step after the first is an unmasked SDPA call: the attention op of a cp 8
    forward, costed at the causal rate, loses 7/8 of its time times (1 − causal / unmasked rate) of the preset's
    SDPA kernel (dgx-h100 sdpa_flash: 0.34 / 0.37 forward, 0.30 / 0.32 backward)."""
    cp = 8
    plan = make_plan(_project(cp))
    op, compute = _attention(plan), plan.stages[0].dev.compute
    rates = compute.sdpa_flash
    ring = _ring(cp, lambda kind, n: 0.0)
    for backward, causal, full in ((False, rates.causal_forward, rates.forward),
                                   (True, rates.causal_backward, rates.backward)):
        ratio = ring.unmasked_ratio(op, backward, compute, True)
        assert ratio == pytest.approx(causal / full)
        assert ring.unmasked_saving(2.0, ratio) == pytest.approx(2.0 * 7 / 8 * (1 - causal / full))
    te = ContextComm(cp, lambda kind, n: 0.0)
    assert te.unmasked_ratio(op, False, compute, True) == 1.0


def test_megatron_frameworks_keep_transformer_engines_ring():
    """'megatron-lm' (and the default) run Transformer Engine's p2p ring with GQA-sized blocks: no all-gather,
    no merge traffic; 'pytorch' and 'pytorch-compile' run torch's."""
    for framework, torch in ((None, False), ("megatron-lm", False), ("mcore-te", False), ("pytorch", True),
                             ("pytorch-compile", True)):
        plan = make_plan(_project(4, framework))
        kinds = {k for ps in plan.stages[0].passes.values() for s in ps.segments for k, _n in s.hidden}
        assert ("cp:all-gather" in kinds) is torch, framework
        assert ("cp:ring" in kinds) is True


def _merge_bytes(cp: int, backward: bool) -> float:
    """The busiest rank's merge (forward) or accumulator (backward) traffic per attention op, per query element
    q = s/cp × hidden, read off ``_SDPAMerger`` and ``_templated_ring_attention_backward`` (casts fused into the
    arithmetic that reads them). Forward: out.to(fp32) (2 read, 4 written), the K/V torch.cat for the gather
    (each 2 + 2), per later step one merge (fp32 out and bf16 block read, fp32 out written), the cast back.
    Backward: three fp32 zero-fills (4 each), the K/V torch.cat, per step three accumulations (4 + 2 read, 4
    written) and the dK/dV send buffer (torch.cat: 4 + 4 each), three casts back (4 + 2)."""
    q = SEQ // cp * HIDDEN
    if not backward:
        return q * ((2 + 4) + 2 * (2 + 2) + (cp - 1) * (4 + 2 + 4) + (4 + 2))
    return q * (3 * 4 + 2 * (2 + 2) + cp * (3 * (4 + 2 + 4) + 2 * (4 + 4)) + 3 * (4 + 2))


@pytest.mark.parametrize("cp", [2, 8])
def test_the_fp32_merges_stream_through_memory(cp):
    """The attention segment of a 'pytorch' pass moves the ring's merge and accumulator bytes through HBM over
    what the same op moves in a Transformer Engine ring (a 'megatron-lm' run whose attention runs the same
    SDPA kernel would differ in rate too: compared by bytes, per layer)."""
    def attention_bytes(framework: str, kind: str) -> float:
        plan = make_plan(_project(cp, framework))
        segs = plan.stages[0].passes[(0, kind)].segments
        return sum(s.local_bytes for s in segs)

    for kind, backward in (("F", False), ("B", True)):
        extra = attention_bytes("pytorch-compile", kind) - attention_bytes("mcore", kind)
        assert extra == pytest.approx(GQA.layers * _merge_bytes(cp, backward), rel=1e-6)


def _full_recompute(project: Project) -> Project:
    """The project with torchtitan's 'full' activation checkpointing: every block re-run in the backward."""
    mapping = Mapping.model_validate({**project.mapping.model_dump(), "recompute": "full"})
    return project.model_copy(update={"mapping": mapping})


def _moved(segments, kind: str) -> float:
    """Bytes of collective ``kind`` a pass's segments move, shown (after a segment) or hidden (behind one)."""
    return sum(n for s in segments for k, n in ([s.comm] if s.comm else []) + list(s.hidden) if k == kind)


@pytest.mark.parametrize("cp", [2, 8])
def test_full_recompute_runs_the_ring_forward_again(cp):
    """torchtitan's full activation checkpointing (torch.utils.checkpoint around each block) re-runs the block's
    forward inside the backward, and with it torch's ring forward: the recompute pass all-gathers every rank's
    expanded K/V again (cp blocks, shown or hidden), sends no dK/dV, and streams the forward's fp32 merges again
    over what the same pass moves under Transformer Engine's ring; both engines charge it alike."""
    recompute = {fw: make_plan(_full_recompute(_project(cp, fw))).stages[0].passes[(0, "R")]
                 for fw in ("pytorch-compile", "mcore")}
    ring = recompute["pytorch-compile"].segments
    assert _moved(ring, "cp:all-gather") == pytest.approx(GQA.layers * cp * _expanded_block(cp), rel=1e-9)
    assert _moved(ring, "cp:ring") == 0.0
    extra = sum(s.local_bytes for s in ring) - sum(s.local_bytes for s in recompute["mcore"].segments)
    assert extra == pytest.approx(GQA.layers * _merge_bytes(cp, False), rel=1e-6)
    a, e = (simulate(_full_recompute(_project(cp, "pytorch-compile", engine))) for engine in ("analytic", "event"))
    assert a.time_breakdown_s["recompute"] > 0
    for key in ("recompute", "cp_comm", "memory_stall"):
        assert e.time_breakdown_s[key] == pytest.approx(a.time_breakdown_s[key], rel=1e-9, abs=1e-15), key
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)


def test_both_engines_agree_on_the_torch_ring():
    """cp 16 over two DGX nodes with every head's K/V: the gather and the last dK/dV send cross the NICs and
    show as cp_comm, the same in both engines."""
    spec = GQA.model_copy(update={"seq_len": 65536})
    a = simulate(_project(16, engine="analytic", spec=spec))
    e = simulate(_project(16, engine="event", spec=spec))
    assert a.time_breakdown_s["cp_comm"] > 0
    assert e.time_breakdown_s["cp_comm"] == pytest.approx(a.time_breakdown_s["cp_comm"], rel=1e-9)
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)
