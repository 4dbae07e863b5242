"""Saved activations under fp8 (``perf.memory.fp8_saved``). Transformer Engine's fp8 modules save a weighted
GEMM's input as its fp8 copy (1 B per element): ``LayerNormLinear`` its fp8 ``ln_out`` (qkv's and the MLP's up
and gate input), ``Linear`` its quantized input (out_proj's, the down projection's). Norm inputs, Q/K/V and
the activation's input stay bf16; a fused attention kernel keeps its output in bf16 and out_proj's fp8 copy
comes on top. The expected bytes are counted by hand from the block's shapes, not from the ops."""

from __future__ import annotations

import pytest
from tilewright.engine.ir import LlamaSpec
from tilewright.engine.ir.common import DType
from tilewright.engine.ir.mapping import Recompute, TensorFormats
from tilewright.engine.ir.workload import MoESpec
from tilewright.engine.perf.formats import resolve_formats
from tilewright.engine.perf.memory import activation_bytes
from tilewright.engine.workloads import build_workload

S, H, FFN, LAYERS, MB = 256, 512, 1408, 2, 2
SPEC = LlamaSpec(name="llama-fp8", layers=LAYERS, hidden=H, heads=8, kv_heads=2, ffn=FFN, seq_len=S, vocab=1000)
FLASH = frozenset({("attention", "softmax")})


def _blocks() -> list[list]:
    w = build_workload(SPEC)
    return [w.layer_ops(i) for i in range(1, LAYERS + 1)]


def _acts(dtype: DType, tp: int = 1, sp: bool = False, fused: frozenset = frozenset(),
          recompute: Recompute = Recompute.none) -> float:
    formats = resolve_formats(dtype, TensorFormats(), None)
    return activation_bytes(_blocks(), MB, tp, sp, recompute, 2, fused, formats=formats)


def test_fp8_saves_the_weighted_gemm_inputs_at_one_byte():
    """Per block and sample, four GEMM inputs shrink from 2 B to 1 B: the two norms' outputs (s·h each, the
    fp8 ln_out of qkv and of up/gate), out_proj's input (s·a·d = s·h) and mlp_down's input (s·ffn)."""
    shrunk = 3 * S * H + S * FFN
    assert _acts(DType.bf16) - _acts(DType.fp8) == pytest.approx(LAYERS * MB * shrunk * (2 - 1))


@pytest.mark.parametrize("tp", [2, 4])
def test_the_fp8_saving_is_sharded_like_the_tensors(tp: int):
    """With sequence parallelism the norms' outputs are sequence shards, the GEMM inputs tensor shards: all
    of the saving divides by tp."""
    shrunk = 3 * S * H + S * FFN
    diff = _acts(DType.bf16, tp, True) - _acts(DType.fp8, tp, True)
    assert diff == pytest.approx(LAYERS * MB * shrunk / tp)


def test_a_fused_attention_kernel_keeps_its_output_bf16_and_out_proj_adds_an_fp8_copy():
    """Flash: out_proj's input is the kernel's saved bf16 output; TE saves its own fp8 copy besides (+1 B),
    so only the norms' outputs and mlp_down's input save a byte each."""
    saved = 2 * S * H + S * FFN - S * H
    assert _acts(DType.bf16, fused=FLASH) - _acts(DType.fp8, fused=FLASH) == pytest.approx(LAYERS * MB * saved)


def test_bf16_projects_are_unchanged():
    blocks = _blocks()
    plain = activation_bytes(blocks, MB, 1, False, Recompute.none, 2)
    assert _acts(DType.bf16) == pytest.approx(plain)


def test_full_recomputation_keeps_the_bf16_layer_input():
    assert _acts(DType.fp8, recompute=Recompute.full) == pytest.approx(_acts(DType.bf16, recompute=Recompute.full))
    assert _acts(DType.fp8, recompute=Recompute.full) == pytest.approx(LAYERS * MB * S * H * 2)


def test_moe_expert_gemms_save_fp8_inputs_and_the_router_keeps_the_norm_output_bf16():
    """MoE block (no shared expert): the grouped experts' up input (the k·s dispatched tokens, s·k·h) and
    down input (s·k·f) go to 1 B; the pre-MLP norm is its own module whose output the bf16 router reads, so
    it stays; the attention side shrinks as in the dense block (norm1's output, out_proj's input)."""
    k, f = 2, 384
    spec = SPEC.model_copy(update={"moe": MoESpec(experts=8, top_k=k, expert_ffn=f)})
    w = build_workload(spec)
    blocks = [w.layer_ops(i) for i in range(1, LAYERS + 1)]
    assert any(o.name.endswith("experts_down") for o in blocks[0])

    def acts(dtype: DType) -> float:
        return activation_bytes(blocks, MB, 1, False, Recompute.none, 2,
                                formats=resolve_formats(dtype, TensorFormats(), None))

    shrunk = 2 * S * H + S * k * H + S * k * f
    assert acts(DType.bf16) - acts(DType.fp8) == pytest.approx(LAYERS * MB * shrunk)


