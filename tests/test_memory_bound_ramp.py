"""A memory-bound kernel's ramp (``Memory.stream_ramp_s``): beyond the per-kernel floor (``Compute.fixed_op_s``)
a kernel streaming from DRAM delivers a bandwidth that rises linearly to the achievable rate over twice the ramp r
(the first loads' latency, the last wave's drain): a kernel whose bytes take τ ≥ r at the full rate takes τ + r, a
smaller one 2√(rτ). So a kernel of a few MB reaches less than the sustained bandwidth, and one of a few KB costs
about the floor. GEMMs pay their efficiency curve's fixed part instead (``DeviceModel.matmul_fill_s``), never both.

Expected figures are derived here from the dgx-a100 / dgx-h100 presets' datasheet inputs (HBM 2,039 GB/s at
efficiency 0.87, floor 1.1 us, ramp 1.9 us; H100 ramp 1.0 us) and from the published size sweep the ramp was
taken from, never read back from a run.
"""

from __future__ import annotations

import pytest
from tilewright.engine.engines.analytic.engine import AnalyticEngine
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.common import DEFAULT_FIDELITY, DType
from tilewright.engine.ir.hardware import Component, Memory, MemoryKind
from tilewright.engine.ir.mapping import Fp8Scaling
from tilewright.engine.ir.ops import OpKind
from tilewright.engine.perf.device import DeviceModel, device_model
from tilewright.engine.perf.formats import OpFormats
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload

from tests.agreement import assert_engines_agree, assert_search_matches_engine

A100_HBM = 2039e9 * 0.87  # dgx-a100 preset: HBM2e 2,039 GB/s at efficiency 0.87
A100_FLOOR = 1.1e-6  # its fixed_op_s
A100_RAMP = 1.9e-6  # its stream_ramp_s
H100_RAMP = 1.0e-6
GPT = GPTSpec(name="gpt-ramp", layers=2, hidden=1024, heads=16, seq_len=1024, vocab=51200)


def _rise(nbytes: float, bandwidth: float, ramp: float) -> float:
    """Time of ``nbytes`` delivered at a bandwidth rising linearly from 0 to ``bandwidth`` over 2 × ``ramp``,
    then flat: the bytes of the rise are bandwidth × ramp; within it t²·bandwidth / (4·ramp) bytes by t."""
    if nbytes >= bandwidth * ramp:
        return 2 * ramp + (nbytes - bandwidth * ramp) / bandwidth
    return (4 * ramp * nbytes / bandwidth) ** 0.5


def _gpu(system: Component) -> Component:
    return next(c for _, c in system.walk() if c.compute is not None)


def _device(name: str, ramp: float | None = None, dtype: DType = DType.fp16) -> DeviceModel:
    """The preset's GPU, its HBM's ramp replaced by ``ramp`` when given."""
    gpu = _gpu(load_system(name))
    mems = [m.model_copy(update={"stream_ramp_s": ramp}) if ramp is not None and m.kind is not MemoryKind.sram
            else m for m in gpu.memories]
    return device_model(gpu.compute, mems, None, dtype)


def _without_ramp(system: Component) -> Component:
    """``system`` with every memory's ramp at 0 (the model before ``stream_ramp_s``)."""
    data = system.model_dump(mode="json")

    def strip(node: dict) -> None:
        for m in node.get("memories", []):
            m["stream_ramp_s"] = 0.0
        for child in node.get("children", []):
            strip(child)

    strip(data)
    return Component.model_validate(data)


def _ops(kind: OpKind):
    graph = build_workload(GPT)
    return [op for op in graph.layer_ops(graph.block_layers[0]) if op.kind is kind]


def test_the_presets_carry_the_published_ramp():
    assert _device("dgx-a100").stream_ramp_s == pytest.approx(A100_RAMP)
    assert _device("dgx-a100").dram_bandwidth == pytest.approx(A100_HBM)
    assert _device("dgx-a100").compute.fixed_op_s == pytest.approx(A100_FLOOR)
    assert _device("dgx-h100").stream_ramp_s == pytest.approx(H100_RAMP)


