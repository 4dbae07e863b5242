"""Per-kernel costs of small GPU work (``engine.perf.op_cost.gemm_kernels``, ``engine.plan.launch``): every
GEMM kernel pays its own launch and fill at its own shape, every kernel pays the device's per-kernel floor,
and a decode step cannot beat its kernels' floors plus its weights' streaming time."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import DType, GPTSpec, LlamaSpec, OpKind
from tilewright.engine.ir.hardware import RuntimeGraphs
from tilewright.engine.ir.ops import Op
from tilewright.engine.perf.device import device_model
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.plan.costed_op import as_costed
from tilewright.engine.plan.launch import attention_scores, kernels
from tilewright.engine.workloads import build_workload
from tilewright.engine.workloads.transformer_inference import inference_graph

MB = 64  # micro-batch large enough for compute-bound GEMMs


def _a100(**update):
    gpu = next(c for _, c in load_system("dgx-a100").walk() if c.compute is not None)
    return device_model(gpu.compute.model_copy(update=update), gpu.memories, None, DType.bf16)


def _gpt_layer(hidden: int = 1024, heads: int = 16, seq: int = 2048) -> list[Op]:
    graph = build_workload(GPTSpec(name="g", layers=1, hidden=hidden, heads=heads, seq_len=seq, vocab=4096))
    return graph.layer_ops(graph.block_layers[0])


def _op(ops: list[Op], suffix: str) -> Op:
    return next(op for op in ops if op.name.endswith(suffix))


def _gemm_seconds(dev, flops: float, shape: tuple[float, float, float] | None) -> tuple[float, float]:
    """(streaming-free time, fill) of one GEMM kernel of ``flops`` useful FLOPs at output ``shape``: tile and
    wave quantization pad it, the device's size curve prices the padded kernel."""
    peak = dev.matmul_peak(None, True)
    padded = flops / (dev.compute.shape_efficiency(*shape) if shape else 1.0)
    return padded / (peak * dev.matmul_efficiency(padded)), dev.matmul_fill_s(padded, peak)


def test_a_weighted_gemm_backward_is_a_data_and_a_weight_gradient_gemm_each_at_its_shape():
    """Backward of Y[M×N] = X[M×K]·W[K×N]: ∂X = ∂Y·Wᵀ is an M×K output reducing over N, ∂W = Xᵀ·∂Y a K×N
    output reducing over M; each has the forward's FLOPs and pays its own fill (the curve's t0)."""
    dev = _a100()
    op = _op(_gpt_layer(), "mlp_down")  # row-parallel: K split over tp
    tp = 8
    m, n, k = op.gemm[0] * MB, op.gemm[1], op.gemm[2] / tp
    fwd_flops = 2 * m * n * k
    t = op_time(op, dev, MB, tp, False, True, 2.0)
    assert t.flops == pytest.approx(2 * fwd_flops)
    dgrad, dgrad_fill = _gemm_seconds(dev, fwd_flops, (m, k, n))
    wgrad, wgrad_fill = _gemm_seconds(dev, fwd_flops, (k, n, m))
    # GPT's linears have biases: the bias gradient is a third kernel reading the whole output gradient
    # (row-parallel: every rank reduces the full M × N gradient), serial with the GEMMs; a memory-bound
    # kernel, it pays the HBM's ramp too (dgx-a100 preset: stream_ramp_s 1.9 us)
    assert m * n * 2.0 / dev.dram_bandwidth > 1.9e-6  # past the ramp: it loses the whole ramp
    bias_s = m * n * 2.0 / dev.dram_bandwidth + 1.9e-6
    assert t.compute_s + t.overhead_s == pytest.approx(dgrad + wgrad + bias_s + dev.compute.fixed_op_s, rel=1e-9)
    assert t.overhead_s == pytest.approx(dgrad_fill + wgrad_fill + bias_s + dev.compute.fixed_op_s, rel=1e-9)
    # the A100 curve's fixed part is t0 = 4 us per kernel (preset comment): two of them, not one
    assert t.overhead_s - bias_s - dev.compute.fixed_op_s >= 2 * 3.5e-6


