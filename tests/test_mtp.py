"""Multi-token prediction (``TransformerDims.mtp_layers``, ``workloads.transformer_mtp``): DeepSeek-V3 §2.2 and
Megatron-Core's ``MultiTokenPredictionLayer``. Expected numbers come from the dimensions by hand (the README of
DeepSeek-V3's weights: 671 B main model, 11.5 B unique MTP parameters, the checkpoint's 685 B counting the MTP
layer's copies of the 0.9 B embedding and 0.9 B head again)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import Mapping, Project, RunSettings
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.ops import LayerKind, TensorSplit
from tilewright.engine.ir.project import InferenceSettings
from tilewright.engine.ir.workload import BertSpec, LlamaSpec, MoESpec
from tilewright.engine.perf.memory import recomputed_layers
from tilewright.engine.plan.checks import check_project
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload, import_hf_config
from tilewright.engine.workloads.hf_import import ConfigError
from tilewright.engine.workloads.transformer_inference import inference_graph

HF = Path(__file__).parent / "data" / "hf"
DENSE = LlamaSpec(name="llama-mtp", layers=4, hidden=512, heads=8, kv_heads=2, ffn=1536, vocab=8000, seq_len=256)
MOE = DENSE.model_copy(update={"moe": MoESpec(experts=8, top_k=2, expert_ffn=256, shared_experts=1)})


def _layers(graph) -> dict[str, int]:
    return {li.name: li.index for li in graph.layers}


def _ops(graph, layer: str) -> list:
    return graph.layer_ops(_layers(graph)[layer])


def _block_params(c: dict, moe: bool) -> int:
    """One DeepSeek-V3 block from its config: MLA, two RMSNorms and the MLP (MoE: routed + shared + router)."""
    h, a = c["hidden_size"], c["num_attention_heads"]
    rq, rkv = c["q_lora_rank"], c["kv_lora_rank"]
    dn, dr, dv = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    attention = h * rq + rq + rq * a * (dn + dr) + h * (rkv + dr) + rkv + rkv * a * (dn + dv) + a * dv * h
    if not moe:
        return attention + 2 * h + 3 * h * c["intermediate_size"]
    e, f = c["n_routed_experts"], c["moe_intermediate_size"]
    mlp = e * 3 * h * f + 3 * h * f * c["n_shared_experts"] + e * h + e  # router bias: noaux_tc
    return attention + 2 * h + mlp


def test_deepseek_v3_mtp_parameters_by_hand():
    """One depth: enorm, hnorm, final norm (h each), eh_proj (2h × h, no bias) and a block like the last (MoE);
    no embedding or head of its own."""
    c = json.loads((HF / "deepseek-v3" / "config.json").read_text())
    h, v = c["hidden_size"], c["vocab_size"]
    main_model = build_workload(import_hf_config(HF / "deepseek-v3")).params
    with_mtp = build_workload(import_hf_config(HF / "deepseek-v3", mtp=True)).params
    mtp = 3 * h + 2 * h * h + _block_params(c, moe=True)
    assert with_mtp - main_model == mtp
    assert round(main_model / 1e9) == 671
    assert mtp / 1e9 == pytest.approx(11.5, rel=0.01)  # "11.5B unique parameters"
    assert round((with_mtp + 2 * v * h) / 1e9, 0) in (684, 685)  # the checkpoint's count, copies included


def test_one_depth_is_norms_projection_block_norm_then_shared_logits_and_loss():
    spec = DENSE.model_copy(update={"mtp_layers": 2})
    graph = build_workload(spec)
    names = [li.name for li in graph.layers]
    assert names[-5:] == ["head", "mtp0", "mtp0_head", "mtp1", "mtp1_head"]
    assert all(li.kind is LayerKind.head for li in graph.layers[-4:])
    s, h = spec.seq_len, spec.hidden
    depth = _ops(graph, "mtp0")
    short = [op.name.split(".", 1)[1] for op in depth]
    last_block = [op.name.split(".", 1)[1] for op in _ops(graph, "block3")]
    assert short == ["hnorm", "word_embedding", "enorm", "eh_proj", *last_block, "final_norm"]
    by = {op.name: op for op in depth}
    assert by["mtp0.hnorm"].inputs == ["head.final_norm"]
    assert _ops(graph, "mtp1")[0].inputs == ["mtp0.final_norm"]  # depth k reads depth k − 1
    eh = by["mtp0.eh_proj"]
    assert eh.split is TensorSplit.column and eh.params == 2 * h * h and eh.gemm == (s, h, 2 * h)
    assert set(eh.inputs) == {"mtp0.enorm", "mtp0.hnorm"}
    assert by["mtp0.word_embedding"].params == 0  # the main embedding, looked up again
    head = _ops(graph, "mtp0_head")
    assert [op.name for op in head] == ["mtp0_head.logits", "mtp0_head.loss"]
    assert head[0].params == 0 and head[0].gemm == (s, spec.vocab, h)
    assert graph.params - build_workload(DENSE).params == 2 * (3 * h + 2 * h * h + sum(
        op.params for op in _ops(graph, "block3")))


@pytest.mark.parametrize("freq,moe_depth", [(1, True), (2, False)])
def test_the_depth_block_is_the_last_blocks_kind(freq, moe_depth):
    """layer_freq 2 over 4 blocks: block 3 is dense, so is the depth's block; every block MoE: MoE."""
    spec = MOE.model_copy(update={"moe": MOE.moe.model_copy(update={"layer_freq": freq}), "mtp_layers": 1})
    graph = build_workload(spec)
    assert any(op.moe is not None for op in _ops(graph, "mtp0")) is moe_depth
    assert any(op.moe is not None for op in _ops(graph, "block3")) is moe_depth