def test_recomputing_the_expert_activation_drops_the_fp8_down_input():
    """``moe_act``: the experts' down projection's saved input is freed; under fp8 that is the 1 B copy, so
    the fp8 saving shrinks by exactly its s·k·f bytes."""
    k, f = 2, 384
    spec = SPEC.model_copy(update={"moe": MoESpec(experts=8, top_k=k, expert_ffn=f)})
    w = build_workload(spec)
    blocks = [w.layer_ops(i) for i in range(1, LAYERS + 1)]

    def acts(dtype: DType) -> float:
        return activation_bytes(blocks, MB, 1, False, Recompute.selective, 2, recompute_modules=["moe_act"],
                                formats=resolve_formats(dtype, TensorFormats(), None))

    shrunk = 2 * S * H + S * k * H
    assert acts(DType.bf16) - acts(DType.fp8) == pytest.approx(LAYERS * MB * shrunk)


def test_recomputing_the_mlp_leaves_only_the_attention_side_fp8_saving():
    """``mlp``: the checkpointed MLP frees its norm's output (the fp8 ln_out) and mlp_down's input, so only
    norm1's output and out_proj's input (s·h each) still save a byte under fp8."""
    def acts(dtype: DType) -> float:
        return activation_bytes(_blocks(), MB, 1, False, Recompute.selective, 2, recompute_modules=["mlp"],
                                formats=resolve_formats(dtype, TensorFormats(), None))

    assert acts(DType.bf16) - acts(DType.fp8) == pytest.approx(LAYERS * MB * 2 * S * H)


def _shared_blocks(k: int, f: int) -> list[list]:
    spec = SPEC.model_copy(update={"moe": MoESpec(experts=8, top_k=k, expert_ffn=f, shared_experts=1)})
    w = build_workload(spec)
    return [w.layer_ops(i) for i in range(1, LAYERS + 1)]


def _moe_acts(blocks: list[list], dtype: DType, tp: int = 1, sp: bool = False,
              recompute: Recompute = Recompute.none, modules: list[str] | None = None) -> float:
    return activation_bytes(blocks, MB, tp, sp, recompute, 2, recompute_modules=modules,
                            formats=resolve_formats(dtype, TensorFormats(), None))


def test_shared_experts_save_their_own_fp8_copy_of_the_pre_mlp_norm_output():
    """MoE block with one shared expert (width f): as without it, norm1's output and out_proj's input (s·h
    each), the experts' up input (s·k·h) and down input (s·k·f) shrink by 1 B, and so does the shared down
    projection's input (s·f); the router still reads the pre-MLP norm's bf16 output, and the shared experts'
    fused up/gate GEMM (a TE Linear) saves its own fp8 copy of it on top: +s·h · 1 B."""
    k, f = 2, 384
    blocks = _shared_blocks(k, f)
    shrunk = 2 * S * H + S * k * H + S * k * f + S * f
    copy = S * H
    assert _moe_acts(blocks, DType.bf16) - _moe_acts(blocks, DType.fp8) == pytest.approx(LAYERS * MB * (shrunk - copy))


@pytest.mark.parametrize("sp", [True, False])
def test_the_shared_experts_fp8_copy_is_sharded_like_the_norm_output(sp: bool):
    """tp 2: the copy is of the replicated norm output, a sequence shard (/ tp) with sequence parallelism and
    whole on every rank without; every tensor-split saving divides by tp, norm1's fused fp8 ln_out like the
    copy (/ tp with sequence parallelism only)."""
    k, f, tp = 2, 384, 2
    blocks = _shared_blocks(k, f)
    split = S * H + S * k * H + S * k * f + S * f  # out_proj's, the experts' and shared_down's inputs
    replicated = S * H - S * H  # norm1's ln_out saves a byte, the copy costs one
    norm_div = tp if sp else 1
    expected = LAYERS * MB * (split / tp + replicated / norm_div)
    assert _moe_acts(blocks, DType.bf16, tp, sp) - _moe_acts(blocks, DType.fp8, tp, sp) == pytest.approx(expected)


def test_recomputing_the_shared_experts_drops_their_fp8_copy():
    """``shared_experts``: the checkpointed shared MLP stores nothing (neither its fp8 input copy nor the down
    projection's input); the rest of the fp8 saving is the routed experts' and the attention side's."""
    k, f = 2, 384
    blocks = _shared_blocks(k, f)
    diff = (_moe_acts(blocks, DType.bf16, recompute=Recompute.selective, modules=["shared_experts"])
            - _moe_acts(blocks, DType.fp8, recompute=Recompute.selective, modules=["shared_experts"]))
    assert diff == pytest.approx(LAYERS * MB * (2 * S * H + S * k * H + S * k * f))