def test_the_bias_gradient_streams_the_output_gradient_once_more_only_with_a_bias():
    """A column-parallel GPT qkv (with bias) pays a pass over its tokens × (3h / tp) output gradient; the same
    projection without bias (Llama) pays none; forward passes never do."""
    dev = _a100()
    gpt = _op(_gpt_layer(), "qkv")
    m, n = gpt.gemm[0], gpt.gemm[1] / 4
    no_bias = gpt.model_copy(update={"params": gpt.gemm[1] * gpt.gemm[2]})
    with_bias = op_time(gpt, dev, 1, 4, False, True, 2.0)
    without = op_time(no_bias, dev, 1, 4, False, True, 2.0)
    # its own memory-bound kernel, within the HBM's ramp (dgx-a100 preset: stream_ramp_s 1.9 us): its 3.1 MB
    # take tau = 1.77 us at the full rate, delivered at a bandwidth still rising, in 2 sqrt(1.9 us x tau)
    tau = m * n * 2.0 / dev.dram_bandwidth
    assert tau < 1.9e-6
    assert with_bias.overhead_s - without.overhead_s == pytest.approx(2 * (1.9e-6 * tau) ** 0.5, rel=1e-9)
    assert with_bias.local_bytes - without.local_bytes == pytest.approx(m * n * 2.0 + 2 * n * 2.0, rel=1e-6)
    assert op_time(gpt, dev, 1, 4, False, False, 2.0).overhead_s == pytest.approx(
        op_time(no_bias, dev, 1, 4, False, False, 2.0).overhead_s)


def test_the_data_gradient_of_a_thin_shard_quantizes_worse_than_its_forward():
    """tp 8 of a 1024-wide model: the out_proj shard's forward output (2048 × 1024, K 128) fills 64 tiles,
    its data gradient (2048 × 128) only 8: the backward costs more than twice the forward."""
    dev = _a100()
    op = _op(_gpt_layer(), "out_proj")
    fwd = op_time(op, dev, 1, 8, False, False, 2.0)
    bwd = op_time(op, dev, 1, 8, False, True, 2.0)
    assert dev.compute.shape_efficiency(2048, 128, 1024) < dev.compute.shape_efficiency(2048, 1024, 128)
    assert bwd.compute_s > 2 * fwd.compute_s


def test_devices_that_run_an_op_as_one_program_keep_one_gemm():
    """Without kernel-by-kernel dispatch (no host dispatch, no graphs: a TPU-like device) the backward stays
    one GEMM of twice the FLOPs at the forward's shape, as before."""
    dev = _a100(host_dispatch_s=0.0, runtime_graphs=RuntimeGraphs.none)
    op = _op(_gpt_layer(), "mlp_up")
    m, n, k = op.gemm[0] * MB, op.gemm[1], op.gemm[2]
    t = op_time(op, dev, MB, 1, False, True, 2.0)
    whole, fill = _gemm_seconds(dev, 2 * 2 * m * n * k, (m, n, k))
    assert t.compute_s == pytest.approx(whole - fill, rel=1e-9)
    assert t.overhead_s == pytest.approx(fill + dev.compute.fixed_op_s, rel=1e-9)


def test_unfused_attention_is_two_batched_gemms_forward_and_four_backward():
    """Megatron-LM's core attention: baddbmm (QKᵀ) and bmm (PV) forward, their four gradient GEMMs backward;
    each kernel pays its fill. A fused (flash) kernel is one kernel: one fill. Without its head structure
    (``Op.bmm``: an imported graph's attention) the kernels share the FLOPs evenly, unquantized; with it each
    is priced at its own shape (``tests/test_attention_bmm_shape.py``)."""
    dev = _a100()
    ops = _gpt_layer()
    attn = _op(ops, "attention").model_copy(update={"bmm": None})
    for backward, n in ((False, 2), (True, 4)):
        flops = (attn.backward_flops if backward else attn.flops) * MB
        t = op_time(attn, dev, MB, 1, False, backward, 2.0)
        one = _gemm_seconds(dev, flops / n, None)
        assert t.overhead_s == pytest.approx(n * one[1] + dev.compute.fixed_op_s, rel=1e-9)
        assert t.compute_s == pytest.approx(n * (one[0] - one[1]), rel=1e-9)
    fused = op_time(attn, dev, MB, 1, False, False, 2.0, fused_out=True)
    # one kernel over the causal pairs it computes (a decoder's fused kernel skips the masked key blocks)
    assert fused.overhead_s == pytest.approx(
        _gemm_seconds(dev, attn.fused_flops * MB, None)[1] + dev.compute.fixed_op_s)


@pytest.mark.parametrize(("tokens", "fused", "gemms"), [(128, True, 1), (1, True, 1), (128, False, 2)])
def test_inference_attention_is_one_flash_kernel_unless_materialised(tokens, fused, gemms):
    """A serving runtime's prefill (flash) and decode (over the KV cache) attention is one kernel paying one
    fill; ``--attention materialised`` runs the two batched GEMMs."""
    spec = LlamaSpec(name="l7", layers=1, hidden=4096, heads=32, ffn=11008, vocab=32000, seq_len=4096)
    graph = inference_graph(spec, tokens, 128 if tokens > 1 else 129, 1, fused)
    attn = next(op for op in graph.layer_ops(graph.block_layers[0]) if op.kind is OpKind.attention)
    attn = attn.model_copy(update={"bmm": None})  # the kernel count, not their shapes (test_attention_bmm_shape)
    dev = _a100()
    t = op_time(attn, dev, 1, 1, False, False, 2.0)
    fill = _gemm_seconds(dev, attn.flops / gemms, None)[1]
    assert t.overhead_s == pytest.approx(gemms * fill + dev.compute.fixed_op_s, rel=1e-9)


