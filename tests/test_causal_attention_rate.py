"""A causal fused (flash) attention kernel runs at its own, lower rate over the tiles it computes.

Under a causal mask the kernel skips the key blocks above the diagonal (``Op.fused_flops``: 128-row query tiles,
the diagonal tile computed whole), but per computed tile it is slower than the unmasked kernel: its diagonal
tiles are masked element by element and its query tiles carry unequal work. ``Compute.flash_causal_forward_
efficiency`` / ``flash_causal_backward_efficiency`` give that rate (None: the unmasked kernel's). A sliding
window masks the same way; an inference prefill is masked, a decode step's single query is not.

Expected FLOPs and times are derived here from the op's shape (tile counts by hand) and the dgx-h100 preset's
fields; the preset's values themselves are rederived from the measurements its comment cites.
"""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.common import DType
from tilewright.engine.ir.hardware import Component
from tilewright.engine.ir.ops import OpKind
from tilewright.engine.perf.device import device_model
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import simulate
from tilewright.engine.workloads import build_workload
from tilewright.engine.workloads.transformer_inference import inference_graph

from tests.agreement import assert_engines_agree, engine_result, search_estimate

SEQ, HIDDEN, HEADS, KV_HEADS = 16384, 4096, 32, 8
HEAD_DIM = HIDDEN // HEADS
TILE = 128  # query rows per tile of the fused kernel (FlashAttention-2/3, cuDNN on Hopper)
BF16_PEAK = 989e12  # H100 SXM dense bf16 (the preset's peak)
NO_CAUSAL = {"flash_causal_forward_efficiency": None, "flash_causal_backward_efficiency": None}


def _system(**compute: object) -> Component:
    """The dgx-h100 preset with its GPU's compute fields updated."""
    system = load_system("dgx-h100")
    node = system.children[0]
    gpu = node.children[0]
    gpu = gpu.model_copy(update={"compute": gpu.compute.model_copy(update=compute)})
    node = node.model_copy(update={"children": [gpu, *node.children[1:]]})
    return system.model_copy(update={"children": [node, *system.children[1:]]})


def _gpu(**compute: object):
    gpu = _system(**compute).children[0].children[0]
    return device_model(gpu.compute, gpu.memories, None, DType.bf16)


def _llama(seq: int = SEQ, layers: int = 1, window: int | None = None) -> LlamaSpec:
    return LlamaSpec(name="llama", layers=layers, hidden=HIDDEN, heads=HEADS, kv_heads=KV_HEADS, ffn=14336,
                     vocab=32000, seq_len=seq, sliding_window=window)


def _attention(spec: LlamaSpec):
    graph = build_workload(spec)
    return next(op for op in graph.layer_ops(graph.block_layers[0]) if op.kind is OpKind.attention)


def _rates(backward: bool) -> tuple[float, float]:
    """(unmasked, causal) kernel rate of one pass, from the preset."""
    c = load_system("dgx-h100").children[0].children[0].compute
    if backward:
        return c.flash_backward_efficiency, c.flash_causal_backward_efficiency
    return c.flash_forward_efficiency, c.flash_causal_forward_efficiency


def _pass_flops(pairs: float, backward: bool) -> float:
    """QKᵀ and PV: 4 · head_dim FLOPs per (query, key) pair and head forward; the backward recomputes QKᵀ and
    runs four gradient GEMMs, 2.5 × the forward (FlashAttention-2 §3.1.2)."""
    return 4.0 * HEAD_DIM * HEADS * pairs * (2.5 if backward else 1.0)


def test_the_preset_rates_are_the_cited_measurements_over_the_computed_tiles():
    """Forward: cuDNN's causal kernel at 529 and 539 TFLOP/s at 8k and 16k (FlashAttention-3 Fig. 5(d), s²/2 pairs
    counted), over the tiles it computes, s(s + 128)/2 pairs. Backward: the unmasked 0.52 times cuDNN 9.19's
    causal-over-unmasked backward ratio on H200 (541/594 at 8k and 579/612 at 16k, s(s + 1)/2 pairs counted)."""
    c = load_system("dgx-h100").children[0].children[0].compute
    tiles = {s: (s + TILE) / s for s in (8192, 16384)}  # computed tiles over s²/2
    forward = (529 * tiles[8192] + 539 * tiles[16384]) / 2 / 989
    exact = {s: s * (s + TILE) / (s * (s + 1)) for s in (8192, 16384)}  # computed tiles over s(s + 1)/2
    ratio = (541 * exact[8192] / 594 + 579 * exact[16384] / 612) / 2
    assert c.flash_causal_forward_efficiency == pytest.approx(forward, abs=0.005)
    assert c.flash_causal_backward_efficiency == pytest.approx(c.flash_backward_efficiency * ratio, abs=0.005)
    assert c.flash_causal_forward_efficiency < c.flash_forward_efficiency
    assert c.flash_causal_backward_efficiency < c.flash_backward_efficiency


