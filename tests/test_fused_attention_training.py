"""Fused (flash) attention in training: causal pairs, no separate re-run, no score traffic or storage.

A fused attention → softmax chain (``mapping.fusion``) runs attention as one kernel, as Megatron-Core's
cuDNN/FlashAttention does: a decoder's causal kernel computes only the key blocks its mask leaves, its backward
recomputes the scores on chip (2.5× the forward FLOPs), selective recomputation has nothing of it to re-run,
and neither the scores nor the probabilities go through memory or are stored. Megatron-LM's unfused attention
keeps all of it: s² pairs, the separate re-run, the a·s² tensors. Expected numbers are derived here from the
shapes, not read back from the engine.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import BertSpec, GPTSpec, LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.ops import OpKind
from tilewright.engine.perf.device import device_model
from tilewright.engine.perf.memory import activation_bytes
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.plan.passes import fused_edges
from tilewright.engine.simulate import make_plan
from tilewright.engine.workloads import build_workload
from tilewright.engine.workloads.transformer_block import FLASH_BLOCK, flash_pairs
from tilewright.engine.workloads.transformer_inference import attention_pairs, inference_graph

SEQ, HIDDEN, HEADS, KV_HEADS, LAYERS = 1024, 512, 8, 2, 2
HEAD_DIM = HIDDEN // HEADS
FLASH = [["attention", "softmax"]]


def _llama(seq: int = SEQ, window: int | None = None) -> LlamaSpec:
    return LlamaSpec(name="llama-tiny", layers=LAYERS, hidden=HIDDEN, heads=HEADS, kv_heads=KV_HEADS, ffn=1024,
                     vocab=4096, seq_len=seq, sliding_window=window)


def _gpt() -> GPTSpec:
    return GPTSpec(name="gpt-tiny", layers=LAYERS, hidden=HIDDEN, heads=HEADS, seq_len=SEQ, vocab=4096)


def _tiled_pairs(seq: int, block: int, window: int | None) -> int:
    """Pairs of the (query tile, key tile) blocks holding at least one unmasked pair, each counted whole: a
    brute-force mask, independent of ``flash_pairs``' per-tile key range."""
    i = np.arange(seq)[:, None]
    j = np.arange(seq)[None, :]
    visible = j <= i
    if window is not None:
        visible &= j > i - window
    total = 0
    for q0 in range(0, seq, block):
        for k0 in range(0, seq, block):
            tile = visible[q0:q0 + block, k0:k0 + block]
            if tile.any():
                total += tile.size
    return total


@pytest.mark.parametrize("seq,window", [(1000, None), (777, 100), (4096, 1024), (300, 1)])
def test_block_one_is_the_exact_causal_count(seq, window):
    assert flash_pairs(seq, window, block=1) == attention_pairs(seq, seq, causal=True, window=window)


@pytest.mark.parametrize("seq,block,window", [(1024, 128, None), (1000, 128, None), (777, 64, 100),
                                              (2048, 128, 300), (300, 64, 1)])
def test_a_flash_kernel_computes_every_tile_the_mask_touches(seq, block, window):
    assert flash_pairs(seq, window, block) == _tiled_pairs(seq, block, window)


def test_square_causal_tiles_give_s_times_s_plus_block_over_two():
    s, b = 8192, FLASH_BLOCK
    assert flash_pairs(s) == s * (s + b) / 2
    assert s * (s + 1) / 2 < flash_pairs(s) < s * s


@pytest.mark.parametrize("build", [_llama, _gpt])
def test_decoder_attention_carries_its_causal_flops(build):
    """flops keep all s² pairs (what unfused attention computes, and the model FLOPs); fused_flops the causal
    tiles, 4·head_dim·heads FLOPs per pair (QKᵀ and PV, 2 each)."""
    att = [op for op in build_workload(build()).ops() if op.kind is OpKind.attention]
    assert len(att) == LAYERS
    per_pair = 4 * HEAD_DIM * HEADS
    for op in att:
        assert op.flops == pytest.approx(per_pair * SEQ * SEQ)
        assert op.fused_flops == pytest.approx(per_pair * SEQ * (SEQ + FLASH_BLOCK) / 2)