def test_an_elementwise_kernel_on_a_tiny_tensor_costs_the_per_kernel_floor():
    """A 1024-element add moves 6 KB: its time is the floor every kernel pays (launch to next launch of
    back-to-back tiny kernels, 1.1-1.3 us measured from a CUDA graph: dgx presets' comment), and a kernel
    one thousand times larger pays the same floor plus its streaming time and the HBM's ramp (its 6 MB take
    3.5 us at the full rate, past the 1.9 us ramp: ``Memory.stream_ramp_s``)."""
    dev = _a100()
    tiny = Op(name="b.add", kind=OpKind.elementwise, layer=0, flops=1024, in_elems=2048, out_elems=1024)
    t = op_time(tiny, dev, 1, 1, False, False, 2.0)
    assert 1.1e-6 <= dev.compute.fixed_op_s <= 1.3e-6
    assert 1.1e-6 <= t.busy_s <= 1.3e-6
    big = tiny.model_copy(update={"in_elems": 2048e3, "out_elems": 1024e3, "flops": 1024e3})
    assert 3 * 1024e3 * 2.0 / dev.dram_bandwidth > 1.9e-6
    assert op_time(big, dev, 1, 1, False, False, 2.0).busy_s == pytest.approx(
        dev.compute.fixed_op_s + 3 * 1024e3 * 2.0 / dev.dram_bandwidth + 1.9e-6, rel=1e-6)


def test_a_decode_step_is_bounded_below_by_its_kernel_floors_and_its_weights():
    """One Llama-2-7B decode token on an A100: every kernel pays at least the floor and every weight byte
    streams at the achievable HBM rate, so the step cannot be shorter than kernels × floor + bytes / rate."""
    from tilewright.engine.ir import Mapping, Project, RunSettings
    from tilewright.engine.simulate import simulate

    spec = LlamaSpec(name="l7", layers=32, hidden=4096, heads=32, ffn=11008, vocab=32000, seq_len=4096)
    project = Project(
        name="d", hardware=load_system("dgx-a100"), workload=spec,
        mapping=Mapping(tp=1, pp=1, dp=1, micro_batch=1, global_batch=1),
        run=RunSettings(dtype="fp16", mode="infer", engine="analytic",
                        inference={"batch": 1, "prompt_tokens": 128, "output_tokens": 16}),
    )
    res = simulate(project)
    graph = inference_graph(spec, 1, 129, 1, True)
    n = sum(kernels(op, False) for i in range(len(graph.layers)) for op in graph.layer_ops(i))
    dev = _a100()
    weights = sum(op.params for i in range(len(graph.layers)) for op in graph.layer_ops(i)) * 2.0
    assert n >= 32 * 10  # at least ten kernels a layer (vLLM's Llama decode layer launches ~11)
    assert res.tpot_s >= n * dev.compute.fixed_op_s + weights / dev.dram_bandwidth


def test_the_score_passes_stay_with_the_attention_op():
    """The per-kernel split does not move bytes: unfused attention's score traffic is unchanged."""
    dev = _a100()
    ops = _gpt_layer(512, 8, 1024)
    attn = _op(ops, "attention")
    scores = attention_scores(ops)[attn.name]
    with_scores = op_time(as_costed(attn, dev, scores, (False, False)), dev, 2, 1, False, False, 2.0)
    plain = op_time(attn, dev, 2, 1, False, False, 2.0)
    assert with_scores.local_bytes - plain.local_bytes == pytest.approx(2 * 2 * scores * 2.0)
    assert with_scores.overhead_s == pytest.approx(plain.overhead_s)


def test_a_softmax_inside_a_fused_attention_chain_touches_no_memory_selective_or_not():
    """Inside a fused attention kernel the scores come from QKᵀ and feed PV on chip: a softmax whose input is
    fused moves no bytes whether the model marks it selective (a GPT layer) or not (an imported graph's), and
    an unfused one streams its scores."""
    dev = _a100()
    softmax = _op(_gpt_layer(), "softmax")
    plain = softmax.model_copy(update={"selective": False})
    for op in (softmax, plain):
        for backward in (False, True):
            assert op_time(op, dev, 1, 1, False, backward, 2.0, fused_in=True).local_bytes == 0.0
            assert op_time(op, dev, 1, 1, False, backward, 2.0).local_bytes > 0.0
