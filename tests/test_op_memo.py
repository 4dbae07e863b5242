"""The search's and the plan's memos are exact: passes built with the op-cost memo (``plan.op_memo``) equal those
built without it, one op shape is costed once, and the layer table's backward passes shared between tensor groups
(``LayerCosts._backward_passes``) equal the backward each group's own timing builds."""

from __future__ import annotations

import pytest
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.perf.device import device_model
from tilewright.engine.plan import op_memo
from tilewright.engine.plan.group_comm import tp_seconds
from tilewright.engine.plan.op_memo import OpTimes
from tilewright.engine.plan.passes import backward_pass, forward_pass
from tilewright.engine.search.comm import CommModel
from tilewright.engine.search.layer_table import LayerCosts
from tilewright.engine.search.op_settings import OpSettings
from tilewright.engine.workloads import build_workload

GPT = GPTSpec(name="gpt-memo", layers=3, hidden=2048, heads=16, seq_len=1024, vocab=32000)
TP = 2


def _setup(system: str = "wormhole-t3000", sp: bool = True):
    m = Mapping(tp=TP, pp=1, dp=1, micro_batch=1, global_batch=4, sequence_parallel=sp)
    p = Project(name="memo", hardware=load_system(system), workload=GPT, mapping=m,
                run=RunSettings(dtype="bf16", mode="train"))
    wl = build_workload(p.workload)
    hw = elaborate(p.hardware, devices_needed=8)
    d = hw.devices[0]
    dev = device_model(d.compute, d.memories, None, p.run.dtype)
    return p, wl, hw, dev, OpSettings.of(p, wl)


@pytest.mark.parametrize("system", ["wormhole-t3000", "dgx-h100"])
def test_passes_with_the_memo_equal_passes_without(system: str):
    p, wl, hw, dev, settings = _setup(system)
    layers = [wl.layer_ops(li.index) for li in wl.layers]
    plain = settings.context(dev, 2, TP, True)
    plain.regather_seconds = tp_seconds(hw, [0, 1])
    memo = settings.context(dev, 2, TP, True)
    memo.regather_seconds = plain.regather_seconds
    memo.op_times = OpTimes()
    for build in (lambda c: forward_pass(layers, c), lambda c: backward_pass(layers, c),
                  lambda c: forward_pass(layers, c, "R"), lambda c: forward_pass(layers, c, "R", only_selective=True)):
        assert build(memo) == build(plain)
        assert build(memo) == build(plain)  # the second time from the memo


def test_one_shape_is_costed_once_and_another_apart(monkeypatch):
    _p, wl, _hw, dev, settings = _setup()
    calls = []
    real = op_memo.op_time
    monkeypatch.setattr(op_memo, "op_time", lambda *a, **k: calls.append(a[0].name) or real(*a, **k))
    blocks = [wl.layer_ops(i) for i in wl.block_layers]
    assert len(blocks) == 3
    ctx = settings.context(dev, 1, TP, True)
    ctx.op_times = OpTimes()
    forward_pass([blocks[0]], ctx)
    first = len(calls)
    assert first == len(blocks[0])  # every op of one block once
    forward_pass(blocks[1:], ctx)  # the other blocks repeat its shapes under other names and layer indices
    assert len(calls) == first
    bigger = [op.model_copy(update={"flops": op.flops * 2}) for op in blocks[2]]
    forward_pass([bigger], ctx)  # a field the cost reads changes (where it is not 0): those ops costed again
    changed = sum(op.flops > 0 for op in blocks[2])
    assert 0 < changed < first
    assert len(calls) == first + changed
    other = settings.context(dev, 2, TP, True)
    other.op_times = ctx.op_times
    forward_pass([blocks[0]], other)
    assert len(calls) == 2 * first + changed  # another micro-batch: every op costed again


def test_shared_backwards_equal_each_groups_own():
    p, wl, hw, dev, settings = _setup()
    comm = CommModel(hw)
    costs = LayerCosts(wl, dev, settings, comm)
    groups = [(0, 1), (2, 3), (4, 5), (6, 7), (0, 4), (1, 5)]
    built = {}
    for g in groups:
        base = costs._base_passes(TP, 1.0, True, None, g, g)
        for k, i in costs.representative.items():
            ctx = settings.context(dev, 1.0, TP, True)  # type: ignore[arg-type]
            ctx.regather_seconds = tp_seconds(hw, list(g))
            ctx.dgrad_overlap = True
            ctx.dgrad_seconds = ctx.regather_seconds
            assert base[k][1] == backward_pass([costs.ops[i]], ctx)
            built.setdefault(id(base[k][1]), g)
    # the passes asked the groups something (the re-gather's all-gather), and the mesh's alike groups shared one
    assert all(log for entries in costs._backwards.values() for log, _ in entries)
    assert len(built) < len(groups) * len(costs.representative)
