"""What an MoE layer stores for its backward, as Megatron-Core's experts and token dispatchers keep it.

Megatron-Core's ``TEGroupedMLP`` multiplies the routing probabilities into the experts' activation
(``bias_act_func(fc1_output, bias, permuted_probs)``) and its dispatchers' ``combine_postprocess`` unpermutes
without probs: the combine is a scatter-add whose backward only gathers through the index map, so the experts'
outputs (slots · h) are not kept. Per sample, a block of the Llama family (RMSNorm, no biases, fused attention,
tp 1) keeps: each norm's input and output (2·s·h twice), Q, K, V (s·(a + 2·kv)·d), the attention output that
out_proj reads (s·a·d), the router's scores (s·e), the experts' input (s·k·h), the fc1 output that the gated
activation reads (2·s·k·f) and the fc2 input (s·k·f), which ``moe_act`` recomputation discards. The expected
bytes are written out from that list, not read from the workload.
"""

from __future__ import annotations

import pytest
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.workload import MoESpec
from tilewright.engine.perf.memory import activation_bytes
from tilewright.engine.plan.device_layers import sharded_layer_ops
from tilewright.engine.plan.passes import fused_edges
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.search.parallel.estimate import Estimator
from tilewright.engine.search.parallel.moe import ExpertBound
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload

from tests.agreement import assert_engines_agree, engine_result

S, H, HEADS, KV, D = 256, 512, 8, 2, 64
E, K, F = 8, 2, 384
BF16 = 2
FLASH = [["attention", "softmax"]]


def _spec(layers: int = 2) -> LlamaSpec:
    return LlamaSpec(name="moe", layers=layers, hidden=H, heads=HEADS, kv_heads=KV, head_dim=D, ffn=4 * H,
                     vocab=4096, seq_len=S, moe=MoESpec(experts=E, top_k=K, expert_ffn=F))


def _moe_layer(ep: int = 1) -> list:
    graph = build_workload(_spec())
    return sharded_layer_ops(graph, [graph.block_layers[0]], ep)[0]


def _hand_bytes(moe_act: bool = False) -> float:
    """Megatron-Core's saved tensors of one MoE block, per sample, in bf16 (the module docstring's list)."""
    norms = 2 * (2 * S * H)
    attention = S * (HEADS + 2 * KV) * D + S * HEADS * D
    router = S * E
    experts = S * K * H + 2 * S * K * F + (0 if moe_act else S * K * F)
    return BF16 * (norms + attention + router + experts)


def _saved(layer: list, modules: list[str] | None = None, micro_batch: int = 1) -> float:
    recompute = Recompute.selective if modules else Recompute.none
    return activation_bytes([layer], micro_batch, 1, False, recompute, BF16, fused_edges(FLASH),
                            recompute_modules=modules)


def test_an_moe_block_keeps_megatrons_tensors_and_not_the_experts_outputs():
    assert _saved(_moe_layer()) == pytest.approx(_hand_bytes())
    assert _saved(_moe_layer(), micro_batch=3) == pytest.approx(3 * _hand_bytes())


def test_moe_act_recompute_drops_the_fc2_input():
    assert _saved(_moe_layer(), ["moe_act"]) == pytest.approx(_hand_bytes(moe_act=True))


def test_the_combine_stores_nothing_even_when_its_whole_module_is_kept():
    """Whatever else is recomputed, the combine adds no stored bytes (it had held slots·h)."""
    layer = _moe_layer()
    combine = next(op for op in layer if op.name.endswith(".combine"))
    assert _saved([combine]) == 0.0
    assert combine.saved_bytes_fixed == 0.0


def test_balanced_expert_parallelism_keeps_the_same_token_slots_per_device():
    """With balanced routing each ep rank's experts receive s·k token-slots from the ep ranks together: the
    per-device bytes are those of ep 1."""
    assert _saved(_moe_layer(ep=4)) == pytest.approx(_hand_bytes())


def _project(engine: str = "analytic", mapping: Mapping | None = None) -> Project:
    mapping = mapping or Mapping(tp=1, pp=2, dp=4, ep=4, micro_batch=1, global_batch=16, zero=1, fusion=FLASH,
                                 recompute="selective", recompute_modules=["moe_act"])
    return Project(name="moe", hardware=load_system("dgx-h100"), workload=_spec(4), mapping=mapping,
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def test_both_engines_hold_the_same_peak():
    assert_engines_agree(simulate(_project("analytic")), simulate(_project("event")))


def test_the_plan_holds_the_hand_count_per_micro_batch():
    """Stage 0 (the embedding, which stores nothing, and two MoE blocks) holds per micro-batch what the two
    blocks keep under ``moe_act`` recomputation; the memory tracks take it from there."""
    stage = make_plan(_project()).stages[0]
    assert stage.act_bytes == {0: pytest.approx(2 * _hand_bytes(moe_act=True))}


@pytest.mark.parametrize("ep", [1, 2, 4])
def test_the_search_bound_counts_an_moe_stage_as_the_engine_does(ep: int):
    """The search's MoE memory bound (``search.parallel.moe.ExpertBound``: the layer table's activations, read
    through ``perf.memory.activation_bytes``, beside the experts' state over ep) is the engine's peak here (no
    ZeRO-3 gathers, which it leaves out), at every ep."""
    c = Candidate(1, 2, 4, 1, zero=1, ep=ep)
    base = _project()
    p = base.model_copy(update={"mapping": c.mapping(base.mapping.global_batch, base.mapping)})
    est = Estimator(p, elaborate(p.hardware, devices_needed=c.devices), build_workload(p.workload))
    table, key = est.layer_table(c)
    chunks = est.chunks(table, key, c.pp, c.interleave)
    need = ExpertBound(est, E).need(c, c.micro_batches(p.mapping.global_batch), chunks, ep, c.zero)
    assert need == pytest.approx(engine_result(p).peak_memory_bytes, rel=1e-9)
