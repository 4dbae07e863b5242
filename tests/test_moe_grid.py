"""A routed-expert GEMM on a grid device reads the weights of every expert its tokens reach, each expert a GEMM
of its share of the token-slots — not one expert's weights for the stacked GEMM."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import DType
from tilewright.engine.ir.common import MathFidelity
from tilewright.engine.ir.ops import MoERole
from tilewright.engine.ir.workload import LlamaSpec, MoESpec
from tilewright.engine.perf.device import device_model
from tilewright.engine.perf.formats import OpFormats
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.workloads.transformer_inference import inference_graph

MOE = LlamaSpec(
    name="tiny-moe",
    layers=2,
    hidden=1024,
    heads=16,
    ffn=2816,
    vocab=32000,
    seq_len=2048,
    moe=MoESpec(experts=8, top_k=2, expert_ffn=1408),
)


def _grid_device():
    n150 = load_system("wormhole-n150")
    chip = next(c for _, c in n150.walk() if c.compute is not None and c.compute.grid is not None)
    return device_model(chip.compute, chip.memories, None, DType.bf16)


def _expert_up(tokens: int, sequences: int):
    graph = inference_graph(MOE, tokens, tokens if tokens > 1 else 128, sequences, True)
    return next(op for op in graph.ops() if op.moe is not None and op.moe.role is MoERole.expert and op.gemm)


@pytest.mark.parametrize(("tokens", "sequences"), [(1, 1), (1, 4), (512, 1)])
def test_expert_gemm_reads_every_reached_expert_once(tokens, sequences):
    dev = _grid_device()
    op = _expert_up(tokens, sequences)
    fmt = OpFormats(DType.bf16, DType.bf16, DType.bf16, MathFidelity.HiFi2)
    t = op_time(op, dev, 1, 1, False, False, 2.0, formats=fmt)
    _m, n, k = op.gemm
    reached = op.params / (n * k)
    assert reached > 1.0
    weight_bytes = op.params * 2.0
    assert t.local_bytes >= weight_bytes * (1 - 1e-9)  # every reached expert's weights, at least once
    # reading only one expert's weights would be far below the weights the pass needs
    assert t.local_bytes > 1.5 * n * k * 2.0
