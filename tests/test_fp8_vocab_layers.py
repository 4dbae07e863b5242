"""fp8 training keeps the word embedding and the output layer in bf16 (``plan.device_layers.vocab_layers``).

Megatron-Core builds them as its own ``VocabParallelEmbedding`` and ``ColumnParallelLinear``, outside Transformer
Engine, and torchtitan's float8 converter skips the ``output`` linear: the logits GEMM runs at the bf16 rate with
no quantization kernels, and both weights are plain bf16 parameters (2 B held and gathered). Expected figures are
derived here from the dgx-h100 preset's peaks (bf16 989 TFLOP/s, fp8 1,979 × 0.875) and the model's parameter
counts, never read back from a run.
"""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.common import DType
from tilewright.engine.perf.device import device_model
from tilewright.engine.perf.formats import gemm_dtype, resolve_formats
from tilewright.engine.perf.op_cost import fp8_cast_passes, op_time
from tilewright.engine.plan.device_layers import block_names, vocab_layers
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload

from tests.agreement import assert_engines_agree, assert_search_matches_engine

SPEC = LlamaSpec(name="vocab", layers=4, hidden=1024, heads=8, ffn=2816, vocab=32000, seq_len=1024)


def _project(dtype: str = "fp8", mode: str = "train", engine: str = "analytic", workload=SPEC, **mapping) -> Project:
    m = {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1, "global_batch": 32, "zero": 1} | mapping
    return Project(name="vocab", hardware=load_system("dgx-h100"), workload=workload, mapping=Mapping(**m),
                   run=RunSettings(dtype=dtype, mode=mode, engine=engine, contention=False))


def test_the_layers_around_the_vocabulary():
    """The embedding and the head whose GEMM is the logits; a multi-token-prediction depth's own block stays with
    Transformer Engine's layers (fp8), its shared-head logits do not."""
    spec = SPEC.model_copy(update={"mtp_layers": 1})
    graph = build_workload(spec)
    assert vocab_layers(graph) == ["embedding", "head", "mtp0_head"]
    plan = make_plan(_project(workload=spec))
    assert gemm_dtype(plan.formats.for_op("head.logits"), True) is DType.bf16
    assert gemm_dtype(plan.formats.for_op("mtp0_head.logits"), True) is DType.bf16
    assert gemm_dtype(plan.formats.for_op("mtp0.eh_proj"), True) is DType.fp8
    assert gemm_dtype(plan.formats.for_op("block2.mlp_up"), True) is DType.fp8


def test_logits_run_at_the_bf16_rate_without_quantization():
    """The logits GEMM of the fp8 run costs what the bf16 run's does and more than an fp8 GEMM of its shape would,
    by the ratio of the peaks; no quantization pass surrounds it."""
    fp8_plan, bf16_plan = make_plan(_project()), make_plan(_project(dtype="bf16"))
    gpu = load_system("dgx-h100").children[0].children[0]
    dev = device_model(gpu.compute, gpu.memories, None, DType.fp8)
    ratio = gpu.compute.peak_flops[DType.fp8] * gpu.compute.format_efficiency[DType.fp8] / gpu.compute.peak_flops[
        DType.bf16]
    logits = next(op for op in build_workload(SPEC).ops() if op.name == "head.logits")
    all_fp8 = resolve_formats(DType.fp8, _project().mapping.formats, None, block_names(build_workload(SPEC)))
    for backward in (False, True):
        ours = op_time(logits, dev, 1, 1, False, backward, 2, formats=fp8_plan.formats)
        bf16 = op_time(logits, dev, 1, 1, False, backward, 2, formats=bf16_plan.formats)
        as_fp8 = op_time(logits, dev, 1, 1, False, backward, 2, formats=all_fp8)
        assert ours.compute_s == pytest.approx(bf16.compute_s, rel=1e-12)
        assert ours.compute_s == pytest.approx(as_fp8.compute_s * ratio, rel=1e-9)
        fmt = fp8_plan.formats.for_op(logits.name)
        assert fp8_cast_passes(logits, fmt, backward, logits.in_elems, logits.out_elems) is None