def test_flops_per_token_added():
    """Per token and depth: eh_proj 2·2h·h, the block (Q/K/V/O, SwiGLU, s attended keys at 4·a·d FLOPs each)
    and the logits 2·h·V; the model FLOPs of an iteration grow by 3× that (forward and backward)."""
    s, h, a, kv, f, v = DENSE.seq_len, DENSE.hidden, DENSE.heads, DENSE.kv_heads, DENSE.ffn, DENSE.vocab
    d = h // a
    block = 2 * h * (a + 2 * kv) * d + 2 * a * d * h + 3 * 2 * h * f + 4 * a * d * s
    per_token = 2 * 2 * h * h + block + 2 * h * v
    base, mtp = build_workload(DENSE), build_workload(DENSE.model_copy(update={"mtp_layers": 1}))
    assert (mtp.flops_per_sample - base.flops_per_sample) / s == pytest.approx(per_token, rel=1e-12)
    runs = [simulate(_project(DENSE.model_copy(update={"mtp_layers": k}), engine="analytic")) for k in (0, 1)]
    batch = runs[0].samples_per_iteration
    assert runs[1].model_flops_per_iteration - runs[0].model_flops_per_iteration == pytest.approx(
        3 * per_token * s * batch, rel=1e-9)


def _project(spec, *, pp: int = 2, interleave: int = 1, layout=None, engine: str = "event", **extra) -> Project:
    mapping = Mapping(tp=2, pp=pp, dp=1, micro_batch=1, global_batch=8, interleave=interleave,
                      pipeline_layers=layout, sequence_parallel=True, **extra)
    return Project(name="mtp", hardware=load_system("dgx-a100"), workload=spec, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


@pytest.mark.parametrize("interleave,layout", [(1, None), (2, [1, 1, 1, 1]), (2, [2, 1, 1, 0])])
def test_depths_ride_on_the_last_virtual_stage_with_the_head(interleave, layout):
    """The layout counts the main model's blocks only (4), even with a last chunk of no block (DeepSeek-V3's
    'mL'); the depths and their heads join the head on the last rank's last chunk."""
    spec = DENSE.model_copy(update={"mtp_layers": 1})
    project = _project(spec, interleave=interleave, layout=layout)
    assert check_project(project) == []
    plan = make_plan(project)
    index = _layers(build_workload(spec))
    last = plan.stages[-1].chunk_layers[interleave - 1]
    assert {index["head"], index["mtp0"], index["mtp0_head"]} <= set(last)
    elsewhere = [i for st in plan.stages for c, ids in st.chunk_layers.items() for i in ids
                 if (st, c) != (plan.stages[-1], interleave - 1)]
    assert not {index["mtp0"], index["mtp0_head"]} & set(elsewhere)


def test_both_engines_agree_with_mtp():
    project = _project(DENSE.model_copy(update={"mtp_layers": 1}), interleave=2, layout=[1, 1, 1, 1])
    event = simulate(project)
    analytic = simulate(project.model_copy(update={"run": project.run.model_copy(update={"engine": "analytic"})}))
    assert event.iteration_time_s == pytest.approx(analytic.iteration_time_s, rel=1e-6)
    plain = simulate(_project(DENSE, interleave=2, layout=[1, 1, 1, 1]))
    assert event.iteration_time_s > plain.iteration_time_s


def test_the_last_stage_keeps_an_embedding_copy():
    """Megatron keeps the word embedding on the MTP stage and all-reduces its gradient over the embedding
    group (finalize_model_grads: tied or mtp_num_layers): vocab × hidden / tp more weights there, fp32 grads."""
    base = make_plan(_project(DENSE))
    mtp = make_plan(_project(DENSE.model_copy(update={"mtp_layers": 1})))
    assert base.tied_bytes == 0
    assert mtp.tied_bytes == pytest.approx(DENSE.vocab * DENSE.hidden / 2 * 4)
    g = build_workload(DENSE.model_copy(update={"mtp_layers": 1}))
    depth = sum(op.params for name in ("mtp0", "mtp0_head") for op in _ops(g, name))
    copy = DENSE.vocab * DENSE.hidden
    assert mtp.stages[-1].params - base.stages[-1].params == pytest.approx((depth + copy) / 2, rel=0.05)
    assert mtp.stages[0].params == base.stages[0].params


def test_full_recomputation_re_runs_the_depth_not_its_logits():
    """Megatron checkpoints ``_proj_and_transformer_layer`` (norms, eh_proj, block, final norm) under full
    recomputation; the shared head's logits and the loss run outside it."""
    g = build_workload(DENSE.model_copy(update={"mtp_layers": 1}))
    layers = [_ops(g, name) for name in ("head", "mtp0", "mtp0_head")]
    rerun = recomputed_layers(layers, Recompute.full)
    assert [ops[0].name for ops in rerun] == ["mtp0.hnorm"]


def test_depth_zero_is_todays_workload():
    spec = DENSE.model_copy(update={"mtp_layers": 0})
    assert "mtp_layers" not in spec.model_dump(mode="json")  # old files save back unchanged
    assert [op.model_dump() for op in build_workload(spec).ops()] == [op.model_dump() for op in build_workload(
        LlamaSpec.model_validate(DENSE.model_dump())).ops()]
    assert "mtp_layers" in DENSE.model_copy(update={"mtp_layers": 1}).model_dump(mode="json")


def test_bert_refuses_mtp():
    with pytest.raises(ValueError, match="mtp_layers"):
        BertSpec(layers=2, hidden=256, heads=4, mtp_layers=1)


def test_inference_leaves_the_depths_out():
    """Serving runs MTP only as a speculative-decoding drafter, which no mode here models: a prefill or decode
    pass, and the served model's weights, are those of the main model."""
    spec = DENSE.model_copy(update={"mtp_layers": 2})
    assert not any("mtp" in op.name for op in inference_graph(spec, 16, 64, 1, True).ops())
    run = RunSettings(mode="infer", dtype="bf16", engine="analytic",
                      inference=InferenceSettings(prompt_tokens=128, output_tokens=8, batch=2))
    results = []
    for s in (DENSE, spec):
        project = Project(name="serve", hardware=load_system("dgx-a100"), workload=s,
                          mapping=Mapping(tp=2, pp=2, dp=1, micro_batch=1, global_batch=2), run=run)
        results.append(simulate(project))
    a, b = results
    assert (b.ttft_s, b.tpot_s, b.peak_memory_bytes) == (a.ttft_s, a.tpot_s, a.peak_memory_bytes)


def test_hf_import_keeps_mtp_only_when_asked():
    plain = import_hf_config(HF / "deepseek-v3")
    kept = import_hf_config(HF / "deepseek-v3", mtp=True)
    assert plain.mtp_layers == 0 and "left out" in plain.comment
    assert kept.mtp_layers == 1 and "kept" in kept.comment
    with pytest.raises(ConfigError) as err:
        import_hf_config(HF / "llama-2-7b", mtp=True)
    assert err.value.field == "num_nextn_predict_layers"


def test_cli_import_hf_mtp_and_run_set(tmp_path, capsys):
    out = tmp_path / "dsv3.json"
    assert main(["import-hf", str(HF / "deepseek-v3"), "--mtp", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["mtp_layers"] == 1
    base = ["run", "--system", "dgx-a100", "--model", "gpt", "--layers", "4", "--hidden", "512", "--heads", "8",
            "--seq-len", "256", "--vocab", "8000", "--tp", "2", "--pp", "2", "--global-batch", "8", "--json"]
    capsys.readouterr()
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*base, "--set", "workload.mtp_layers=1"]) == 0
    mtp = json.loads(capsys.readouterr().out)
    assert mtp["model_flops_per_iteration"] > plain["model_flops_per_iteration"]
    assert main([*base, "--set", "workload.mtp_layers=-1"]) == 2
    assert "workload.mtp_layers" in capsys.readouterr().err
