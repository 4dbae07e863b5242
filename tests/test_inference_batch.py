"""Single-request / batch inference as serving systems define it: TTFT is the prefill's end, then
output_tokens − 1 decode steps; fused causal attention; KV cache of the attention layers only, in its own
format and in pages; workspace at the context actually run (no false out-of-memory)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from tilewright.engine.cli import build_parser, main
from tilewright.engine.cli.run import assemble_project
from tilewright.engine.io.presets import load_model, load_system
from tilewright.engine.ir import Mapping, Project, RunSettings
from tilewright.engine.ir.ops import OpKind
from tilewright.engine.ir.project import InferenceSettings
from tilewright.engine.simulate import simulate
from tilewright.engine.workloads.transformer_inference import inference_graph

from tests.engine_cases import GPT, llama_inference

LLAMA7B_PARAMS = 6_738_415_616  # Hugging Face meta-llama/Llama-2-7b-hf
GIB = 2**30


def _with(project: Project, engine: str = "analytic", mapping: dict | None = None, **inference) -> Project:
    """``project`` on ``engine`` (contention off) with mapping and ``run.inference`` fields changed."""
    data = project.model_dump(mode="json")
    data["run"] |= {"engine": engine, "contention": False}
    data["run"]["inference"] |= inference
    data["mapping"] |= mapping or {}
    return Project.model_validate(data)


def _decode_slices(result) -> dict[tuple[int, str], list[tuple[float, float]]]:
    """(micro-batch, decode label) → its slices on the last stage's lane: (start, end)."""
    a = result.timeline.arrays()
    last = int(a["stage"].max())
    out: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for i in np.flatnonzero(a["stage"] == last):
        label = result.timeline.labels[a["label"][i]]
        if "decode token" in label:
            name = label[label.index("decode token"):]
            out.setdefault((int(a["micro_batch"][i]), name), []).append((a["start"][i], a["start"][i] + a["dur"][i]))
    return out


def _prefill_end(result) -> float:
    a = result.timeline.arrays()
    last = int(a["stage"].max())
    ends = [a["start"][i] + a["dur"][i] for i in np.flatnonzero(a["stage"] == last)
            if "prefill" in result.timeline.labels[a["label"][i]]]
    return max(ends)


@pytest.mark.parametrize("engine", ["event", "analytic"])
@pytest.mark.parametrize("pp", [1, 2])
def test_ttft_is_the_end_of_the_last_prefill_and_decode_makes_n_minus_1_steps(engine, pp):
    project = _with(llama_inference(), engine, {"tp": 2, "pp": pp})
    result = simulate(project)
    n = project.run.inference.output_tokens
    assert result.ttft_s == pytest.approx(_prefill_end(result), rel=1e-12)
    assert result.prefill_s == result.ttft_s
    decode = _decode_slices(result)
    micro_batches = pp  # batch 4 divides by pp: one micro-batch per stage
    assert len(decode) == micro_batches * (n - 1)
    assert {name for _mb, name in decode} == {f"decode token {k}" for k in range(2, n + 1)}
    # every decode step starts after the first token exists and the request ends with the last one
    assert min(s for spans in decode.values() for s, _ in spans) >= _prefill_end(result) - 1e-12 or pp > 1
    assert max(e for spans in decode.values() for _, e in spans) == pytest.approx(result.iteration_time_s, rel=1e-12)


def test_e2e_is_ttft_plus_n_minus_1_tpot_and_tpot_is_the_mean_decode_step():
    project = _with(llama_inference(), "analytic", {"tp": 2, "pp": 1})
    result = simulate(project)
    n = project.run.inference.output_tokens
    m = result.metrics_json()
    assert m["e2e_s"] == result.iteration_time_s
    assert m["e2e_s"] == pytest.approx(m["ttft_s"] + (n - 1) * m["tpot_s"], rel=1e-12)
    steps = [e - s for spans in _decode_slices(result).values() for s, e in spans]
    assert len(steps) == n - 1
    assert m["tpot_s"] == pytest.approx(float(np.mean(steps)), rel=1e-9)  # pp 1: steps back to back
    assert m["tokens_per_s_per_user"] == pytest.approx(1.0 / m["tpot_s"], rel=1e-12)
    batch = project.run.inference.batch
    assert m["tokens_per_s_per_device"] == pytest.approx(batch * n / m["e2e_s"] / result.devices, rel=1e-12)


