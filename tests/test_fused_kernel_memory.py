"""Memory of fused kernels. A fused cross-entropy kernel (``mapping.fused_cross_entropy``: Transformer Engine's
``parallel_cross_entropy``) keeps the logits at the activations' width: it saves the bf16 logits for its
backward and computes in fp32 inside the kernel, where Megatron-LM's eager loss keeps an fp32 softmax
(``perf.memory.loss_width``). A fused attention kernel (``mapping.fusion`` attention → softmax) never holds its
s² scores in device memory, so they are no workspace either. The stored activations, the workspace and the
search's memory figure all follow."""

from __future__ import annotations

import pytest
from tilewright.engine.engines.analytic.engine import AnalyticEngine
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.ops import OpKind
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.search.parallel.estimate import Estimator
from tilewright.engine.simulate import make_plan
from tilewright.engine.workloads import build_workload

SPEC = GPTSpec(name="gpt-small", layers=2, hidden=1024, heads=16, seq_len=1024, vocab=51200)
MB = 2


def _project(tp: int, fused: bool) -> Project:
    mapping = Mapping(tp=tp, pp=1, dp=1, micro_batch=MB, global_batch=2 * MB, fused_cross_entropy=fused)
    return Project(name="ce", hardware=load_system("dgx-a100"), workload=SPEC, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine="analytic"))


@pytest.mark.parametrize("tp", [1, 4])
def test_the_fused_loss_stores_bf16_logits_instead_of_an_fp32_softmax(tp: int):
    eager, fused = make_plan(_project(tp, False)).stages[0], make_plan(_project(tp, True)).stages[0]
    logits = SPEC.seq_len * SPEC.vocab * MB / tp  # this rank's vocabulary shard of the micro-batch's logits
    assert sum(eager.act_bytes.values()) - sum(fused.act_bytes.values()) == pytest.approx((4 - 2) * logits)


def test_the_workspace_holds_the_logits_at_their_width():
    """Eager: the loss's fp32 logits are the largest buffer, (s·V + 1) · 4 B. Fused: the logits GEMM's bf16
    input and output, (s·h + s·V) · 2 B, is."""
    s, h, v = SPEC.seq_len, SPEC.hidden, SPEC.vocab
    eager, fused = make_plan(_project(1, False)).stages[0], make_plan(_project(1, True)).stages[0]
    assert eager.workspace == pytest.approx((s * v + 1) * MB * 4)
    assert fused.workspace == pytest.approx((s * h + s * v) * MB * 2)


def test_the_search_counts_the_fused_loss_as_the_engine_does():
    """The search's layer table takes the project's fused loss (its kernels and its logits' width): its memory
    is the engine's, and where its recurrence is exact (tp 2 here; the fused loss saves ~16 % of this small
    model's iteration, so an eager charge would show) its time too."""
    project = _project(1, True)
    hw = elaborate(project.hardware, devices_needed=8)
    est = Estimator(project, hw, build_workload(project.workload))
    batch = 16
    for c in (Candidate(2, 1, 4, 1), Candidate(4, 1, 2, 2)):
        m = c.micro_batches(batch)
        table, key = est.layer_table(c)
        chunks = est.chunks(table, key, c.pp, c.interleave)
        mapping = c.mapping(batch, base=project.mapping)
        assert mapping.fused_cross_entropy
        r = AnalyticEngine().run(make_plan(project.model_copy(update={"mapping": mapping})))
        assert est.memory(c, m, chunks) == pytest.approx(r.peak_memory_bytes, rel=1e-6)
        if c.tp == 2:  # timed as the search times it: each pass led by the framework's drains and broadcasts
            timed = est.timed_chunks(c, m, chunks)
            assert est.exact_time(c, m, timed) == pytest.approx(r.iteration_time_s, rel=1e-3)


def test_a_fused_attention_kernel_holds_no_scores_in_the_workspace():
    """Unfused, the softmax's a·s² input and output are the largest buffer; fused (flash), the largest is
    the biggest op outside the attention core."""
    spec = GPTSpec(name="long", layers=2, hidden=1024, heads=16, seq_len=2048, vocab=1024)
    plans = {}
    for fusion in ([], [["attention", "softmax", "attention_dropout"]]):  # GPT keeps attention dropout
        mapping = Mapping(tp=1, pp=1, dp=1, micro_batch=MB, global_batch=MB, fusion=fusion,
                          recompute="selective")
        project = Project(name="flash", hardware=load_system("dgx-a100"), workload=spec, mapping=mapping,
                          run=RunSettings(dtype="bf16", engine="analytic"))
        plans[bool(fusion)] = make_plan(project).stages[0]
    scores = spec.heads * spec.seq_len**2
    assert plans[False].workspace == pytest.approx(2 * scores * MB * 2)
    ops = build_workload(spec).ops()
    outside = [op for op in ops if op.kind is not OpKind.attention and not op.selective]
    width = {OpKind.loss: 4}
    expected = max((op.in_elems + op.out_elems) * MB * width.get(op.kind, 2) for op in outside)
    assert plans[True].workspace == pytest.approx(expected)
    assert plans[True].workspace < scores * MB * 2
