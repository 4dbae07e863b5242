"""Transformer builders against the published formulas (Megatron SC'21, Korthikanti et al. 2022) and counts."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tilewright.engine.ir import BertSpec, GPTSpec, LayerKind, LlamaSpec, OpKind, TensorSplit
from tilewright.engine.workloads import WorkloadGraph, build_workload

# Megatron SC'21 Table 1 shapes (layers, hidden, heads) — the formulas must hold on the real models.
TABLE1 = [(24, 2304, 24), (30, 3072, 32), (36, 4096, 32), (40, 6144, 48), (48, 8192, 64), (60, 10240, 80),
          (80, 12288, 96), (96, 16384, 128), (105, 20480, 128), (128, 25600, 160)]
S, V = 2048, 51200


def gpt(layers: int, hidden: int, heads: int, seq: int = S, vocab: int = V) -> WorkloadGraph:
    return build_workload(GPTSpec(layers=layers, hidden=hidden, heads=heads, seq_len=seq, vocab=vocab))


def bytes16(graph: WorkloadGraph, layer: int, where=lambda op: True) -> float:
    """Stored activation bytes of a layer's ops at 16 bits."""
    return sum(2 * op.saved_elems + op.saved_bytes_fixed for op in graph.layer_ops(layer) if where(op))


@pytest.mark.parametrize(("layers", "h", "a"), TABLE1)
def test_gpt_params_are_megatrons_formula_plus_final_layernorm(layers: int, h: int, a: int) -> None:
    expected = 12 * layers * h * h + 13 * layers * h + V * h + S * h + 2 * h
    assert gpt(layers, h, a).params == expected


@pytest.mark.parametrize(("layers", "h", "a"), TABLE1)
def test_gpt_forward_flops_per_sample(layers: int, h: int, a: int) -> None:
    expected = 24 * S * layers * h * h + 4 * S * S * layers * h + 2 * S * h * V
    assert gpt(layers, h, a).flops_per_sample == expected


@pytest.mark.parametrize(("layers", "h", "a"), TABLE1)
def test_iteration_flops_with_full_recompute_match_megatron(layers: int, h: int, a: int) -> None:
    """Blocks run forward, recompute and backward (4 passes); embedding and logits forward and backward."""
    g, batch = gpt(layers, h, a), 512
    blocks = set(g.block_layers)
    per_sample = sum(
        (2 * op.flops if op.layer in blocks else op.flops) + op.backward_flops for op in g.ops()
    )
    expected = 96 * batch * S * layers * h * h * (1 + S / (6 * h) + V / (16 * layers * h))
    assert batch * per_sample == pytest.approx(expected, rel=1e-12)


def test_backward_is_twice_forward_for_matmuls_and_attention() -> None:
    g = gpt(4, 256, 8, seq=128, vocab=1000)
    weighted = [op for op in g.ops() if op.kind in (OpKind.matmul, OpKind.attention)]
    assert {op.name.split(".")[-1] for op in weighted} >= {"qkv", "attention", "out_proj", "logits"}
    for op in weighted:
        assert op.flops > 0
        assert op.backward_flops == 2 * op.flops, op.name  # the tied logits too, though it owns no weight


@given(
    layers=st.integers(1, 6), heads=st.sampled_from([1, 2, 4, 8]), head_dim=st.integers(1, 32),
    seq=st.integers(1, 512), vocab=st.integers(1, 5000),
)
@settings(max_examples=40, deadline=None)
def test_gpt_formulas_hold_for_any_shape(layers: int, heads: int, head_dim: int, seq: int, vocab: int) -> None:
    h = heads * head_dim
    g = gpt(layers, h, heads, seq, vocab)
    assert g.params == 12 * layers * h * h + 13 * layers * h + vocab * h + seq * h + 2 * h
    assert g.flops_per_sample == 24 * seq * layers * h * h + 4 * seq * seq * layers * h + 2 * seq * h * vocab
    for i in g.block_layers:
        assert bytes16(g, i) == 34 * seq * h + 5 * heads * seq * seq


@pytest.mark.parametrize(("layers", "h", "a"), TABLE1[:3] + [(96, 12288, 96)])
def test_stored_activations_per_block_korthikanti(layers: int, h: int, a: int) -> None:
    g = gpt(layers, h, a)
    for i in g.block_layers:
        assert bytes16(g, i) == 34 * S * h + 5 * a * S * S
        assert bytes16(g, i, lambda op: op.selective) == 5 * a * S * S
        assert bytes16(g, i, lambda op: op.split is TensorSplit.replicated) == 10 * S * h


@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_activations_under_tensor_parallelism(t: int) -> None:
    """Replicated ops stay whole, the rest divide by t: s·h·(10 + 24/t + 5·a·s/(h·t)) (Korthikanti eq. 2)."""
    layers, h, a = 4, 4096, 32
    g = gpt(layers, h, a)
    block = g.block_layers[0]
    per_rank = bytes16(g, block, lambda op: op.split is TensorSplit.replicated) + bytes16(
        g, block, lambda op: op.split is not TensorSplit.replicated
    ) / t
    assert per_rank == pytest.approx(S * h * (10 + 24 / t + 5 * a * S / (h * t)), rel=1e-12)


def test_selective_ops_carry_core_attention_recompute() -> None:
    """Selective recomputation drops the a·s² tensors and re-runs the core attention (QKᵀ, softmax, PV)."""
    layers, h, a = 2, 1024, 16
    g = gpt(layers, h, a)
    for i in g.block_layers:
        selective = [op for op in g.layer_ops(i) if op.selective]
        assert {op.kind for op in selective} == {OpKind.attention, OpKind.softmax, OpKind.dropout}
        assert sum(op.flops for op in selective) == 4 * S * S * h