@pytest.mark.parametrize("engine", ["event", "analytic"])
def test_one_output_token_is_the_prefill_alone(engine):
    """The prefill produces the only token: no decode step, TPOT absent (None, JSON null), not 0."""
    project = _with(llama_inference(), engine, {"tp": 2}, output_tokens=1)
    result = simulate(project)
    assert not _decode_slices(result)
    assert result.tpot_s is None
    assert result.ttft_s == pytest.approx(result.iteration_time_s, rel=1e-12)
    m = json.loads(json.dumps(result.metrics_json()))
    assert m["tpot_s"] is None and m["tokens_per_s_per_user"] is None
    assert m["e2e_s"] == m["ttft_s"]
    assert result.memory_breakdown_bytes["kv_cache"] > 0  # the prefill still writes the prompt's cache
    assert "TPOT" in result.summary_text()


def _llama7b(batch: int, prompt: int, output: int, **inference) -> Project:
    return Project(
        name="llama2-7b", hardware=load_system("dgx-a100"), workload=load_model("llama2-7b"),
        mapping=Mapping(tp=1, pp=1, dp=1),
        run=RunSettings(mode="infer", engine="analytic",
                        inference={"prompt_tokens": prompt, "output_tokens": output, "batch": batch} | inference),
    )


@pytest.mark.parametrize(("block", "kv_dtype", "kv_bytes"), [(16, None, 2), (1, None, 2), (16, "fp8", 1)])
def test_kv_cache_is_attention_layers_only_in_pages_and_its_own_format(block, kv_dtype, kv_bytes):
    b, prompt, out = 4, 100, 30
    project = _llama7b(b, prompt, out, kv_block_tokens=block)
    if kv_dtype:
        project = _with(project, mapping={"formats": {"kv_cache": kv_dtype}})
    context = prompt + out - 1  # the last sampled token is never fed back
    paged = math.ceil(context / block) * block
    expected = 2 * 32 * 32 * 128 * paged * b * kv_bytes  # 32 attention layers, not 34
    for engine in ("analytic", "event"):
        result = simulate(_with(project, engine))
        assert result.memory_breakdown_bytes["kv_cache"] == expected, engine


def test_kv_cache_grows_page_by_page_as_tokens_are_written():
    project = _with(llama_inference(), "event", {"tp": 2}, kv_block_tokens=16)
    kv = np.asarray(simulate(project).memory[0].by_category["kv_cache"])
    assert np.all(np.diff(kv) >= 0)
    inf = project.run.inference
    levels = np.unique(kv[kv > 0])
    per_page = levels[0] / (inf.prompt_tokens / 16)  # 256-token prompt: 16 pages at the prefill
    assert np.allclose(np.diff(levels), per_page)  # each later level is one more page
    assert len(levels) == math.ceil((inf.prompt_tokens + inf.output_tokens - 1) / 16) - inf.prompt_tokens // 16 + 1


@pytest.mark.parametrize(("batch", "prompt", "output", "too_big"),
                         [(384, 512, 128, True), (384, 128, 32, False), (64, 512, 128, False)])
def test_no_false_out_of_memory_for_llama2_7b_on_one_a100(batch, prompt, output, too_big):
    """Weights + KV cache (paged, 32 layers) + the largest transient at the prompt (SwiGLU's product:
    gate and up in, product out, 3·s·ffn per sequence): out of memory exactly when that exceeds 80 GiB.
    Batch 384 with 512-token prompts really does not fit in one batch (its KV cache alone is ~120 GiB;
    serving systems run it by admitting fewer sequences at a time); batch 384 with 128-token prompts does."""
    weights = LLAMA7B_PARAMS * 2
    kv = 2 * 32 * 32 * 128 * (math.ceil((prompt + output - 1) / 16) * 16) * batch * 2
    workspace = 3 * prompt * 11008 * batch * 2
    need = weights + kv + workspace
    result = simulate(_llama7b(batch, prompt, output))
    mem = result.memory_breakdown_bytes
    assert (mem["weights"], mem["kv_cache"], mem["workspace"]) == (weights, kv, workspace)
    capacity = 80 * GIB
    assert (need > capacity) == too_big
    assert (result.oom is not None) == too_big
    if result.oom is not None:
        assert result.oom.need_bytes == need  # the real shortfall, not a training-length score tensor


