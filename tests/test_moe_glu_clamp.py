"""A clamped gated unit in the routed experts (gpt-oss ``swiglu_limit``, ``TransformerDims.glu_clamp``) under
Megatron-Core: ``weighted_bias_quick_geglu_impl`` clamps both halves of fc1's output and concatenates them in eager
PyTorch before its fused kernel, and builds its linear offset with ``torch.tensor(…, device=…)``, a blocking
host-to-device copy (``plan.experts.glu_clamp_kernels``). Per pass over n elements of one half at b bytes each:
forward 2·nb + 2·nb + 4·nb bytes in three kernels, the copy's floor and one drain; backward nine kernels (the
comparisons write 1-byte masks): (nb + n) + (2nb + n) for the gate, 2·(nb + n) + 3n + (2nb + n) for the linear
half, 4·nb for the concatenation: 11·nb + 8·n in all.

Expected values come from the workload's shapes (token-slots × expert width) and the device's drain constants,
not from the function under test."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.workload import MoESpec
from tilewright.engine.plan.experts import dispatch_work, glu_clamp_kernels
from tilewright.engine.plan.launch import drain_seconds
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads.hf_config import Reader
from tilewright.engine.workloads.hf_families import gpt_oss

from tests.agreement import assert_engines_agree

EXPERTS, TOP_K, LAYERS, SEQ, HIDDEN, FFN, EP, MB = 16, 2, 2, 1024, 1024, 512, 4, 1
BF16 = 2.0


def _spec(clamp: float | None) -> LlamaSpec:
    return LlamaSpec(name="moe", layers=LAYERS, hidden=HIDDEN, heads=16, ffn=4 * HIDDEN, vocab=32000, seq_len=SEQ,
                     glu_clamp=clamp, moe=MoESpec(experts=EXPERTS, top_k=TOP_K, expert_ffn=FFN))


def _project(clamp: float | None, recompute_modules: list[str] | None = None) -> Project:
    mapping = Mapping(tp=1, dp=8, ep=EP, micro_batch=MB, global_batch=16, expert_imbalance=1.0,
                      recompute="selective" if recompute_modules else "none", recompute_modules=recompute_modules)
    return Project(name="clamp", hardware=load_system("dgx-h100"), workload=_spec(clamp), mapping=mapping,
                   run=RunSettings(dtype="bf16", engine="analytic", contention=False))


HALF = MB * SEQ * TOP_K * FFN  # one half of a device's fc1 output on a balanced router: token-slots × width


def test_kernel_bytes_by_hand():
    n, b = 1000.0, 2.0
    assert glu_clamp_kernels(n, b, False) == (4000.0, 4000.0, 8000.0, 0.0)
    back = glu_clamp_kernels(n, b, True)
    assert len(back) == 9
    assert sum(back) == pytest.approx((n * b + n) + (2 * n * b + n) + 2 * (n * b + n) + 3 * n + (2 * n * b + n)
                                      + 4 * n * b)


def _ops(clamp: float | None) -> tuple[dict, object]:
    plan = make_plan(_project(clamp))
    return {op.name.split(".", 1)[-1]: op for op in plan.workload.layer_ops(1)}, plan.stages[0].dev.compute


def test_only_the_clamped_activation_carries_it():
    (ops, compute), (plain, _) = _ops(7.0), _ops(None)
    fwd = dispatch_work(ops["experts_activation"], False, MB, 1, EP, BF16, compute)
    bwd = dispatch_work(ops["experts_activation"], True, MB, 1, EP, BF16, compute)
    assert sum(fwd.clamp_kernels) == pytest.approx(8 * HALF * BF16)
    assert fwd.sync_s == pytest.approx(compute.host_sync_s + compute.host_dispatch_s) and bwd.sync_s == 0.0
    assert sum(bwd.clamp_kernels) == pytest.approx(HALF * (11 * BF16 + 8))
    for name in ("experts_up", "experts_down", "routing"):
        assert dispatch_work(ops[name], False, MB, 1, EP, BF16, compute).clamp_kernels == ()
    no = dispatch_work(plain["experts_activation"], False, MB, 1, EP, BF16, compute)
    assert no.clamp_kernels == () and no.sync_s == 0.0
    served = dispatch_work(ops["experts_activation"], False, MB, 1, EP, BF16, compute, framework=False)
    assert served.clamp_kernels == () and served.sync_s == 0.0


def _local_bytes(plan, kind: str) -> float:
    return sum(s.local_bytes for st in plan.stages for (_c, k), ps in st.passes.items() if k == kind
               for s in ps.segments)


def _host_wait(plan, kind: str) -> float:
    return sum(s.busy_s for st in plan.stages for (_c, k), ps in st.passes.items() if k == kind
               for s in ps.segments if s.label == "MoE host synchronisation")


@pytest.mark.parametrize(("kind", "per_half"), [("F", 8 * BF16), ("B", 11 * BF16 + 8)])
def test_the_plan_streams_the_clamps(kind, per_half):
    clamped, plain = make_plan(_project(7.0)), make_plan(_project(None))
    assert _local_bytes(clamped, kind) - _local_bytes(plain, kind) == pytest.approx(LAYERS * HALF * per_half)


def test_each_forward_and_each_recompute_drains_once_more():
    """One more drain per MoE layer forward (beside the dropless dispatcher's own), and with ``moe_act``
    recomputed one more in each recompute of the activation."""
    clamped, plain = make_plan(_project(7.0)), make_plan(_project(None))
    drain = drain_seconds(clamped.stages[0].dev.compute)
    assert _host_wait(clamped, "F") - _host_wait(plain, "F") == pytest.approx(LAYERS * drain)
    clamped, plain = make_plan(_project(7.0, ["moe_act"])), make_plan(_project(None, ["moe_act"]))
    assert _host_wait(clamped, "R") - _host_wait(plain, "R") == pytest.approx(LAYERS * drain)


def test_import_hf_reads_swiglu_limit():
    base = {"model_type": "gpt_oss", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "intermediate_size": 256, "vocab_size": 1000, "num_local_experts": 4,
            "num_experts_per_tok": 2, "max_position_embeddings": 4096, "sliding_window": 128}
    _cls, fields = gpt_oss(Reader({**base, "swiglu_limit": 5.5}, None))
    assert fields["glu_clamp"] == 5.5
    _cls, fields = gpt_oss(Reader(base, None))
    assert fields["glu_clamp"] == 7.0  # GptOssConfig's default


def test_both_engines_agree_with_clamped_biased_experts():
    """The analytic and the event engine time the clamps, their drains and the per-expert biases alike (tensor
    parallelism, sequence parallelism and ``moe_act`` recomputation on)."""
    spec = _spec(7.0).model_copy(update={"mlp_bias": True})
    mapping = Mapping(tp=2, dp=4, ep=EP, micro_batch=MB, global_batch=16, sequence_parallel=True,
                      recompute="selective", recompute_modules=["moe_act"])
    runs = [simulate(Project(name="clamp", hardware=load_system("dgx-h100"), workload=spec, mapping=mapping,
                             run=RunSettings(dtype="bf16", engine=engine, contention=False)))
            for engine in ("analytic", "event")]
    assert_engines_agree(*runs)
