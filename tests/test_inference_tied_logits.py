"""Logits tied to the word embedding still read the V × h table in an inference pass: a decode step of a
GPT-2/OPT-style model streams it like any other weight (``workloads.transformer_inference``)."""

from __future__ import annotations

from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import DType, GPTSpec
from tilewright.engine.perf.device import device_model
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.workloads import build_workload
from tilewright.engine.workloads.transformer_inference import inference_graph

TIED = GPTSpec(name="gpt2-medium", layers=2, hidden=1024, heads=16, seq_len=1024, vocab=50257)
UNTIED = TIED.model_copy(update={"tie_embeddings": False})


def _logits(spec: GPTSpec, tokens: int = 1):
    graph = inference_graph(spec, tokens, 512, 1, True)
    return next(op for op in graph.ops() if op.name.endswith("logits"))


def _a100():
    dgx = load_system("dgx-a100")
    gpu = next(c for _, c in dgx.walk() if c.compute is not None)
    return device_model(gpu.compute, gpu.memories, None, DType.bf16)


def test_tied_logits_read_the_vocabulary_table_in_a_pass():
    model = next(op for op in build_workload(TIED).ops() if op.name.endswith("logits"))
    assert model.params == 0  # the model's graph keeps the weight in the embedding (counted once)
    assert _logits(TIED).params == TIED.vocab * TIED.hidden
    assert _logits(UNTIED).params == _logits(TIED).params  # the same table read, tied or not


def test_a_decode_step_streams_the_tied_table():
    dev = _a100()
    t = op_time(_logits(TIED), dev, 1, 1, False, False, 2.0)
    table_s = TIED.vocab * TIED.hidden * 2.0 / dev.dram_bandwidth
    assert t.memory_s >= table_s
    assert t.busy_s > table_s


def test_the_model_memory_counts_the_tied_table_once():
    """Only the pass graph reads the table at the logits; the model's parameters are unchanged."""
    assert build_workload(TIED).params < build_workload(UNTIED).params
    assert build_workload(UNTIED).params - build_workload(TIED).params == TIED.vocab * TIED.hidden
