"""Selective recomputation of Megatron-Core's ``recompute_modules`` (``engine.perf.recompute``): what each
module stops storing and re-runs, derived here from the model's dimensions (not from the engine's op list),
the default (None) equal to the attention core the engine always recomputed, the checks that refuse what
Megatron-Core would not run, the command line and the studio's option."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from tilewright.engine.cli import main  # noqa: E402
from tilewright.engine.io.presets import load_system  # noqa: E402
from tilewright.engine.ir import Mapping, Project, RunSettings  # noqa: E402
from tilewright.engine.ir.mapping import Recompute  # noqa: E402
from tilewright.engine.ir.workload import LlamaSpec, MLASpec, MoESpec  # noqa: E402
from tilewright.engine.perf.memory import activation_bytes  # noqa: E402
from tilewright.engine.plan.checks import check_project  # noqa: E402
from tilewright.engine.plan.hardware_flops import hardware_flops_per_sample  # noqa: E402
from tilewright.engine.simulate import make_plan, simulate  # noqa: E402
from tilewright.engine.workloads import build_workload  # noqa: E402

S, H, HEADS, FFN, VOCAB = 256, 256, 4, 512, 1024
EXPERTS, TOP_K, EXPERT_FFN = 4, 2, 128
BLOCKS = 2
ELEM = 2  # bf16


def dense() -> LlamaSpec:
    return LlamaSpec(name="dense", layers=BLOCKS, hidden=H, heads=HEADS, ffn=FFN, vocab=VOCAB, seq_len=S)


def moe(**extra: object) -> LlamaSpec:
    return dense().model_copy(update={"name": "moe", "moe": MoESpec(experts=EXPERTS, top_k=TOP_K,
                                                                    expert_ffn=EXPERT_FFN, **extra)})


def blocks(spec: LlamaSpec) -> list[list]:
    g = build_workload(spec)
    return [g.layer_ops(i) for i in g.block_layers]


def project(spec: LlamaSpec, modules: list[str] | None, *, tp: int = 1, recompute: str = "selective",
            engine: str = "analytic", fusion: list[list[str]] | None = None) -> Project:
    mapping = Mapping(tp=tp, dp=1, micro_batch=2, global_batch=4, sequence_parallel=tp > 1, recompute=recompute,
                      recompute_modules=modules, fusion=fusion or [])
    return Project(name="rc", hardware=load_system("dgx-a100"), workload=spec, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine=engine))


# -- stored activations -----------------------------------------------------------------------------------
@pytest.mark.parametrize("tp", [1, 2])
def test_layernorm_and_moe_act_drop_the_norm_output_and_the_expert_activation_output(tp):
    """Per MoE block, layernorm discards the pre-MLP norm's output (s·h; the input norm is fused into qkv, as
    Transformer Engine does, so nothing of it goes) and moe_act the activation's output the experts' down
    projection kept (s·top_k·expert_ffn). Sequence parallelism splits both over tp."""
    mb, layers = 2, blocks(moe())
    kept = activation_bytes(layers, mb, tp, tp > 1, Recompute.none, ELEM)
    dropped = activation_bytes(layers, mb, tp, tp > 1, Recompute.selective, ELEM,
                               recompute_modules=["layernorm", "moe_act"])
    expected = BLOCKS * (S * H + S * TOP_K * EXPERT_FFN) * ELEM * mb / tp
    assert kept - dropped == pytest.approx(expected)


def test_mlp_keeps_only_the_modules_input():
    """A checkpointed dense MLP stores nothing of its own: the SwiGLU input (2·s·ffn), the down projection's
    input (s·ffn) and the fused pre-MLP norm's output (s·h) go; the norm's input (the residual) stays."""
    mb, layers = 2, blocks(dense())
    kept = activation_bytes(layers, mb, 1, False, Recompute.none, ELEM)
    dropped = activation_bytes(layers, mb, 1, False, Recompute.selective, ELEM, recompute_modules=["mlp"])
    assert kept - dropped == pytest.approx(BLOCKS * (3 * S * FFN + S * H) * ELEM * mb)


def test_no_modules_and_core_attn_are_the_attention_core():
    """None (Megatron-Core's default) and ["core_attn"] both drop the softmax output, a·s² per block (Llama
    has no attention dropout), and nothing else; a fused attention kernel stores no scores at all."""
    mb, layers = 1, blocks(dense())
    kept = activation_bytes(layers, mb, 1, False, Recompute.none, ELEM)
    for modules in (None, ["core_attn"]):
        dropped = activation_bytes(layers, mb, 1, False, Recompute.selective, ELEM, recompute_modules=modules)
        assert kept - dropped == pytest.approx(BLOCKS * HEADS * S * S * ELEM * mb)


# -- re-run work ----------------------------------------------------------------------------------------
def test_hardware_flops_count_the_re_run_forward():
    """HFU's numerator gains each re-run op's forward: 'moe' re-runs the router GEMM (2·s·e·h) and the three
    expert GEMMs over s·top_k token-slots; 'mlp' the dense up, gate and down GEMMs; the default the two
    attention matmuls (4·s²·h, unfused)."""
    none = hardware_flops_per_sample(build_workload(moe()), Recompute.none, frozenset())
    again = hardware_flops_per_sample(build_workload(moe()), Recompute.selective, frozenset(), modules=["moe"])
    assert again - none == pytest.approx(BLOCKS * (2 * S * EXPERTS * H + 3 * 2 * S * TOP_K * EXPERT_FFN * H))
    g = build_workload(dense())
    none = hardware_flops_per_sample(g, Recompute.none, frozenset())
    mlp = hardware_flops_per_sample(g, Recompute.selective, frozenset(), modules=["mlp"])
    assert mlp - none == pytest.approx(BLOCKS * 3 * 2 * S * H * FFN)
    core = hardware_flops_per_sample(g, Recompute.selective, frozenset())
    assert core - none == pytest.approx(BLOCKS * 4 * S * S * H)
    flash = frozenset({("attention", "softmax")})  # a fused kernel recomputes inside its own backward
    assert hardware_flops_per_sample(g, Recompute.selective, flash) == hardware_flops_per_sample(
        g, Recompute.none, flash)


def test_the_plan_re_runs_a_checkpointed_mlp_with_its_collectives():
    """The R pass (both engines read it) computes the MLP's forward again — per device mb · 6·s·h·ffn / tp
    per block — and, a normally checkpointed module, repeats its sequence-parallel all-gather and
    reduce-scatter; an output-discarding module (layernorm) re-runs bare kernels, no collective; the HFU of
    the run counts the same FLOPs."""
    plan = make_plan(project(dense(), ["mlp"], tp=2))
    rerun = plan.stages[0].passes[(0, "R")]
    assert rerun.flops == pytest.approx(2 * BLOCKS * 6 * S * H * FFN / 2)
    comms = [seg.comm[0] for seg in rerun.segments if seg.comm]
    assert comms == ["all-gather", "reduce-scatter"] * BLOCKS
    norms = make_plan(project(moe(), ["layernorm"], tp=2)).stages[0].passes[(0, "R")]
    assert not [seg for seg in norms.segments if seg.comm] and norms.flops == 0
    base = simulate(project(dense(), None, recompute="none"))
    mlp = simulate(project(dense(), ["mlp"]))
    extra = 4 * BLOCKS * 6 * S * H * FFN  # global batch 4
    # the default would also re-run the attention core; "mlp" alone replaces it
    assert mlp.hardware_flops_per_iteration - base.hardware_flops_per_iteration == pytest.approx(extra)
    assert mlp.iteration_time_s > base.iteration_time_s


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_core_attn_is_the_default_in_both_engines(engine):
    a = simulate(project(moe(), None, engine=engine)).metrics_json()
    b = simulate(project(moe(), ["core_attn"], engine=engine)).metrics_json()
    for key in ("iteration_time_s", "hfu", "peak_memory_bytes", "time_breakdown_s", "memory_breakdown_bytes"):
        assert a[key] == b[key], key


@pytest.mark.parametrize("modules", [["layernorm", "moe_act"], ["moe"], ["shared_experts"]])
def test_both_engines_agree_on_module_recomputation(modules):
    spec = moe(shared_experts=1)
    a = simulate(project(spec, modules, tp=2, engine="analytic"))
    b = simulate(project(spec, modules, tp=2, engine="event"))
    assert a.iteration_time_s == pytest.approx(b.iteration_time_s, rel=1e-9)
    assert a.peak_memory_bytes == pytest.approx(b.peak_memory_bytes, rel=1e-9)


# -- what is refused ------------------------------------------------------------------------------------
def problems(p: Project) -> list[str]:
    return [p.reason for p in check_project(p) if p.path == "mapping.recompute_modules"]


def test_checks_refuse_unknown_absent_and_non_selective_modules():
    assert problems(project(moe(), ["layernorm", "moe_act"])) == []
    assert problems(project(dense(), ["mlp", "core_attn"])) == []
    [unknown] = problems(project(dense(), ["mlp", "attn"]))
    assert "unknown module attn" in unknown and "core_attn" in unknown
    [mla] = problems(project(dense(), ["mla_up_proj"]))
    assert "mla_up_proj" in mla and "latent attention" in mla
    absent = problems(project(dense(), ["moe_act", "shared_experts", "layernorm"]))
    assert len(absent) == 3 and "mixture-of-experts" in absent[0] and "fused" in absent[2]
    assert problems(project(moe(), ["mlp"]))  # every block MoE: no dense MLP to checkpoint
    [full] = problems(project(dense(), ["mlp"], recompute="full"))
    assert "selective" in full and "'full'" in full
    spec = moe().model_copy(update={"mla": MLASpec(q_lora_rank=64, kv_lora_rank=32, qk_nope_head_dim=32,
                                                   qk_rope_head_dim=16, v_head_dim=32)})
    assert problems(project(spec, ["mla_up_proj", "layernorm", "moe_act"])) == []  # MLA's input norm is its own


def test_the_field_is_quiet_and_takes_a_comma_separated_string():
    assert "recompute_modules" not in Mapping().model_dump(mode="json", exclude_defaults=True)
    m = Mapping.model_validate({"recompute": "selective", "recompute_modules": "layernorm, moe_act"})
    assert m.recompute_modules == ["layernorm", "moe_act"]


# -- command line ---------------------------------------------------------------------------------------
GPT = ["run", "--system", "dgx-a100", "--model", "gpt", "--layers", "2", "--hidden", "256", "--heads", "4",
       "--seq-len", "256", "--vocab", "1024", "--tp", "2", "--dp", "1", "--quiet"]


def test_cli_sets_the_modules_and_refuses_bad_ones_with_exit_2(capsys):
    assert main([*GPT, "--recompute-modules", "mlp,core_attn", "--json"]) == 0
    capsys.readouterr()
    assert main([*GPT, "--set", 'mapping.recompute_modules=["mlp"]', "--recompute", "selective", "--json"]) == 0
    capsys.readouterr()
    assert main([*GPT, "--recompute-modules", "mlp,bogus"]) == 2
    assert "mapping.recompute_modules" in capsys.readouterr().err
    assert main([*GPT, "--recompute", "full", "--recompute-modules", "mlp"]) == 2
    assert "needs recompute 'selective'" in capsys.readouterr().err
    assert main([*GPT, "--set", "mapping.recompute_modules=5"]) == 2
    assert "mapping.recompute_modules" in capsys.readouterr().err