def test_gpt_layer_list_and_block_op_order() -> None:
    g = gpt(3, 256, 8, seq=64, vocab=500)
    kinds = [li.kind for li in g.layers]
    assert kinds == [LayerKind.embedding] + [LayerKind.transformer] * 3 + [LayerKind.head]
    assert g.block_layers == [1, 2, 3]
    names = [op.name.split(".")[1] for op in g.layer_ops(2)]
    assert names == ["norm1", "qkv", "attention", "softmax", "attention_dropout", "out_proj", "dropout1",
                     "residual1", "norm2", "mlp_up", "activation", "mlp_down", "dropout2", "residual2"]
    splits = {op.name.split(".")[1]: op.split for op in g.layer_ops(2)}
    assert splits["qkv"] is splits["mlp_up"] is TensorSplit.column
    assert splits["out_proj"] is splits["mlp_down"] is TensorSplit.row
    assert splits["attention"] is TensorSplit.heads
    head = [op.kind for op in g.layer_ops(4)]
    assert head == [OpKind.norm, OpKind.matmul, OpKind.loss]
    assert g.tokens_per_sample == 64


def test_gemm_shapes_match_flops_with_m_per_sample() -> None:
    g = gpt(2, 512, 8, seq=256, vocab=1000)
    matmuls = [op for op in g.ops() if op.kind is OpKind.matmul]
    assert len(matmuls) == 2 * 4 + 1
    for op in matmuls:
        m, n, k = op.gemm
        assert m == 256
        assert op.flops == 2 * m * n * k


def test_graph_is_a_dag_with_residual_skips() -> None:
    g = gpt(2, 128, 4, seq=32, vocab=100)
    assert nx.is_directed_acyclic_graph(g.graph)
    assert len(g.graph) == len(g.ops())
    # The first residual add joins the block's input (the previous layer's last op) to the attention path.
    assert set(g.graph.predecessors("block1.residual1")) == {"block1.dropout1", "block0.residual2"}
    assert set(g.graph.predecessors("block0.residual2")) == {"block0.dropout2", "block0.residual1"}
    assert list(nx.topological_sort(g.graph))[0] == "embedding.word_embedding"


def test_last_op_of_every_layer_carries_the_hidden_state() -> None:
    """What a pipeline stage sends on: s·h elements per sample."""
    g = gpt(3, 256, 8, seq=128, vocab=500)
    for i in [0, *g.block_layers]:
        assert g.layer_ops(i)[-1].out_elems == 128 * 256


def test_llama2_7b_params() -> None:
    spec = LlamaSpec(layers=32, hidden=4096, heads=32, ffn=11008, vocab=32000)
    assert build_workload(spec).params == pytest.approx(6_738_415_616, rel=1e-3)


def test_llama2_70b_params() -> None:
    spec = LlamaSpec(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=32000)
    assert build_workload(spec).params == pytest.approx(68_976_648_192, rel=1e-3)


def test_llama_blocks_have_gqa_swiglu_and_no_dropout() -> None:
    h, a, kv, f, s = 1024, 16, 4, 2816, 512
    g = build_workload(LlamaSpec(layers=2, hidden=h, heads=a, kv_heads=kv, ffn=f, seq_len=s, vocab=1000))
    ops = {op.name.split(".")[1]: op for op in g.layer_ops(1)}
    assert ops["qkv"].gemm == (s, h + 2 * kv * (h // a), h)
    assert ops["mlp_gate"].split is TensorSplit.column and ops["mlp_gate"].params == h * f
    assert set(g.graph.predecessors("block0.activation")) == {"block0.mlp_up", "block0.mlp_gate"}
    assert not any(op.kind is OpKind.dropout for op in g.ops())
    # Forward FLOPs: attention 2·s·h·(h + 2·kv·h/a) + 4s²h + 2sh², SwiGLU MLP 6·s·h·f.
    per_block = 2 * s * h * (h + 2 * kv * h // a) + 4 * s * s * h + 2 * s * h * h + 6 * s * h * f
    assert sum(op.flops for op in g.layer_ops(1)) == per_block
    # RMSNorm stores in + out (4sh bytes); no dropout masks, so the replicated share is 8sh.
    assert bytes16(g, 1, lambda op: op.split is TensorSplit.replicated) == 8 * s * h


def test_llama_tied_embeddings_drop_the_output_matrix() -> None:
    dims = dict(layers=2, hidden=256, heads=4, ffn=688, vocab=32000, seq_len=128)
    untied = build_workload(LlamaSpec(**dims)).params
    tied = build_workload(LlamaSpec(**dims, tie_embeddings=True)).params
    assert untied - tied == 32000 * 256


def test_bert_large_params() -> None:
    """Devlin et al. 2019: BERT-large has 340 M parameters (~335 M counted exactly with the MLM head)."""
    g = build_workload(BertSpec(layers=24, hidden=1024, heads=16, ffn=4096, seq_len=512, vocab=30522))
    assert g.params == pytest.approx(335e6, rel=0.02)


def test_bert_is_post_norm_with_the_same_activation_accounting() -> None:
    s, h, a = 512, 1024, 16
    g = build_workload(BertSpec(layers=2, hidden=h, heads=a, seq_len=s))
    block = g.layer_ops(1)
    assert block[0].name.endswith(".qkv") and block[-1].kind is OpKind.norm
    assert bytes16(g, 1) == 34 * s * h + 5 * a * s * s
    assert bytes16(g, 1, lambda op: op.split is TensorSplit.replicated) == 10 * s * h
    assert [li.kind for li in g.layers][-1] is LayerKind.head