def test_the_field_is_off_by_default_and_left_out_of_saved_files():
    """An old project's memory has no ramp and saves back without the key; one that sets it keeps it."""
    m = Memory(name="hbm", kind=MemoryKind.hbm, capacity_bytes=1e9, bandwidth_bytes_per_s=1e12)
    assert m.stream_ramp_s == 0.0
    assert "stream_ramp_s" not in m.model_dump(mode="json")
    assert m.model_copy(update={"stream_ramp_s": 1e-6}).model_dump(mode="json")["stream_ramp_s"] == 1e-6


@pytest.mark.parametrize("backward", [False, True])
def test_an_elementwise_kernel_pays_floor_ramp_and_bytes(backward: bool):
    """GeLU of one micro-batch (tokens × 4h fp16): forward reads its input and writes its output; backward
    reads the saved input and the output gradient and writes the input gradient. It is memory-bound, so its
    time is the floor, the ramp and its bytes at the achievable rate."""
    gelu = next(op for op in _ops(OpKind.elementwise) if op.name.endswith("activation"))
    assert gelu.params == 0
    mb = 2
    elems = gelu.in_elems * mb
    assert elems == pytest.approx(mb * GPT.seq_len * 4 * GPT.hidden)
    nbytes = (3 if backward else 2) * elems * 2.0
    t = op_time(gelu, _device("dgx-a100"), mb, 1, False, backward, 2.0)
    assert t.memory_s > t.compute_s
    assert t.busy_s == pytest.approx(A100_FLOOR + A100_RAMP + nbytes / A100_HBM, rel=1e-9)
    assert t.overhead_s == pytest.approx(A100_FLOOR + A100_RAMP, rel=1e-9)


def test_the_ramp_reproduces_the_published_size_sweep():
    """te42kyfo/gpu-benches gpu-small-kernels, A100-SXM4-80GB, CUDA graph replay (a100_80_graph.txt): a scale
    kernel moving V bytes (one read and one write stream) above the 40 MB L2 takes V / measured GB/s. The
    preset's floor + ramp + V / (0.87 × peak) lands within 2 % of each; without the ramp it is several
    percent fast at 45 MB, where the ramp is 7 % of the kernel."""
    dev = _device("dgx-a100")
    floor = dev.compute.fixed_op_s
    published = {16 * 2836433: 1585e9, 16 * 6613527: 1663e9, 16 * 24470157: 1726e9, 16 * 61620009: 1742e9}
    for nbytes, rate in published.items():
        measured = nbytes / rate
        modelled = floor + dev.stream_s(nbytes)
        assert modelled == pytest.approx(measured, rel=0.02), nbytes
    small = min(published)
    without = floor + small / dev.dram_bandwidth
    assert abs(without / (small / published[small]) - 1) > 0.05
    assert dev.stream_s(small) - small / dev.dram_bandwidth == pytest.approx(A100_RAMP)


def test_a_gemm_pays_its_fill_not_the_ramp_but_its_bias_gradient_kernel_does():
    """A weighted GEMM's forward costs the same with or without the ramp (the efficiency curve's t0 is its start
    and drain); its backward adds the bias gradient's reduction kernel, which streams the output gradient
    and so pays one ramp."""
    qkv = next(op for op in _ops(OpKind.matmul) if op.name.endswith("qkv"))
    n, k = qkv.gemm[1], qkv.gemm[2]
    assert qkv.params > n * k  # it has a bias
    with_ramp, without = _device("dgx-a100"), _device("dgx-a100", ramp=0.0)
    fwd = [op_time(qkv, d, 1, 1, False, False, 2.0).busy_s for d in (with_ramp, without)]
    bwd = [op_time(qkv, d, 1, 1, False, True, 2.0).busy_s for d in (with_ramp, without)]
    assert fwd[0] == pytest.approx(fwd[1], rel=1e-12)
    assert bwd[0] - bwd[1] == pytest.approx(A100_RAMP, rel=1e-9)