def test_encoder_attention_is_not_causal():
    spec = BertSpec(name="bert-tiny", layers=LAYERS, hidden=HIDDEN, heads=HEADS, seq_len=SEQ, vocab=4096)
    att = [op for op in build_workload(spec).ops() if op.kind is OpKind.attention]
    assert att and all(op.fused_flops is None for op in att)


def test_inference_passes_keep_their_own_causal_count():
    graph = inference_graph(_llama(), 512, 512, 1, True)
    (att, *_) = [op for op in graph.ops() if op.kind is OpKind.attention]
    assert att.fused_flops is None
    assert att.flops == pytest.approx(4 * HEAD_DIM * HEADS * 512 * 513 / 2)


def _h100():
    system = load_system("dgx-h100")
    gpu = system.children[0].children[0]
    return device_model(gpu.compute, gpu.memories, None, "bf16")


def _layer(spec):
    graph = build_workload(spec)
    return graph.layer_ops(graph.block_layers[0])


@pytest.mark.parametrize("mb,tp", [(1, 1), (2, 4)])
def test_fused_attention_op_costs_causal_forward_and_flash_backward(mb, tp):
    dev = _h100()
    att = next(op for op in _layer(_llama()) if op.kind is OpKind.attention)
    pairs = SEQ * (SEQ + FLASH_BLOCK) / 2
    causal = pairs * 4 * HEAD_DIM * HEADS * mb / tp
    full = SEQ * SEQ * 4 * HEAD_DIM * HEADS * mb / tp

    def flops(backward: bool, fused: bool) -> float:
        return op_time(att, dev, mb, tp, False, backward, 2, fused_out=fused).flops

    assert flops(False, True) == pytest.approx(causal)
    assert flops(True, True) == pytest.approx(2.5 * causal)  # recomputes QKᵀ: 5 matmuls against 2
    assert flops(False, False) == pytest.approx(full)  # Megatron-LM's baddbmm + masked softmax + bmm
    assert flops(True, False) == pytest.approx(2 * full)


def test_fused_softmax_moves_no_scores():
    """Unfused, the softmax reads and writes the a·s² scores (forward; Megatron's causal kernel reads only their
    lower triangle, ``perf.score_kernels``); inside the fused kernel it moves nothing, forward or backward. Its
    output was the ~1.4 ms per Llama-3 8B layer NVIDIA's run does not pay."""
    dev = _h100()
    soft = next(op for op in _layer(_llama()) if op.kind is OpKind.softmax)
    scores = HEADS * SEQ * SEQ
    unfused = op_time(soft, dev, 1, 1, False, False, 2)
    assert unfused.local_bytes == pytest.approx((0.5 + 1) * scores * 2)
    for backward in (False, True):
        fused = op_time(soft, dev, 1, 1, False, backward, 2, fused_in=True)
        assert fused.local_bytes == 0
        assert fused.memory_s == 0


def test_fused_attention_still_writes_its_context():
    """The fused edge is the scores'; the context (s × heads·head_dim) still goes to memory for out_proj."""
    dev = _h100()
    att = next(op for op in _layer(_llama()) if op.kind is OpKind.attention)
    qkv = SEQ * (HEADS + 2 * KV_HEADS) * HEAD_DIM
    context = SEQ * HEADS * HEAD_DIM
    assert op_time(att, dev, 1, 1, False, False, 2, fused_out=True).local_bytes == pytest.approx(
        (qkv + context) * 2)


def _project(spec, fusion, recompute: str = "selective", tp: int = 1) -> Project:
    return Project(name="flash", hardware=load_system("dgx-h100"), workload=spec,
                   mapping=Mapping(tp=tp, pp=1, dp=1, micro_batch=1, global_batch=1, recompute=recompute,
                                   sequence_parallel=tp > 1, fusion=fusion),
                   run=RunSettings(dtype="bf16"))