def test_fused_causal_prefill_has_half_the_attention_flops_and_no_score_tensor():
    s, mb = 512, 2
    fused = inference_graph(GPT, s, s, mb, fused=True)
    mat = inference_graph(GPT, s, s, mb, fused=False)
    att = lambda g: sum(op.flops for op in g.ops() if op.kind is OpKind.attention)  # noqa: E731
    assert att(fused) / att(mat) == pytest.approx((s + 1) / (2 * s), rel=1e-12)
    assert att(mat) == 4 * s * s * GPT.hidden * GPT.layers  # QKᵀ and AV over every pair
    assert not [op for op in fused.ops() if op.kind is OpKind.softmax]
    scores = [op for op in mat.ops() if op.kind is OpKind.softmax]
    assert scores and all(op.in_elems == GPT.heads * s * s for op in scores)
    # and the run: the materialised one moves the scores and takes longer
    base = _with(llama_inference(), "analytic", {"tp": 2}, prompt_tokens=1024, output_tokens=8)
    f, m = simulate(base), simulate(_with(base, "analytic", attention="materialised"))
    assert f.ttft_s < m.ttft_s
    assert f.memory_breakdown_bytes["workspace"] < m.memory_breakdown_bytes["workspace"]


def test_decode_reads_the_cache_once_and_the_prompt_pass_is_inference_only():
    s, c, mb = 64, 300, 3
    decode = inference_graph(GPT, 1, c, mb, fused=True)
    kv = GPT.hidden  # GPT: as many KV heads as heads
    for op in decode.ops():
        if op.kind is OpKind.attention:
            assert op.cache_elems == 2 * (c - 1) * kv
            assert op.flops == 4 * GPT.hidden * c
    prefill = inference_graph(GPT, s, s, mb, fused=True)
    kinds = {op.kind for op in prefill.ops()}
    assert OpKind.loss not in kinds and OpKind.dropout not in kinds
    logits = next(op for op in prefill.ops() if op.name.endswith("logits"))
    assert logits.gemm == (1, GPT.vocab, GPT.hidden)  # the last token's logits only
    for op in prefill.ops():
        if op.kind is OpKind.embedding:  # a gather of the pass's rows, not the table
            assert op.params == mb * s * GPT.hidden
    # inputs of the kept ops name kept ops only (dropouts and the loss left no dangling edges)
    names = {op.name for op in prefill.ops()}
    assert all(i in names for op in prefill.ops() for i in op.inputs)


@pytest.mark.parametrize("setting", [{"attention": "materialised"}, {"output_tokens": 1}, {"kv_block_tokens": 7}])
@pytest.mark.parametrize("pp", [1, 2])
def test_engines_agree_on_every_inference_setting(setting, pp):
    base = _with(llama_inference(), "event", {"tp": 2, "pp": pp}, **setting)
    event, analytic = simulate(base), simulate(_with(base, "analytic"))
    for name in ("iteration_time_s", "ttft_s", "prefill_s"):
        assert getattr(event, name) == pytest.approx(getattr(analytic, name), rel=1e-9), name
    assert (event.tpot_s is None) == (analytic.tpot_s is None)
    assert event.memory_breakdown_bytes == pytest.approx(analytic.memory_breakdown_bytes, rel=1e-12)


def _args(*argv: str):
    return build_parser().parse_args(["run", *argv])


def test_cli_inference_flags_round_trip_into_the_project():
    args = _args("--model", "llama2-7b", "--tp", "1", "--devices", "1", "--mode", "infer", "--prompt-tokens", "128",
                 "--output-tokens", "64", "--batch", "8", "--kv-dtype", "fp8", "--attention", "materialised",
                 "--kv-block-tokens", "32")
    project = assemble_project(args)
    inf = project.run.inference
    assert (inf.prompt_tokens, inf.output_tokens, inf.batch, inf.attention.value, inf.kv_block_tokens) == (
        128, 64, 8, "materialised", 32)
    assert project.mapping.formats.kv_cache.value == "fp8"


def test_cli_refuses_inference_flags_on_a_training_run(capsys):
    code = main(["run", "--model", "gpt", "--layers", "2", "--hidden", "256", "--heads", "4", "--batch", "8"])
    assert code == 2
    assert "--mode infer" in capsys.readouterr().err


def test_run_help_lists_the_inference_flags(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out
    for flag in ("--prompt-tokens", "--output-tokens", "--batch", "--kv-dtype", "--attention", "--kv-block-tokens"):
        assert flag in text


def test_old_inference_settings_load_and_save_unchanged():
    old = {"prompt_tokens": 2048, "output_tokens": 256, "batch": 8}
    inf = InferenceSettings.model_validate(old)
    assert inf.attention.value == "fused" and inf.kv_block_tokens == 16
    assert inf.model_dump(mode="json") == old  # new defaults stay out of saved files
    changed = InferenceSettings.model_validate(old | {"attention": "materialised"})
    assert changed.model_dump(mode="json")["attention"] == "materialised"
