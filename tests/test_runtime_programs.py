"""Device programs a grid runtime runs around a model op (``Compute.programs_by_op``): each pays the chip's
fixed per-op cost, the first of them is the one the grid cost already charges, and an op another program
does (softmax inside SDPA) pays none."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import DType, LlamaSpec
from tilewright.engine.ir.common import MathFidelity
from tilewright.engine.perf.device import device_model
from tilewright.engine.perf.formats import OpFormats
from tilewright.engine.perf.op_cost import op_time, runtime_programs
from tilewright.engine.workloads.transformer_inference import inference_graph

SPEC = LlamaSpec(name="tiny", layers=2, hidden=1024, heads=16, ffn=2816, vocab=32000, seq_len=2048)
FMT = OpFormats(DType.bf16, DType.bf16, DType.bf16, MathFidelity.HiFi2)


def _chip(programs: dict[str, int] | None):
    n150 = load_system("wormhole-n150")
    chip = next(c for _, c in n150.walk() if c.compute is not None and c.compute.grid is not None)
    # counts without the preset's measured program durations: every extra program at fixed_op_s (the figures'
    # own tests: test_program_durations.py)
    update = {"programs_by_op": programs, "program_s_by_op": {}}
    compute = chip.compute if programs is None else chip.compute.model_copy(update=update)
    return device_model(compute, chip.memories, None, DType.bf16)


def _decode_ops(fused_attention: bool = True):
    graph = inference_graph(SPEC, 1, 128, 1, fused_attention)
    return {op.name.split(".", 1)[-1]: op for op in graph.layer_ops(1)}


@pytest.mark.parametrize("name", ["qkv", "attention", "norm1", "mlp_down"])
def test_each_program_beyond_the_first_adds_one_fixed_cost(name):
    op = _decode_ops()[name]
    plain, more = _chip({}), _chip({name: 5, "other*": 9})
    fixed = plain.compute.fixed_op_s
    assert fixed > 0
    t1 = op_time(op, plain, 1, 1, False, False, 2.0, formats=FMT).busy_s
    t5 = op_time(op, more, 1, 1, False, False, 2.0, formats=FMT).busy_s
    assert t5 - t1 == pytest.approx(4 * fixed, rel=1e-9)


def test_an_op_done_inside_another_program_pays_no_fixed_cost_and_never_less_than_nothing():
    op = _decode_ops(fused_attention=False)["softmax"]  # materialised attention: softmax is an op of its own
    none = _chip({"softmax": 0})
    t0 = op_time(op, none, 1, 1, False, False, 2.0, formats=FMT)
    t1 = op_time(op, _chip({}), 1, 1, False, False, 2.0, formats=FMT)
    assert t0.overhead_s >= 0.0
    assert t1.busy_s - t0.busy_s == pytest.approx(min(t1.overhead_s, none.compute.fixed_op_s), rel=1e-9)


def test_first_matching_glob_wins_and_unnamed_ops_run_one_program():
    compute = _chip({"mlp_*": 3, "mlp_down": 7}).compute
    ops = _decode_ops()
    assert runtime_programs(ops["mlp_down"], compute) == 3
    assert runtime_programs(ops["residual1"], compute) == 1


def test_the_tenstorrent_presets_count_tt_transformers_programs_per_llama_block():
    """attention.py forward_decode and mlp.py forward (see the preset's comment): 22 programs per block,
    where the fused-attention decode graph has 11 ops."""
    compute = _chip(None).compute
    block = _decode_ops()
    assert len(block) == 11
    assert sum(runtime_programs(op, compute) for op in block.values()) == 22
