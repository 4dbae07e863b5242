"""A framework runs its own fused attention kernel, at that kernel's measured rates.

Megatron frameworks run Transformer Engine's attention, cuDNN's fused kernel on Hopper (``Compute.flash_*``);
plain PyTorch ('pytorch', 'pytorch-compile': torchtitan) calls ``F.scaled_dot_product_attention``, whose default
is FlashAttention-2 (``Compute.sdpa_flash``; ``plan.framework_host.attention_device`` picks). On A100 both run
FlashAttention-2: dgx-a100 gives no second kernel and nothing changes there.

Expected FLOPs are counted here from the op's shape (128-row query tiles, the diagonal tile whole) and expected
rates re-derived from the FlashAttention-3 paper's FlashAttention-2 measurements the dgx-h100 comment cites.
"""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.common import DType
from tilewright.engine.ir.hardware import Component
from tilewright.engine.ir.ops import OpKind
from tilewright.engine.perf.device import DeviceModel, device_model
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.plan.framework_host import attention_device
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import simulate
from tilewright.engine.workloads import build_workload

from tests.agreement import assert_engines_agree, assert_search_matches_engine

SEQ, HIDDEN, HEADS, KV_HEADS = 16384, 4096, 32, 8
HEAD_DIM = HIDDEN // HEADS
TILE = 128  # query rows per tile of the fused kernel
BF16_PEAK = 989e12  # H100 SXM dense bf16
MEGATRON = (None, "megatron-lm", "mcore", "mcore-te")
PYTORCH = ("pytorch", "pytorch-compile")


def _system(name: str = "dgx-h100", **compute: object) -> Component:
    system = load_system(name)
    node = system.children[0]
    gpu = node.children[0]
    gpu = gpu.model_copy(update={"compute": gpu.compute.model_copy(update=compute)})
    node = node.model_copy(update={"children": [gpu, *node.children[1:]]})
    return system.model_copy(update={"children": [node, *system.children[1:]]})


def _gpu(name: str = "dgx-h100", **compute: object) -> DeviceModel:
    gpu = _system(name, **compute).children[0].children[0]
    return device_model(gpu.compute, gpu.memories, None, DType.bf16)


def _llama(seq: int = SEQ, layers: int = 1) -> LlamaSpec:
    return LlamaSpec(name="llama", layers=layers, hidden=HIDDEN, heads=HEADS, kv_heads=KV_HEADS, ffn=14336,
                     vocab=32000, seq_len=seq)


def _attention(seq: int = SEQ):
    graph = build_workload(_llama(seq))
    return next(op for op in graph.layer_ops(graph.block_layers[0]) if op.kind is OpKind.attention)


def _causal_flops(seq: int, backward: bool) -> float:
    """Per sample: query tile i runs over key tiles 0..i, 4 · head_dim FLOPs per pair and head; the backward
    recomputes QKᵀ and runs four gradient GEMMs, 2.5 × the forward (FlashAttention-2 §3.1.2)."""
    tiles = seq // TILE
    pairs = TILE * TILE * tiles * (tiles + 1) / 2
    return 4.0 * HEAD_DIM * HEADS * pairs * (2.5 if backward else 1.0)


def _fa2_rates() -> dict[str, float]:
    """FlashAttention-2 on H100 SXM5, head dim 128 (Shah et al., arXiv 2407.08608): forward 370 TFLOP/s at 8k and
    16k (Fig. 5), backward 318 and 322 (Fig. 6), causal forward 333 and 335 (Fig. 5(d), s²/2 pairs counted)
    over the computed tiles, s(s + 128)/2 pairs; the causal backward, unmeasured there, the backward times the
    forward's masking ratio."""
    tiles = {s: (s + TILE) / s for s in (8192, 16384)}
    forward = 370 / 989
    backward = (318 + 322) / 2 / 989
    causal_forward = (333 * tiles[8192] + 335 * tiles[16384]) / 2 / 989
    return {"forward": forward, "backward": backward, "causal_forward": causal_forward,
            "causal_backward": backward * causal_forward / forward}


def test_the_preset_sdpa_rates_are_flashattention2s_measurements():
    r = load_system("dgx-h100").children[0].children[0].compute.sdpa_flash
    assert r is not None
    for name, want in _fa2_rates().items():
        assert getattr(r, name) == pytest.approx(want, abs=0.005), name


def test_the_sdpa_kernels_causal_fallback_is_its_own_unmasked_rate():
    """A device that gives SDPA's kernel without a masked rate falls back to that kernel's unmasked one, never to
    the other kernel's; without ``sdpa`` the flash_* kernel's rates stand."""
    c = load_system("dgx-h100").children[0].children[0].compute
    bare = c.model_copy(update={"sdpa_flash": c.sdpa_flash.model_copy(update={"causal_forward": None,
                                                                              "causal_backward": None})})
    for backward in (False, True):
        plain = c.sdpa_flash.backward if backward else c.sdpa_flash.forward
        assert bare.flash_efficiency(backward, causal=True, sdpa=True) == plain
        assert c.flash_efficiency(backward, causal=True) == (c.flash_causal_backward_efficiency if backward
                                                             else c.flash_causal_forward_efficiency)


