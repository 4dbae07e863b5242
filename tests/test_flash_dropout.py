"""A fused attention core is a flash kernel, and FlashAttention applies the attention dropout inside it
(``plan.context.flash_fused``): a mapping that fuses attention → softmax keeps no dropout mask nor dropped
scores, as one that names the dropout in its chain, and context parallelism fused it so already."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan.context import flash_fused
from tilewright.engine.simulate import simulate
from tilewright.engine.workloads import build_workload

SPEC = GPTSpec(name="gpt", layers=2, hidden=1024, heads=16, seq_len=2048, vocab=32000)
PAIR = [["attention", "softmax"]]
TRIPLE = [["attention", "softmax", "attention_dropout"]]


def _project(fusion: list[list[str]], cp: int = 1) -> Project:
    return Project(
        name="gpt", hardware=load_system("dgx-a100"), workload=SPEC,
        mapping=Mapping(tp=1, pp=1, dp=8 // cp, cp=cp, micro_batch=1, global_batch=8, fusion=fusion),
        run=RunSettings(dtype="bf16", engine="analytic", contention=False),
    )


def test_the_graph_has_a_dropout_after_the_softmax_and_the_edges_take_it_in():
    graph = build_workload(SPEC)
    ops = graph.layer_ops(graph.block_layers[0])
    names = [op.name.split(".", 1)[-1] for op in ops]
    i = names.index("attention")
    assert names[i + 1:i + 3] == ["softmax", "attention_dropout"]
    assert flash_fused([ops], 1, frozenset()) == frozenset()  # nothing fused: no flash kernel
    pair = frozenset({("attention", "softmax")})
    assert flash_fused([ops], 1, pair) == {("attention", "softmax"), ("softmax", "attention_dropout")}
    assert flash_fused([ops], 2, frozenset()) == flash_fused([ops], 1, pair)  # the ring's kernels, the same


def test_fusing_attention_to_softmax_fuses_its_dropout_as_naming_it_does():
    unfused, pair, triple = (simulate(_project(f), series=False) for f in ([], PAIR, TRIPLE))
    assert pair.iteration_time_s == pytest.approx(triple.iteration_time_s, rel=1e-12)
    assert pair.peak_memory_bytes == pytest.approx(triple.peak_memory_bytes, rel=1e-12)
    assert pair.iteration_time_s < unfused.iteration_time_s
    # the dropout's s² mask (1 byte) and dropped scores (2 bytes) per head are no longer stored
    s, heads = SPEC.seq_len, SPEC.heads
    saved = unfused.peak_memory_bytes - pair.peak_memory_bytes
    assert saved >= SPEC.layers * heads * s * s * (1 + 2) * 0.99


def test_the_summary_says_why_hfu_is_below_mfu_under_a_causal_flash_kernel():
    """MFU counts every attention pair (PaLM, SC'21), HFU the pairs the causal kernel computes: with nothing
    re-run, a fused causal core puts HFU below MFU, and the text says why; unfused, it does not."""
    fused = simulate(_project(PAIR), series=False)
    assert fused.hfu < fused.mfu and "HFU only those the masked flash kernels compute" in fused.summary_text()
    plain = simulate(_project([]), series=False)
    assert plain.hfu >= plain.mfu and "masked flash" not in plain.summary_text()