def test_weights_held_at_two_bytes():
    """ZeRO-1, tp 1, pp 1, fp8_param_gather: an fp8 layer's parameter holds 1 B, the embedding's and the untied
    head's (and the final norm's) 2 B."""
    p = _project(fp8_param_gather=True)
    graph = build_workload(SPEC)
    index = {li.name: li.index for li in graph.layers}
    p_all = sum(op.params for op in graph.ops())
    p_vocab = sum(op.params for n in ("embedding", "head") for op in graph.layer_ops(index[n]))
    assert p_vocab > 2 * SPEC.vocab * SPEC.hidden - 1  # the word embedding and the untied logits
    held = simulate(p).memory_breakdown_bytes["weights"]
    assert held == pytest.approx((p_all - p_vocab) * 1.0 + p_vocab * 2.0, rel=1e-9)


def test_serving_keeps_the_weights_format():
    """Inference is left as the weights' format says (only training frameworks are read here)."""
    formats = make_plan(_project(mode="infer", global_batch=8)).formats
    assert gemm_dtype(formats.for_op("head.logits"), True) is DType.fp8


@pytest.mark.parametrize("mapping", [{"pp": 2, "dp": 4}, {"tp": 2, "pp": 2, "dp": 2, "sequence_parallel": True,
                                                           "overlap_grad_reduce": True, "overlap_param_gather": True}])
def test_both_engines_agree(mapping):
    assert_engines_agree(simulate(_project(**mapping)), simulate(_project(engine="event", **mapping)))


def test_the_last_stage_pays_the_bf16_logits(monkeypatch):
    """pp 2: the last stage's forward and backward are longer than with an fp8 head by exactly what the logits
    GEMM takes at the bf16 rate over the fp8 rate (``op_time`` of the one op under each format); stage 0 by what
    its embedding lookup takes reading bf16 rows of the table instead of fp8 ones (no GEMM there)."""
    import tilewright.engine.plan.device_layers as settings

    p = _project(pp=2, dp=4, micro_batch=8, global_batch=64)  # device-bound: the host's launches hide nothing
    ours = make_plan(p)
    monkeypatch.setattr(settings, "vocab_layers", lambda graph: [])  # every weighted GEMM in fp8, as before
    fp8_head = make_plan(p)
    gpu = load_system("dgx-h100").children[0].children[0]
    dev = device_model(gpu.compute, gpu.memories, None, DType.fp8)
    ops = {op.name: op for op in build_workload(SPEC).ops()}
    logits, embedding = ops["head.logits"], ops["embedding.word_embedding"]
    for kind, backward in (("F", False), ("B", True)):
        want = (op_time(logits, dev, 8, 1, False, backward, 2, formats=ours.formats).busy_s
                - op_time(logits, dev, 8, 1, False, backward, 2, formats=fp8_head.formats).busy_s)
        assert want > 0
        got = ours.stages[1].passes[(0, kind)].busy_s - fp8_head.stages[1].passes[(0, kind)].busy_s
        assert got == pytest.approx(want, rel=1e-5), kind
        lookup = (op_time(embedding, dev, 8, 1, False, backward, 2, formats=ours.formats).busy_s
                  - op_time(embedding, dev, 8, 1, False, backward, 2, formats=fp8_head.formats).busy_s)
        got = ours.stages[0].passes[(0, kind)].busy_s - fp8_head.stages[0].passes[(0, kind)].busy_s
        assert got == pytest.approx(lookup, rel=1e-5, abs=1e-12), kind


@pytest.mark.parametrize("shape", [(1, 2, 4), (2, 2, 2)])
def test_search_agrees_with_the_engine(shape):
    """The search's evaluator resolves the same formats (its layer table keeps the head's bf16 GEMM)."""
    tp, pp, dp = shape
    c = Candidate(tp, pp, dp, 4 if tp > 1 else 1, zero=1, sequence_parallel=tp > 1)
    assert_search_matches_engine(_project(), c, keep_base=True, fp8_param_gather=True)


def test_the_split_view_reads_the_formats_the_plan_runs():
    """The split view rebuilds a reported GEMM in the run's formats (``plan.device_layers.run_formats``, the
    plan's own): the logits GEMM of an fp8 training run in bf16, a block's GEMM in fp8."""
    from tilewright.engine.results.split_traffic import SplitReader

    p = _project()
    reader = SplitReader(p)
    assert reader.formats == make_plan(p).formats
    assert reader.formats.for_op("head.logits").weights is DType.bf16
    assert reader.formats.for_op(f"block{build_workload(SPEC).block_layers[0]}.mlp_up").weights is DType.fp8