def test_a100_gives_no_second_kernel():
    assert load_system("dgx-a100").children[0].children[0].compute.sdpa_flash is None


@pytest.mark.parametrize("framework", PYTORCH)
@pytest.mark.parametrize("backward", [False, True])
def test_pytorch_frameworks_run_flashattention2_on_h100(framework: str, backward: bool):
    """The kernel's time over the tiles it computes is its FLOPs over FlashAttention-2's causal rate (at 16k
    tokens the fixed launch and fill are the overhead part, not this)."""
    dev = attention_device(_gpu(), framework)  # type: ignore[arg-type]
    flops = _causal_flops(SEQ, backward)
    rate = _fa2_rates()["causal_backward" if backward else "causal_forward"]
    t = op_time(_attention(), dev, 1, 1, False, backward, 2, fused_out=True)
    assert t.flops == pytest.approx(flops)
    assert t.compute_s == pytest.approx(flops / (BF16_PEAK * rate), rel=0.02)  # the preset's rounding
    preset = dev.compute.sdpa_flash
    assert t.compute_s == pytest.approx(flops / (BF16_PEAK * (preset.causal_backward if backward
                                                               else preset.causal_forward)))


@pytest.mark.parametrize("framework", MEGATRON)
@pytest.mark.parametrize("backward", [False, True])
def test_megatron_frameworks_keep_cudnns_kernel(framework: str | None, backward: bool):
    dev = _gpu()
    c = dev.compute
    ran = attention_device(dev, framework or "megatron-lm")  # type: ignore[arg-type]
    rate = c.flash_causal_backward_efficiency if backward else c.flash_causal_forward_efficiency
    t = op_time(_attention(), ran, 1, 1, False, backward, 2, fused_out=True)
    assert t.compute_s == pytest.approx(_causal_flops(SEQ, backward) / (BF16_PEAK * rate))
    assert rate > _fa2_rates()["causal_backward" if backward else "causal_forward"] * 1.4  # cuDNN: far faster


@pytest.mark.parametrize("framework", PYTORCH + MEGATRON[1:])
def test_a100_attention_does_not_depend_on_the_framework(framework: str):
    dev = _gpu("dgx-a100")
    for backward in (False, True):
        a = op_time(_attention(8192), attention_device(dev, framework), 1, 1, False, backward, 2,  # type: ignore[arg-type]
                    fused_out=True)
        b = op_time(_attention(8192), dev, 1, 1, False, backward, 2, fused_out=True)
        assert (a.compute_s, a.overhead_s) == (b.compute_s, b.overhead_s)


def _project(framework: str | None, engine: str = "analytic", system: str = "dgx-h100", **compute: object) -> Project:
    """A two-layer Llama at 8k tokens on one node: data parallelism, SDPA's fused attention chain."""
    return Project(name="sdpa", hardware=_system(system, **compute), workload=_llama(8192, layers=2),
                   mapping=Mapping(tp=1, pp=1, dp=8, micro_batch=1, global_batch=16, host_framework=framework,
                                   fusion=[["attention", "softmax"]]),
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


@pytest.mark.parametrize("framework", PYTORCH)
def test_the_run_pays_flashattention2s_time(framework: str):
    """Against the same run with cuDNN's rates (``sdpa_flash`` None), the compute time grows by exactly the
    attention FLOPs' time difference: 2 layers × 2 micro-batches, forward and backward, no recompute."""
    sdpa = simulate(_project(framework))
    cudnn = simulate(_project(framework, sdpa_flash=None))
    c = load_system("dgx-h100").children[0].children[0].compute
    r = c.sdpa_flash
    extra = 0.0
    for backward, fa2, cudnn_rate in ((False, r.causal_forward, c.flash_causal_forward_efficiency),
                                      (True, r.causal_backward, c.flash_causal_backward_efficiency)):
        extra += _causal_flops(8192, backward) / BF16_PEAK * (1 / fa2 - 1 / cudnn_rate)
    extra *= 2 * 2
    got = sdpa.time_breakdown_s["compute"] - cudnn.time_breakdown_s["compute"]
    assert got == pytest.approx(extra, rel=1e-6)
    assert sdpa.iteration_time_s > cudnn.iteration_time_s


@pytest.mark.parametrize("framework", MEGATRON)
def test_megatron_runs_ignore_the_sdpa_kernel(framework: str | None):
    assert (simulate(_project(framework)).iteration_time_s
            == simulate(_project(framework, sdpa_flash=None)).iteration_time_s)


def test_both_engines_agree_on_a_pytorch_run():
    assert_engines_agree(simulate(_project("pytorch")), simulate(_project("pytorch", "event")))


@pytest.mark.parametrize("framework", ["pytorch", "mcore-te"])
def test_the_search_agrees_with_the_engine(framework: str):
    """ZeRO-1 data parallelism over the node: what the search's fast evaluator times itself."""
    p = assert_search_matches_engine(_project(framework), Candidate(1, 1, 8, 1, zero=1), keep_base=True)
    assert p.mapping.host_framework == framework and p.mapping.fusion == [["attention", "softmax"]]
