"""The projects behind ``presets/projects/*.json``, assembled from the system and model presets.

Written once here so a project never drifts from the system it names;
``python -m tilewright.engine.cli.preset_projects`` regenerates the files and a test checks they are current.
Each exercises different hardware and parallelism; ``gpt3-dgx-a100`` is the default that ``make studio`` opens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tilewright.engine.io.atomic import dumps_stable, write_atomic
from tilewright.engine.io.presets import load_model, load_system, presets_dir
from tilewright.engine.ir.project import Project

PROJECTS: dict[str, dict[str, Any]] = {
    "gpt3-dgx-a100": {
        "description": (
            "GPT-3 175B on 64 DGX-A100 GPUs (8 nodes): tensor parallel 8 inside a node, 8 pipeline stages "
            "across nodes, interleaved 1F1B with 3 chunks, selective recomputation with sequence "
            "parallelism (the Korthikanti et al. 2023 recipe)."
        ),
        "system": "dgx-a100",
        "model": "gpt3-175b",
        "mapping": {"tp": 8, "pp": 8, "dp": 1, "micro_batch": 1, "global_batch": 64, "interleave": 3,
                    "schedule": "interleaved-1f1b", "recompute": "selective", "sequence_parallel": True},
        "run": {"dtype": "bf16"},
    },
    "megatron-18b-dgx-a100": {
        "description": (
            "Megatron-LM SC'21 Table 1, 18.4 B row: 256 A100 GPUs, tensor parallel 8, data parallel 32, "
            "global batch 1024, full recomputation; measured 135 TFLOP/s per GPU."
        ),
        "system": "dgx-a100",
        "model": "gpt-18.4b",
        "mapping": {"tp": 8, "pp": 1, "dp": 32, "micro_batch": 1, "global_batch": 1024, "recompute": "full"},
        "run": {"dtype": "fp16"},
    },
    "palm-wafer-t18b": {
        "description": (
            "PALM's wafer case: T-18B (40 layers, hidden 6144) on a 5 × 4-die wafer of 4 × 4-tile dies, "
            "20 pipeline stages of 16 tensor-parallel tiles, one die per stage as PALM maps it, 21 "
            "micro-batches of 51, fp16, full recomputation, with NoC and DRAM-port contention."
        ),
        "system": "palm-wafer",
        "model": "t-18b",
        "mapping": {"tp": 16, "pp": 20, "dp": 1, "micro_batch": 51, "global_batch": 1071, "recompute": "full",
                    "placement": "block"},
        "run": {"dtype": "fp16"},
    },
    "llama2-70b-h100-inference": {
        "description": (
            "LLaMA-2 70B serving on one DGX-H100 node: tensor parallel 8, batch 8, 2,048-token prompts, "
            "256 generated tokens; reports time to first token and time per output token."
        ),
        "system": "dgx-h100",
        "model": "llama2-70b",
        "mapping": {"tp": 8, "pp": 1, "dp": 1, "micro_batch": 1, "global_batch": 1},
        "run": {"mode": "infer", "dtype": "bf16",
                "inference": {"prompt_tokens": 2048, "output_tokens": 256, "batch": 8}},
    },
    "hypar-vgg-a": {
        "description": (
            "HyPar's setting: VGG-A on 16 HMC-based accelerators joined as an H-tree, batch 128, fp32, "
            "pure data parallelism (the baseline HyPar's layer-wise partition improves on)."
        ),
        "system": "hypar-array-16",
        "model": "vgg-a",
        "mapping": {"tp": 1, "pp": 1, "dp": 16, "micro_batch": 8, "global_batch": 128},
        "run": {"dtype": "fp32"},
    },
    "hypar-vgg-a-partitioned": {
        "description": (
            "The same VGG-A training on the 16-accelerator H-tree, partitioned layer by layer and level by "
            "level as HyPar chooses (convolutions data-parallel, fully connected layers model-parallel): "
            "compare its communication with hypar-vgg-a's pure data parallelism."
        ),
        "system": "hypar-array-16",
        "model": "vgg-a",
        "mapping": {"tp": 1, "pp": 1, "dp": 16, "micro_batch": 8, "global_batch": 128},
        "run": {"dtype": "fp32"},
        "hypar": True,
    },
    "tpu-v4-llama2-7b": {
        "description": (
            "LLaMA-2 7B training on a 4 × 4 × 4 TPU v4 slice (3-D torus): tensor parallel 4, data "
            "parallel 16, ZeRO-1, selective recomputation."
        ),
        "system": "tpu-v4-torus",
        "model": "llama2-7b",
        "mapping": {"tp": 4, "pp": 1, "dp": 16, "micro_batch": 1, "global_batch": 256, "zero": 1,
                    "recompute": "selective"},
        "run": {"dtype": "bf16"},
    },
    "cerebras-wse2-llama2-7b-inference": {
        "description": (
            "LLaMA-2 7B serving on a Cerebras WSE-2 (SRAM-only wafer, 32 × 32 blocks of 830 PEs): tensor "
            "parallel 32 across each row of blocks, one layer per pipeline stage, weights and KV cache held "
            "in the blocks' SRAM (memory_levels), batch 1, 512-token prompt, 128 generated tokens — the "
            "WaferLLM (OSDI'25) setting."
        ),
        "system": "cerebras-wse2",
        "model": "llama2-7b",
        "mapping": {"tp": 32, "pp": 32, "dp": 1, "micro_batch": 1, "global_batch": 1,
                    "memory_levels": {"weights": "sram", "kv_cache": "sram", "activations": "sram"}},
        "run": {"mode": "infer", "dtype": "fp16",
                "inference": {"prompt_tokens": 512, "output_tokens": 128, "batch": 1}},
    },
    "chiplet-bert-large": {
        "description": (
            "BERT-large on a 4 × 4 chiplet package (interposer mesh): 4 pipeline stages of 4 chiplets, "
            "block placement, 1F1B."
        ),
        "system": "chiplet-mesh",
        "model": "bert-large",
        "mapping": {"tp": 4, "pp": 4, "dp": 1, "micro_batch": 4, "global_batch": 64, "placement": "block",
                    "recompute": "full"},
        "run": {"dtype": "fp16"},
    },
    "wormhole-n150-llama2-7b-inference": {
        "description": (
            "LLaMA-2 7B serving on one Tenstorrent Wormhole n150 (8 × 8 Tensix cores): bfp8 weights and KV "
            "cache, bf16 activations, batch 8, 512-token prompts, 128 generated tokens; every op is split over "
            "the cores by the cost model (see the notes for the chosen splits)."
        ),
        "system": "wormhole-n150",
        "model": "llama2-7b",
        "mapping": {"tp": 1, "pp": 1, "dp": 1, "micro_batch": 1, "global_batch": 1,
                    "formats": {"weights": "bfp8", "activations": "bf16", "kv_cache": "bfp8"}},
        "run": {"mode": "infer", "dtype": "bf16",
                "inference": {"prompt_tokens": 512, "output_tokens": 128, "batch": 8}},
    },
}


def build(name: str) -> Project:
    spec = PROJECTS[name]
    project = Project.model_validate(
        {
            "name": name,
            "description": spec["description"],
            "hardware": load_system(spec["system"]).model_dump(mode="json"),
            "workload": load_model(spec["model"]).model_dump(mode="json"),
            "mapping": spec["mapping"],
            "run": spec["run"],
        }
    )
    if spec.get("hypar"):  # the partition HyPar's dynamic programme picks for this array and batch
        from tilewright.engine.search.hypar.partition import hypar, hypar_layers
        from tilewright.engine.search.hypar.report import apply_partition
        from tilewright.engine.workloads import build_workload

        m = project.mapping
        best = hypar(hypar_layers(build_workload(project.workload)), m.dp, m.global_batch, project.run.dtype.value)
        project = apply_partition(project, best)
    return project


def project_text(name: str) -> str:
    return dumps_stable(build(name).model_dump(mode="json"))


def write_all(folder: Path | None = None) -> list[Path]:
    out = (folder or presets_dir()) / "projects"
    paths = []
    for name in PROJECTS:
        path = out / f"{name}.json"
        write_atomic(path, project_text(name))
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in write_all():
        print(p)
