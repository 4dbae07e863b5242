"""Megatron-LM's vocab-parallel cross-entropy as a GPU runs it eagerly (``plan.launch.eager_cross_entropy_bytes``,
``plan.passes``): the logits cast to fp32 and streamed once per kernel (max, subtract, exp, sum, divide forward;
scale and cast back backward), and three all-reduces of one fp32 value per token over the tensor group. A fused
loss (``mapping.fused_cross_entropy``) and a device that runs the loss as one program (a wafer) move what
``op_cost`` charges any loss: one read of the logits forward, two backward."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.ops import OpKind
from tilewright.engine.plan.launch import eager_cross_entropy_bytes
from tilewright.engine.simulate import make_plan
from tilewright.engine.workloads import build_workload

SPEC = GPTSpec(name="gpt-small", layers=2, hidden=1024, heads=16, seq_len=1024, vocab=51200)
MB = 2


def _loss():
    return next(op for op in build_workload(SPEC).ops() if op.kind is OpKind.loss)


def test_bytes_per_logit_beyond_one_read():
    """bf16: forward 2 + 4 (cast) + 4 + 8 + 8 + 4 + 8 = 38 B per logit, of which op_cost charges 2; backward
    8 + 4 + 2 = 14, of which 4. fp32 has no cast: 32 − 4 and 8 − 8."""
    op = _loss()
    assert eager_cross_entropy_bytes(op, False, 2.0) == 36.0
    assert eager_cross_entropy_bytes(op, True, 2.0) == 10.0
    assert eager_cross_entropy_bytes(op, False, 4.0) == 28.0
    assert eager_cross_entropy_bytes(op, True, 4.0) == 0.0
    other = next(op for op in build_workload(SPEC).ops() if op.kind is OpKind.softmax)
    assert eager_cross_entropy_bytes(other, False, 2.0) == 0.0


def _plan(tp: int, fused: bool = False, system: str = "dgx-a100"):
    mapping = Mapping(tp=tp, pp=1, dp=1, micro_batch=MB, global_batch=2 * MB, fused_cross_entropy=fused)
    project = Project(name="ce", hardware=load_system(system), workload=SPEC, mapping=mapping,
                      run=RunSettings(dtype="bf16", engine="analytic"))
    return make_plan(project).stages[0]


@pytest.mark.parametrize("tp", [1, 8])
def test_the_eager_loss_streams_its_shard_once_per_kernel(tp: int):
    eager, fused = _plan(tp), _plan(tp, fused=True)
    logits = SPEC.seq_len * SPEC.vocab * MB / tp
    for kind, extra in (("F", 36.0), ("B", 10.0)):
        more = sum(s.local_bytes for s in eager.passes[(0, kind)].segments) - sum(
            s.local_bytes for s in fused.passes[(0, kind)].segments)
        assert more == pytest.approx(extra * logits)
        slower = eager.passes[(0, kind)].busy_s - fused.passes[(0, kind)].busy_s
        device_s = extra * logits / eager.dev.dram_bandwidth
        if tp == 1:  # the device binds: all of it shows
            assert slower == pytest.approx(device_s, rel=1e-6)
        else:  # tp 8 of a small model waits for the host: part of it hides under the host's calls
            assert 0 < slower <= device_s * (1 + 1e-9)


def test_three_token_all_reduces_over_the_tensor_group():
    def comms(tp: int) -> list[tuple[str, float]]:
        return [s.comm for s in _plan(tp).passes[(0, "F")].segments if s.comm is not None]

    assert comms(1) == []
    # the forward ends with them: fp32 per token of the micro-batch, after the last layer's all-reduce
    assert comms(8)[-4:] == [("all-reduce", SPEC.seq_len * MB * SPEC.hidden * 2.0)] + [
        ("all-reduce", SPEC.seq_len * MB * 4.0)] * 3
