"""A made-up expert all-to-all and a pass builder over a real H100 to hang it on, shared by the tests of the
overlapped all-to-all's cover (tests/test_a2a_*.py)."""

from __future__ import annotations

from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan.pass_builder import PassBuilder
from tilewright.engine.plan.passes import PassContext
from tilewright.engine.simulate import make_plan

LATENCY = 20e-6  # s: a made-up all-to-all's fixed part
BANDWIDTH = 50e9  # bytes/s: and its bandwidth
NBYTES = 10e6  # each all-to-all: 20 µs + 200 µs
UNITS, SMS = 132, 24  # the H100's SMs, and those an NCCL kernel holds (dgx-h100 preset)


def a2a_seconds(nbytes: float) -> float:
    return LATENCY + nbytes / BANDWIDTH


def h100_builder(kind: str = "F") -> tuple[PassBuilder, object, object]:
    """A builder of one ``kind`` pass over a real H100 whose all-to-alls take ``a2a_seconds``, a block op to hang
    them on, and the plan (its workload holds the other layers' ops)."""
    plan = make_plan(Project(name="a2a", hardware=load_system("dgx-h100"),
                             workload=GPTSpec(name="g", layers=1, hidden=1024, heads=8, seq_len=512, vocab=8192),
                             mapping=Mapping(tp=1, pp=1, dp=1, micro_batch=1, global_batch=1),
                             run=RunSettings(dtype="bf16")))
    ctx = PassContext(plan.stages[0].dev, 1, 1, False, 2.0)
    ctx.ep_seconds = a2a_seconds
    assert (ctx.dev.compute.gemm_units, ctx.dev.compute.collective_sms) == (UNITS, SMS)
    return PassBuilder(ctx, kind), plan.workload.layer_ops(plan.workload.block_layers[0])[0], plan
