"""An fp8 routed-expert GEMM under Transformer Engine's ``GroupedLinear`` quantizes its input (backward: its output
gradient) split by local expert: TE's ``split_quantize`` runs ``multi_tensor_quantize_impl``, which launches the
recipe's kernels once per expert except for delayed scaling (one fused multi-tensor cast-transpose for all). So
current scaling pays 3 kernels per expert (amax, scale, cast; the amax pass and the cast stream, the scale kernel
does not), block scaling 1, delayed scaling 1 for the whole group; the bytes are the same as one tensor's.
Megatron-Core's gated ``linear_fc1`` is one GroupedLinear: the gate half's output gradient rides on the up half's
launches (its bytes at the full rate, no launch of its own).

Expected values are derived here from the op's shape, the recipe's bytes per element and the HBM's streaming model
(each streaming kernel on an equal share of the bytes, rising to the achievable rate over twice the preset's
ramp), against the same op costed without the quantization passes; the GEMM itself must not change."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir.common import DType
from tilewright.engine.ir.mapping import TensorFormats
from tilewright.engine.ir.ops import ExpertInfo, MoERole, Op, OpKind, TensorSplit
from tilewright.engine.perf import op_cost
from tilewright.engine.perf.device import device_model
from tilewright.engine.perf.formats import resolve_formats

HIDDEN, FFN, TOP_K = 2048, 768, 8  # Qwen3-30B-A3B's expert shape
H100_RAMP = 1.0e-6  # dgx-h100 preset: HBM stream_ramp_s


def _h100():
    gpu = load_system("dgx-h100").children[0].children[0]
    return device_model(gpu.compute, gpu.memories, None, DType.fp8)


def streamed(dev, moved: float, streams: int) -> float:
    """``streams`` memory-bound kernels moving ``moved`` bytes in equal shares: τ + r each for a share taking τ ≥ r
    at the achievable rate, 2√(rτ) below."""
    tau = moved / streams / dev.dram_bandwidth
    return streams * (tau + H100_RAMP if tau >= H100_RAMP else 2 * (H100_RAMP * tau) ** 0.5)


def _expert(name: str, local: int, rows_per_expert: int) -> Op:
    """A routed-expert GEMM as one ep-8 rank holds it: ``local`` experts, ``rows_per_expert`` token-slots each;
    up and gate are HIDDEN → FFN (column), down FFN → HIDDEN (row)."""
    rows = local * rows_per_expert
    down = name.endswith("down")
    n, k = (HIDDEN, FFN) if down else (FFN, HIDDEN)
    info = ExpertInfo(role=MoERole.expert, experts=8 * local, top_k=TOP_K, tokens=rows // TOP_K,
                      tokens_fraction=TOP_K / (8 * local))
    return Op(name=f"block0.{name}", layer=0, kind=OpKind.matmul,
              split=TensorSplit.row if down else TensorSplit.column, flops=2.0 * rows * n * k,
              params=local * n * k, gemm=(rows, n, k), in_elems=rows * k, out_elems=rows * n, moe=info)


def cast_extra(op: Op, backward: bool, recipe: str | None, expert_kernels: bool, dtype: DType = DType.fp8):
    """(extra overhead seconds, extra local bytes) of ``op`` over the same op without the quantization passes."""
    dev = _h100()
    formats = resolve_formats(dtype, TensorFormats(fp8_scaling=recipe), None)

    def cost():
        return op_cost.op_time(op, dev, 1, 1, False, backward, 2, formats=formats, expert_kernels=expert_kernels)

    with_casts = cost()
    original = op_cost.fp8_cast_passes
    op_cost.fp8_cast_passes = lambda *a, **k: None
    try:
        without = cost()
    finally:
        op_cost.fp8_cast_passes = original
    assert with_casts.compute_s == pytest.approx(without.compute_s)
    return with_casts.overhead_s - without.overhead_s, with_casts.local_bytes - without.local_bytes


@pytest.mark.parametrize(("local", "rows"), [(16, 4096), (4, 4096), (16, 256)])
def test_current_scaling_quantizes_each_experts_input_with_three_kernels(local, rows):
    dev = _h100()
    op = _expert("experts_up", local, rows)
    moved = local * rows * HIDDEN * (2 + 2 + 1)  # amax reads bf16; the cast reads bf16, writes fp8
    seconds, local_bytes = cast_extra(op, False, None, expert_kernels=True)
    assert local_bytes == pytest.approx(moved)
    assert seconds == pytest.approx(streamed(dev, moved, 2 * local) + 3 * local * dev.compute.fixed_op_s)
    # one tensor's kernels when the experts are not TE's per-expert kernels (a serving runtime)
    seconds, _ = cast_extra(op, False, None, expert_kernels=False)
    assert seconds == pytest.approx(streamed(dev, moved, 2) + 3 * dev.compute.fixed_op_s)


def test_backward_quantizes_each_experts_output_gradient_and_the_gate_rides_on_the_up_half():
    dev = _h100()
    local, rows = 16, 4096
    up, gate = _expert("experts_up", local, rows), _expert("experts_gate", local, rows)
    grad, inp = local * rows * FFN, local * rows * HIDDEN
    moved_up = grad * (2 + 2 + 1 + 1) + inp * 1  # the gradient's amax, cast and transpose; the input's transpose
    seconds, local_bytes = cast_extra(up, True, None, expert_kernels=True)
    assert local_bytes == pytest.approx(moved_up)
    assert seconds == pytest.approx(streamed(dev, moved_up, 2 * local) + 3 * local * dev.compute.fixed_op_s)
    moved_gate = grad * (2 + 2 + 1 + 1)  # its own gradient half only, streamed within the up half's launches
    seconds, local_bytes = cast_extra(gate, True, None, expert_kernels=True)
    assert local_bytes == pytest.approx(moved_gate)
    assert seconds == pytest.approx(moved_gate / dev.dram_bandwidth)
    assert cast_extra(gate, False, None, expert_kernels=True) == (0.0, 0.0)


def test_block_scaling_launches_one_kernel_per_expert_and_delayed_scaling_one_for_all():
    dev = _h100()
    local, rows = 16, 4096
    down = _expert("experts_down", local, rows)
    inp = local * rows * FFN
    block = inp * (2 + 1 + 4 / 128)  # one read, fp8 with an fp32 scale per 1 × 128 block
    seconds, local_bytes = cast_extra(down, False, "block", expert_kernels=True)
    assert local_bytes == pytest.approx(block)
    assert seconds == pytest.approx(streamed(dev, block, local) + local * dev.compute.fixed_op_s)
    delayed = inp * (2 + 1)
    seconds, local_bytes = cast_extra(down, False, "delayed", expert_kernels=True)
    assert local_bytes == pytest.approx(delayed)
    assert seconds == pytest.approx(streamed(dev, delayed, 1) + dev.compute.fixed_op_s)


def test_bf16_experts_and_dense_ops_are_unchanged():
    assert cast_extra(_expert("experts_up", 16, 4096), False, None, True, DType.bf16) == (0.0, 0.0)
    dense = _expert("experts_up", 1, 4096).model_copy(update={"moe": None, "name": "block0.mlp_up"})
    with_kernels = cast_extra(dense, False, None, expert_kernels=True)
    assert with_kernels == cast_extra(dense, False, None, expert_kernels=False)