def _passes(plan):
    st = plan.stages[0]
    return {kind: p for (_c, kind), p in st.passes.items()}


@pytest.mark.parametrize("tp", [1, 2])
def test_selective_rerun_skips_the_fused_attention_core(tp):
    spec = _llama()
    unfused = _passes(make_plan(_project(spec, [], tp=tp)))
    fused = _passes(make_plan(_project(spec, FLASH, tp=tp)))
    assert fused["R"].busy_s == 0 and fused["R"].flops == 0
    assert not any(s.local_bytes for s in fused["R"].segments)
    # unfused, the re-run is every layer's attention core at s² pairs, moving its scores
    assert unfused["R"].flops == pytest.approx(LAYERS * 4 * HEAD_DIM * HEADS * SEQ * SEQ / tp)
    assert sum(s.local_bytes for s in unfused["R"].segments) > LAYERS * HEADS * SEQ * SEQ * 2 / tp


def test_pass_flops_follow_the_kernel_and_model_flops_do_not():
    spec = _llama()
    unfused_plan, fused_plan = make_plan(_project(spec, [])), make_plan(_project(spec, FLASH))
    unfused, fused = _passes(unfused_plan), _passes(fused_plan)
    per_pair = 4 * HEAD_DIM * HEADS
    full, causal = per_pair * SEQ * SEQ, per_pair * SEQ * (SEQ + FLASH_BLOCK) / 2
    assert unfused["F"].flops - fused["F"].flops == pytest.approx(LAYERS * (full - causal))
    assert fused["B"].flops - unfused["B"].flops == pytest.approx(LAYERS * (2.5 * causal - 2 * full))
    # model FLOPs (MFU) count every pair, Megatron's and PaLM's convention, whatever the kernel
    assert fused_plan.model_flops == unfused_plan.model_flops


def test_gpt_attention_dropout_fused_into_the_kernel_is_not_rerun_either():
    fused = _passes(make_plan(_project(_gpt(), [["attention", "softmax", "attention_dropout"]])))
    assert fused["R"].busy_s == 0
    # the chain attention → softmax alone is the same flash kernel, its dropout drawn inside it
    # (``plan.context.flash_fused``): nothing of the a·s² probabilities is re-run either
    partial = _passes(make_plan(_project(_gpt(), FLASH)))
    assert partial["R"].busy_s == 0
    unfused = _passes(make_plan(_project(_gpt(), [])))
    assert unfused["R"].busy_s > 0  # the core re-run kernel by kernel, the dropout with it


@pytest.mark.parametrize("tp", [1, 4])
def test_fused_attention_stores_no_scores(tp):
    """Without recomputation a layer stores the softmax output, a·s² elements (Korthikanti et al.); a fused
    kernel stores none, so with fusion 'none' and 'selective' keep the same bytes."""
    layer = _layer(_llama())
    edges = fused_edges(FLASH)
    mb, elem = 2, 2

    def act(recompute: Recompute, fused=frozenset()) -> float:
        return activation_bytes([layer], mb, tp, tp > 1, recompute, elem, fused)

    scores = HEADS * SEQ * SEQ * mb * elem / tp
    assert act(Recompute.none) - act(Recompute.none, edges) == pytest.approx(scores)
    assert act(Recompute.none, edges) == pytest.approx(act(Recompute.selective))
    assert act(Recompute.selective, edges) == pytest.approx(act(Recompute.selective))


def test_windowed_decoder_fused_flops_follow_the_window():
    spec = _llama(seq=2048, window=256)
    att = next(op for op in _layer(spec) if op.kind is OpKind.attention)
    tiles = _tiled_pairs(2048, FLASH_BLOCK, 256)
    assert att.fused_flops == pytest.approx(4 * HEAD_DIM * HEADS * tiles)
    assert tiles < 2048 * 256 + 2048 * FLASH_BLOCK  # never more than the window plus one tile per query
    assert math.isclose(att.flops, 4 * HEAD_DIM * HEADS * 2048 * 256)
