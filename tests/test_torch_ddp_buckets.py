"""PyTorch DDP's gradient buckets under Megatron-LM v2.x's ``--DDP-impl torch`` (``plan.replica_sync``
``ddp_bucket_calls``): the overlapped reduction is issued as one all-reduce per 25 MiB bucket (after a 1 MiB first
one), each paying the latencies the plan's single collective pays once. Counted here by hand from the stage's
gradient bytes, and charged alike by the plan, both engines and the search's tail."""

from __future__ import annotations

import math

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.project import EngineKind
from tilewright.engine.plan.replica_sync import torch_ddp_calls
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import make_plan, simulate

from tests.agreement import assert_engines_agree, assert_search_matches_engine
from tests.engine_cases import dgx

MIB = 2**20
GPT = GPTSpec(name="g", layers=4, hidden=2048, heads=16, seq_len=2048, vocab=32000)


def _latency(collective) -> float:
    return sum(ph.latency_s for ph in collective.phases)


def _bandwidth_part(collective, hw) -> float:
    return collective.time(hw) - _latency(collective)


def _by_hand(nbytes: float) -> int:
    """Buckets of PyTorch's reducer: the first holds up to 1 MiB, every later one up to 25 MiB."""
    return 1 + math.ceil(max(0.0, nbytes - MIB) / (25 * MIB))


def test_bucket_counts():
    """The reducer's bucket sizes (torch.nn.parallel.DistributedDataParallel: ``bucket_cap_mb=25``, first bucket
    ``dist._DEFAULT_FIRST_BUCKET_BYTES``)."""
    assert torch_ddp_calls(0) == 0
    assert torch_ddp_calls(1000) == 1
    assert torch_ddp_calls(MIB) == 1
    assert torch_ddp_calls(MIB + 1) == 2
    assert torch_ddp_calls(26 * MIB) == 2
    assert torch_ddp_calls(26 * MIB + 1) == 3
    assert torch_ddp_calls(3.3e9) == _by_hand(3.3e9)


def test_the_buckets_pay_each_their_latency():
    """One stage, two replicas, Megatron-LM v2.x (the default host framework) with overlap: the early bucket is
    (layers − 1) / layers of the bytes as that many DDP buckets, the late one the rest of the calls; the
    bandwidth part is the whole collective's share, the latency the whole one's per call."""
    project = dgx(pp=1, overlap_grad_reduce=True)
    plan = make_plan(project)
    whole = plan.dp_collective(0, 0)
    nbytes = plan.stages[0].grad_bytes[0]
    layers = len(plan.stages[0].chunk_layers[0])
    frac = (layers - 1) / layers
    calls_early = _by_hand(nbytes * frac)
    calls_late = _by_hand(nbytes) - calls_early
    assert calls_early > 1 and calls_late >= 1  # ~100M parameters over tp 2: several buckets
    early, late = plan.dp_buckets(0, 0)
    lat = _latency(whole)
    assert lat > 0
    assert _latency(early) == pytest.approx(calls_early * lat, rel=1e-12)
    assert _latency(late) == pytest.approx(calls_late * lat, rel=1e-12)
    assert _bandwidth_part(early, plan.hw) == pytest.approx(frac * _bandwidth_part(whole, plan.hw), rel=1e-9)
    assert _bandwidth_part(late, plan.hw) == pytest.approx((1 - frac) * _bandwidth_part(whole, plan.hw), rel=1e-9)


def test_megatron_core_and_zero_keep_one_collective():
    """Megatron-Core's DDP ('mcore' frameworks) and the distributed optimizer's reduce-scatter are not PyTorch's
    reducer: each bucket part stays one collective, its latency paid once."""
    for extra in ({"host_framework": "mcore"}, {"zero": 1}):
        plan = make_plan(dgx(pp=1, overlap_grad_reduce=True, **extra))
        whole = plan.dp_collective(0, 0)
        for part in plan.dp_buckets(0, 0):
            assert _latency(part) == pytest.approx(_latency(whole), rel=1e-12)


def test_the_buckets_cost_time_and_the_engines_agree():
    """The extra latency lengthens the early bucket, so the backward beside it loses more SMs: the iteration
    grows against Megatron-Core's single collective, and the event engine (contention off) times it as the
    analytic one."""
    def run(project: Project, engine: str):
        r = project.run.model_copy(update={"engine": EngineKind(engine), "contention": False})
        return simulate(project.model_copy(update={"run": r}))

    torch_ddp = dgx(pp=1, overlap_grad_reduce=True)
    analytic, event = run(torch_ddp, "analytic"), run(torch_ddp, "event")
    assert_engines_agree(analytic, event)
    plan = make_plan(torch_ddp)
    single = make_plan(dgx(pp=1, overlap_grad_reduce=True, host_framework="mcore"))
    assert plan.dp_buckets(0, 0)[0].time(plan.hw) > single.dp_buckets(0, 0)[0].time(single.hw)
    assert plan.dp_overlap_loss(0, 0) > single.dp_overlap_loss(0, 0)


@pytest.mark.parametrize("c", [Candidate(2, 1, 4, 1), Candidate(1, 2, 4, 1)], ids=lambda c: c.label())
def test_the_search_tail_counts_the_buckets(c: Candidate):
    """The search's recurrence times the bucketed reduction as the analytic engine does."""
    base = Project(name="s", hardware=load_system("dgx-a100"), workload=GPT,
                   mapping=Mapping(global_batch=64, overlap_grad_reduce=True), run=RunSettings(dtype="fp16"))
    p = assert_search_matches_engine(base, c, keep_base=True)
    plan = make_plan(p)
    assert _latency(plan.dp_buckets(0, 0)[0]) > _latency(plan.dp_collective(0, 0))