@pytest.mark.parametrize("backward", [False, True])
def test_causal_over_unmasked_time_per_flop_is_the_inverse_rate_ratio(backward: bool):
    """The same attention op with and without its mask: at 16k tokens the kernel's fixed launch and fill are
    under 0.2 % of its time, so its time per FLOP is 1 / (peak × rate)."""
    dev = _gpu()
    causal = _attention(_llama())
    unmasked = causal.model_copy(update={"fused_flops": None})
    tiles = SEQ // TILE
    causal_pairs = TILE * TILE * tiles * (tiles + 1) / 2  # query tile i runs over key tiles 0..i
    f_causal, f_unmasked = _pass_flops(causal_pairs, backward), _pass_flops(SEQ * SEQ, backward)
    plain, masked = _rates(backward)

    t_causal = op_time(causal, dev, 1, 1, False, backward, 2, fused_out=True)
    t_unmasked = op_time(unmasked, dev, 1, 1, False, backward, 2, fused_out=True)
    assert t_causal.flops == pytest.approx(f_causal)
    assert t_unmasked.flops == pytest.approx(f_unmasked)
    assert t_causal.compute_s == pytest.approx(f_causal / (BF16_PEAK * masked))
    assert t_unmasked.compute_s == pytest.approx(f_unmasked / (BF16_PEAK * plain))
    per_flop = (t_causal.busy_s / f_causal) / (t_unmasked.busy_s / f_unmasked)
    assert per_flop == pytest.approx(plain / masked, rel=2e-3)
    assert per_flop > 1.05  # the mask costs its rate: not a rounding of the unmasked one


@pytest.mark.parametrize("backward", [False, True])
def test_without_causal_rates_the_masked_kernel_runs_at_the_unmasked_rate(backward: bool):
    dev = _gpu(**NO_CAUSAL)
    plain, _ = _rates(backward)
    t = op_time(_attention(_llama()), dev, 1, 1, False, backward, 2, fused_out=True)
    assert t.compute_s == pytest.approx(t.flops / (BF16_PEAK * plain))


def test_the_fallback_per_pass():
    c = load_system("dgx-h100").children[0].children[0].compute
    bare = c.model_copy(update=NO_CAUSAL)
    for backward in (False, True):
        plain, masked = _rates(backward)
        assert c.flash_efficiency(backward, causal=False) == plain
        assert c.flash_efficiency(backward, causal=True) == masked
        assert bare.flash_efficiency(backward, causal=True) == plain
    none = c.model_copy(update=NO_CAUSAL | {"flash_forward_efficiency": None, "flash_backward_efficiency": None})
    assert none.flash_efficiency(False, causal=True) is None  # the GEMM curve's best (flash_parts)


def test_a_sliding_window_is_masked_like_a_causal_kernel():
    """gpt-oss's windowed layers: the kernel skips the key blocks outside the band and masks its edge tiles."""
    dev = _gpu()
    op = _attention(_llama(window=4096))
    for backward in (False, True):
        _, masked = _rates(backward)
        t = op_time(op, dev, 1, 1, False, backward, 2, fused_out=True)
        assert t.flops < _pass_flops(SEQ * (SEQ + TILE) / 2, backward)  # fewer pairs than the causal triangle
        assert t.compute_s == pytest.approx(t.flops / (BF16_PEAK * masked))


@pytest.mark.parametrize(("tokens", "context", "masked"), [(4096, 4096, True), (512, 4096, True), (1, 4096, False)])
def test_inference_prefill_is_masked_and_decode_is_not(tokens: int, context: int, masked: bool):
    """A prefill's (or a prefill chunk's) new queries see only the keys before them; a decode step's one query
    sees every cached key, with no mask to apply."""
    dev = _gpu()
    graph = inference_graph(_llama(context), tokens, context, 1, fused=True)
    op = next(o for o in graph.ops() if o.kind is OpKind.attention)
    plain, causal = _rates(False)
    t = op_time(op, dev, 1, 1, False, False, 2)
    assert t.compute_s == pytest.approx(t.flops / (BF16_PEAK * (causal if masked else plain)))


def _project(engine: str = "analytic", **compute: object) -> Project:
    """A Llama on one DGX H100 node with Megatron-Core's fused attention (attention → softmax, one kernel)."""
    return Project(name="causal", hardware=_system(**compute), workload=_llama(4096, layers=2),
                   mapping=Mapping(tp=2, pp=1, dp=4, micro_batch=1, global_batch=8, sequence_parallel=True,
                                   fusion=[["attention", "softmax"]]),
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def test_both_engines_agree_and_the_causal_rate_reaches_the_run():
    analytic, event = simulate(_project("analytic")), simulate(_project("event"))
    assert_engines_agree(analytic, event)
    assert analytic.iteration_time_s > simulate(_project("analytic", **NO_CAUSAL)).iteration_time_s


@pytest.mark.parametrize("compute", [{}, NO_CAUSAL])
def test_the_search_agrees_with_the_engine(compute: dict):
    """Data parallelism over the node with ZeRO-1: what the search's fast evaluator times itself."""
    c = Candidate(1, 1, 8, 1, zero=1)
    base = _project(**compute)
    p = base.model_copy(update={"mapping": c.mapping(base.mapping.global_batch, base.mapping)})
    assert p.mapping.fusion == [["attention", "softmax"]]
    _, exact, _ = search_estimate(p, c)
    assert exact == pytest.approx(engine_result(p).iteration_time_s, rel=1e-9)