@pytest.mark.parametrize(("recipe", "streams", "per_elem"), [(Fp8Scaling.tensor, 2, 2 + 2 + 1),
                                                             (Fp8Scaling.delayed, 1, 2 + 1)])
def test_fp8_quantization_kernels_that_stream_pay_the_ramp(recipe: Fp8Scaling, streams: int, per_elem: float):
    """Current scaling quantizes a tensor with an amax pass (reads 2 B per element), a one-thread scale kernel
    and the cast (reads 2 B, writes 1): two of its three kernels stream the tensor. Delayed scaling casts in
    one streaming kernel. A weighted fp8 GEMM's forward quantizes its input (no bias gradient): with the ramp
    its streaming kernels each rise on an equal share of the bytes (H100)."""
    fmt = OpFormats(DType.fp8, DType.bf16, DType.bf16, DEFAULT_FIDELITY[DType.fp8], fp8_scaling=recipe)
    mlp = next(op for op in _ops(OpKind.matmul) if op.name.endswith("mlp_up"))
    dev = _device("dgx-h100", None, DType.bf16)
    t = [op_time(mlp, _device("dgx-h100", ramp, DType.bf16), 1, 1, False, False, 2.0, formats=fmt).busy_s
         for ramp in (None, 0.0)]
    nbytes = mlp.in_elems * per_elem
    share = nbytes / streams
    expected = streams * _rise(share, dev.dram_bandwidth, H100_RAMP) - nbytes / dev.dram_bandwidth
    assert t[0] - t[1] == pytest.approx(expected, rel=1e-9)
    assert 0 < expected <= streams * H100_RAMP


def test_a_tiny_kernel_costs_about_the_floor_and_a_mid_sized_one_rises():
    """A kernel of 6 KB (a 1024-element fp16 add) gains a fraction of the ramp, staying within the 1.1-1.3 us
    measured launch to launch of such kernels; one of 2 MB (inside the rise: 1.13 us at the full rate)
    takes 2√(r τ); both lie between streaming at full rate and paying the whole ramp."""
    dev = _device("dgx-a100")
    for nbytes in (6144.0, 2e6):
        tau = nbytes / A100_HBM
        assert tau < A100_RAMP
        assert dev.stream_s(nbytes) == pytest.approx(2 * (A100_RAMP * tau) ** 0.5, rel=1e-9)
        assert dev.stream_s(nbytes) == pytest.approx(_rise(nbytes, A100_HBM, A100_RAMP), rel=1e-9)
        assert tau < dev.stream_s(nbytes) < tau + A100_RAMP
    assert 1.1e-6 <= A100_FLOOR + dev.stream_s(6144.0) <= 1.3e-6


def _project(system: Component, tp: int, mb: int, engine: str = "analytic") -> Project:
    mapping = Mapping(tp=tp, pp=1, dp=8 // tp, micro_batch=mb, global_batch=8 // tp * mb * 2)
    return Project(name="ramp", hardware=system, workload=GPT, mapping=mapping,
                   run=RunSettings(dtype="fp16", engine=engine, contention=False))


@pytest.mark.parametrize(("tp", "mb"), [(1, 1), (8, 8)])
def test_both_engines_and_the_search_charge_the_ramp_alike(tp: int, mb: int):
    """On one DGX A100 a small GPT's iteration grows with the ramp, the event engine times it as the analytic
    engine does, and the search's evaluator as the engine does. (At tp 8 and micro-batch 1 the device waits
    for the host's dispatch, which hides the ramp: micro-batch 8 keeps the device the bound.)"""
    system = load_system("dgx-a100")
    analytic = simulate(_project(system, tp, mb))
    assert_engines_agree(analytic, simulate(_project(system, tp, mb, "event")))
    before = AnalyticEngine().run(make_plan(_project(_without_ramp(system), tp, mb)))
    assert analytic.iteration_time_s > before.iteration_time_s
    assert_search_matches_engine(_project(system, tp, mb), Candidate(tp, 1, 8 // tp, mb, zero=0,
                                                                      sequence_parallel=False))
