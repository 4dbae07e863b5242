"""Small projects for engine tests: quick to simulate, covering GPUs, wafers, pipelines and inference."""

from __future__ import annotations

from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, LlamaSpec, Mapping, Project, RunSettings

from tests.factories import cluster, wafer

GPT = GPTSpec(name="gpt-test", layers=8, hidden=1024, heads=16, seq_len=512, vocab=8192)


def dgx(tp: int = 2, pp: int = 2, dp: int = 2, **extra) -> Project:
    m = {"tp": tp, "pp": pp, "dp": dp, "micro_batch": 1, "global_batch": 8 * dp} | extra
    return Project(name="dgx-test", hardware=load_system("dgx-a100"), workload=GPT, mapping=Mapping(**m),
                   run=RunSettings(dtype="bf16"))


def small_cluster(**extra) -> Project:
    m = {"tp": 4, "pp": 2, "dp": 2, "micro_batch": 2, "global_batch": 16} | extra
    return Project(name="cluster", hardware=cluster(2), workload=GPT, mapping=Mapping(**m), run=RunSettings())


def small_wafer(**extra) -> Project:
    """2 × 2 dies of 4 × 4 SRAM-only tiles with edge DRAM: DRAM streams cross the NoC."""
    m = {"tp": 16, "pp": 4, "dp": 1, "micro_batch": 2, "global_batch": 8, "placement": "snake"} | extra
    return Project(name="wafer", hardware=wafer(), workload=GPT, mapping=Mapping(**m),
                   run=RunSettings(dtype="fp16"))


def llama_inference() -> Project:
    spec = LlamaSpec(name="llama-test", layers=4, hidden=1024, heads=16, kv_heads=4, ffn=2816, seq_len=1024)
    return Project(name="infer", hardware=load_system("dgx-a100"), workload=spec,
                   mapping=Mapping(tp=4, pp=1, dp=1),
                   run=RunSettings(mode="infer", inference={"prompt_tokens": 256, "output_tokens": 32, "batch": 4}))
