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

TT_FORMATS = {"weights": "bfp8", "activations": "bf16", "kv_cache": "bfp8"}  # tt-transformers' accuracy mode
# tt-transformers' performance mode, the one its published tables (PERF.md "Performance: this configuration uses
# bfp4 MLP FF1+FF3 for all models") are measured in: ModelOptimizations.performance over _default_settings in
# tenstorrent/tt-metal models/tt_transformers/tt/model_config.py @0039cbf0 — FF1/FF3 (mlp_gate, mlp_up) weights
# bfp4 at LoFi; FF2, WQKV, WO weights and the KV cache bfp8 at HiFi2; activations as the input (bf16).
TT_PERFORMANCE = {
    **TT_FORMATS,
    "weights_by_op": {"mlp_gate": "bfp4", "mlp_up": "bfp4"},
    "fidelity_by_op": {"mlp_gate": "LoFi", "mlp_up": "LoFi"},
}
TT_PERFORMANCE_NOTE = (
    " Precision as tt-transformers' performance mode, in which its published figures are measured (PERF.md; "
    "ModelOptimizations.performance in models/tt_transformers/tt/model_config.py): MLP FF1/FF3 (mlp_gate, "
    "mlp_up) weights bfp4 at LoFi, FF2 and attention weights bfp8 at HiFi2 (mapping.formats.*_by_op); "
    "tt-transformers' prefill attention at HiFi4 is not distinguished (attention runs at HiFi2)."
)
# tt-transformers on a Galaxy (TG) shards every weight over both mesh axes: QKV and FF1/FF3 all-reduce along
# the 4-chip axis (cluster_axis=1), WO and FF2 along the 8-chip axis (cluster_axis=0): tt-metal
# tech_reports/LLMs/llms.md §2.5 "2D Device Mesh (TG)", models/tt_transformers/tt/attention.py and mlp.py.
GALAXY_TP_NOTE = (
    " 2-D tensor parallelism as tt-transformers on a Galaxy (tech_reports/LLMs/llms.md, 2D Device Mesh): "
    "mapping.tp_axes 4 × 8, QKV, FF1 and FF3 all-reduce 1/8 of their output along each 4-chip column, WO and FF2 "
    "1/4 along each 8-chip row."
)

# Tenstorrent's own Llama 3.1 70B decode on a Galaxy, models/demos/llama3_70b_galaxy (the README row, 72.5 t/s/u at
# batch 32), differs from tt-transformers in what its runtime does around the model's ops; the per-op list of its
# published decode targets (models/demos/llama3_70b_galaxy/tests/decoder_perf_targets_6u.json @02cd859b, read by
# test_decoder_device_perf.py: 16 device programs per layer) says which. The weights are prefetched
# (mapping.spatial.weights, ``WeightPlacement.prefetched``); its device programs per model op replace the
# system's tt-transformers counts (``Compute.programs_by_op``), each further one at the system's program_s_by_op.
GALAXY_DEMO_PROGRAMS = {
    "attention": 3, "softmax": 0, "qkv": 1, "out_proj": 1, "mlp_gate": 0, "activation": 1, "mlp_down": 1,
    "residual*": 0, "sample_update": 8,
}
# How llama3_70b_galaxy's decode combines its partial sums and in what format it sends them (tenstorrent/tt-metal
# models/demos/llama3_70b_galaxy/tt/llama_attention.py, llama_mlp.py, llama_ccl.py): QKV (bf16 matmul output)
# reduce-scattered into heads, the attention output (bf16) all-gathered; FF1, FF3 (bfloat8_b) reduce-scattered,
# their SiLU product (ttnn.mul dtype bfloat8_b) all-gathered once; WO and FF2 (bfloat8_b) all-reduced.
GALAXY_DEMO_COLLECTIVES = {"out_proj": "bfp8", "mlp_*": "bfp8", "activation": "bfp8"}
GALAXY_DEMO_CCL_NOTE = (
    " Collectives as models/demos/llama3_70b_galaxy runs them (tt/llama_attention.py, llama_mlp.py, llama_ccl.py): "
    "mapping.tp_axes_collectives scatter-gather (QKV reduce-scattered into heads by llama_rs_create_heads and the "
    "attention output all-gathered by all_gather_concat; FF1 and FF3 reduce-scattered, FF1's inside the double "
    "matmul, their SiLU product all-gathered once; WO and FF2 all-reduced along the 8-chip axis), and "
    "mapping.formats.collectives_by_op bfp8 for the WO, FF1, FF3, FF2 outputs and the SiLU product (their "
    "dtype=ttnn.bfloat8_b), the QKV and attention outputs bf16."
)
GALAXY_DEMO_COMPUTE_NOTE = (
    " Project (models/demos/llama3_70b_galaxy, not tt-transformers): programs_by_op as the per-op list of its "
    "decode targets (tenstorrent/tt-metal models/demos/llama3_70b_galaxy/tests/decoder_perf_targets_6u.json "
    "@02cd859b, 16 programs per layer): attention 3 (RotaryEmbeddingLlamaFusedQK, PagedUpdateCache, "
    "ScaledDotProductAttentionDecode; the head split runs inside LlamaReduceScatterCreateHeads and the head "
    "concatenation inside AllGatherConcat, collectives), softmax 0, qkv, out_proj, activation (the SiLU-fused "
    "mul) and mlp_down 1 (no reshard: their inputs and outputs stay in the ring's L1 memory configs), mlp_gate 0 "
    "(FF1 and FF3 run as one double matmul, double_matmul_line_reduce_scatter in llama_ccl.py), residual adds 0 "
    "(no program of their own in the list: the RMSAllGather norms take the residual), the sampling tail as "
    "tt-transformers' (its model-tail targets are not modelled); each further program at program_s_by_op "
    "(attention 7.02 us: its rotary 6.23 and cache update 7.80 us at @01020348, the same mean). runtime_ccl "
    "persistent: its TT_CCL (models/demos/llama3_70b_galaxy/tt/llama_ccl.py) creates its global semaphores and "
    "double-buffered persistent intermediate buffers once per axis, so a decode collective needs no entry barrier "
    "(tech_reports/CCLs/CCL_bandwidth.md @1080d1c4, 'Per-invocation cost': the barrier's diameter round trip; the "
    "program launch and the fabric connection's open and close are still paid), and it runs one-shot collectives: "
    "all_reduce_async gathers every device's whole partial sum into a buffer of one slice per device and adds them "
    "locally (WO, FF2), llama_reduce_scatter writes each shard straight to its owner (FF3; QKV's inside "
    "llama_rs_create_heads); perf.collective_grid offers them as 'direct' beside reduce-scatter + all-gather."
)

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
            "micro-batches of 51, fp16, full recomputation, with NoC and DRAM-port contention. PALM does not "
            "check capacity: with this mapping a tile's activations (the layer inputs of the 20 micro-batches "
            "of 51 sequences in flight at stage 0, kept for full recomputation) far exceed its 2 GiB share of the "
            "die's DRAM (its weights, gradients and Adam state alone take 1.5 GiB), so the run reports out of "
            "memory, as it should."
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
    "mixtral-8x7b-dgx-h100": {
        "description": (
            "Mixtral 8x7B training on 64 DGX-H100 GPUs (8 nodes), after Megatron-LM's Mixtral example "
            "(examples/mixtral/train_mixtral_8x7b_distributed.sh): no tensor parallelism, 4 pipeline stages, "
            "expert parallel 8 inside each node (each GPU holds one of the 8 experts of its stage's layers, "
            "tokens exchanged all-to-all), data parallel 16 with the distributed optimizer (ZeRO-1), "
            "micro-batch 1, global batch 256 of 4,096-token sequences, bf16. Megatron-Core's fused (flash) "
            "attention is the fusion chain attention → softmax: one causal kernel that never writes the attention "
            "scores, stores none of them and recomputes them inside its backward; no other recomputation "
            "(the recipe sets none)."
        ),
        "system": "dgx-h100",
        "model": "mixtral-8x7b",
        "mapping": {"tp": 1, "pp": 4, "dp": 16, "ep": 8, "micro_batch": 1, "global_batch": 256, "zero": 1,
                    "fusion": [["attention", "softmax"]]},
        "run": {"dtype": "bf16"},
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
            "parallel 16, ZeRO-1, selective recomputation. Fusion as XLA does it where no tensor-parallel "
            "collective intervenes (XLA operator fusion: elementwise producers and consumers never "
            "round-trip through HBM): the residual add with the next norm, the SwiGLU gate with its "
            "activation, attention with its softmax (flash-style kernels)."
        ),
        "system": "tpu-v4-torus",
        "model": "llama2-7b",
        "mapping": {"tp": 4, "pp": 1, "dp": 16, "micro_batch": 1, "global_batch": 256, "zero": 1,
                    "recompute": "selective",
                    "fusion": [["attention", "softmax"], ["residual1", "norm2"], ["mlp_gate", "activation"]]},
        "run": {"dtype": "bf16"},
    },
    "cerebras-wse2-llama2-7b-inference": {
        "description": (
            "LLaMA-2 7B serving on a Cerebras WSE-2 the WaferLLM (OSDI'25) way: every layer runs over the whole "
            "wafer (tensor parallel 32 over 4 × 8 blocks of 26,562 PEs, pp 1), weights, KV cache and activations "
            "held in the blocks' SRAM (memory_levels), batch 1, 512-token prompt, 128 generated tokens. "
            "Collectives cross the PE mesh at 1 cycle per hop."
        ),
        "system": "cerebras-wse2-waferllm",
        "model": "llama2-7b",
        "mapping": {"tp": 32, "pp": 1, "dp": 1, "micro_batch": 1, "global_batch": 1,
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
            "LLaMA-2 7B serving on one Tenstorrent Wormhole n150 (8 × 8 Tensix cores): bfp8/bfp4 weights, bfp8 KV "
            "cache, bf16 activations, batch 8, 512-token prompts, 128 generated tokens; every op is split over "
            "the cores by the cost model (see the notes for the chosen splits). Weights DRAM-sharded "
            "(mapping.spatial.weights): decode matmuls read each bank's slice from a core next to it, as "
            "tt-transformers does. The whole batch is prefilled together (tt-transformers prefills one user "
            "at a time: its per-user TTFT is a batch-1 run)."
        ) + TT_PERFORMANCE_NOTE,
        "system": "wormhole-n150",
        "model": "llama2-7b",
        "mapping": {"tp": 1, "pp": 1, "dp": 1, "micro_batch": 1, "global_batch": 1,
                    "formats": TT_PERFORMANCE, "spatial": {"weights": "sharded"}},
        "run": {"mode": "infer", "dtype": "bf16",
                "inference": {"prompt_tokens": 512, "output_tokens": 128, "batch": 8}},
    },
    "wormhole-n300-llama3.1-8b-inference": {
        "description": (
            "Llama 3.1 8B serving on a Tenstorrent n300 (2 Wormhole chips on one board, 1 Ethernet link of "
            "12.5 GB/s per direction for user kernels): tensor parallel 2 across the chips, every op split over "
            "each chip's 8 × 8 Tensix cores; bfp8/bfp4 weights DRAM-sharded, bfp8 KV cache, bf16 activations; "
            "batch 32, 128-token prompts, 128 generated tokens, the whole batch prefilled together."
        ) + TT_PERFORMANCE_NOTE,
        "system": "wormhole-n300",
        "model": "llama3.1-8b",
        "mapping": {"tp": 2, "pp": 1, "dp": 1, "micro_batch": 1, "global_batch": 1,
                    "formats": TT_PERFORMANCE, "spatial": {"weights": "sharded"}},
        "run": {"mode": "infer", "dtype": "bf16",
                "inference": {"prompt_tokens": 128, "output_tokens": 128, "batch": 32}},
    },
    "wormhole-t3000-llama2-70b-inference": {
        "description": (
            "LLaMA-2 70B serving on a Tenstorrent T3000 (LoudBox: 8 Wormhole chips, 2 × 4 mesh over 12.5 GB/s "
            "Ethernet links): tensor parallel 8 across the chips and every op split over each chip's 8 × 8 "
            "Tensix cores (nested mapping); bfp8/bfp4 weights DRAM-sharded (6.8 GB per chip), bfp8 KV cache, bf16 "
            "activations; batch 32, 128-token prompts, 128 generated tokens, the whole batch prefilled together. "
            "Each layer's two all-reduces of a decode step carry 32 tokens × 8192 bf16 (512 KiB) and are "
            "latency-bound (program launch, ~0.7 µs per hop, handshakes: benchmarks/calibrate_ccl.py)."
        ) + TT_PERFORMANCE_NOTE,
        "system": "wormhole-t3000",
        "model": "llama2-70b",
        "mapping": {"tp": 8, "pp": 1, "dp": 1, "micro_batch": 1, "global_batch": 1,
                    "formats": TT_PERFORMANCE, "spatial": {"weights": "sharded"}},
        "run": {"mode": "infer", "dtype": "bf16",
                "inference": {"prompt_tokens": 128, "output_tokens": 128, "batch": 32}},
    },
    "wormhole-galaxy-llama3-70b-inference": {
        "description": (
            "Llama 3 70B serving on a Tenstorrent Wormhole Galaxy (32 chips, open 4 × 8 mesh, 3-4 Ethernet "
            "links per neighbour pair): tensor parallel 32 across the chips (2 query heads per chip, the 8 KV "
            "heads replicated 4 times) and every op split over each chip's 8 × 8 Tensix cores; bfp8/bfp4 weights "
            "DRAM-sharded (~1.8 GB per chip), bfp8 KV cache, bf16 activations; batch 32, 128-token prompts, "
            "128 generated tokens, the whole batch prefilled together. Runtime as Tenstorrent's "
            "models/demos/llama3_70b_galaxy (its README row is at batch 32): in a decode step a DRAM prefetcher on "
            "12 reader cores streams each layer's weights into L1 ring buffers of 24 matmul cores behind the other "
            "ops (mapping.spatial.weights prefetched: tt/prefetcher_common.py, num_reader_cores 12, "
            "num_global_cb_receivers 2), and its device programs per op are those of its published decode "
            "targets (the chip's compute comment); tt-transformers on a Galaxy (PERF.md's batch-1 row) is the "
            "system's compute with DRAM-sharded weights (benchmarks/calibrate_tiled_llm.py)."
        ) + GALAXY_TP_NOTE + GALAXY_DEMO_CCL_NOTE + TT_PERFORMANCE_NOTE,
        "system": "wormhole-galaxy",
        "model": "llama3-70b",
        "mapping": {"tp": 32, "tp_axes": [4, 8], "tp_axes_collectives": "scatter-gather", "pp": 1, "dp": 1,
                    "micro_batch": 1, "global_batch": 1,
                    "formats": {**TT_PERFORMANCE, "collectives_by_op": GALAXY_DEMO_COLLECTIVES},
                    "spatial": {"weights": "prefetched"}},
        "compute": {"programs_by_op": GALAXY_DEMO_PROGRAMS, "runtime_ccl": "persistent"},
        "compute_note": GALAXY_DEMO_COMPUTE_NOTE,
        "run": {"mode": "infer", "dtype": "bf16",
                "inference": {"prompt_tokens": 128, "output_tokens": 128, "batch": 32}},
    },
    "blackhole-galaxy-llama3-70b-inference": {
        "description": (
            "Llama 3 70B serving on a Tenstorrent Blackhole Galaxy (32 Blackhole chips, 4 × 8 mesh, 3-4 "
            "Ethernet links per neighbour pair at the 25 GB/s the CCL report measured): tensor parallel 32 across "
            "the chips and every op split over each chip's 11 × 10 Tensix cores; bfp8/bfp4 weights DRAM-sharded, "
            "bfp8 KV cache, bf16 activations; batch 32, 128-token prompts, 128 generated tokens, the whole batch "
            "prefilled together."
        ) + GALAXY_TP_NOTE + TT_PERFORMANCE_NOTE,
        "system": "blackhole-galaxy",
        "model": "llama3-70b",
        "mapping": {"tp": 32, "tp_axes": [4, 8], "pp": 1, "dp": 1, "micro_batch": 1, "global_batch": 1,
                    "formats": TT_PERFORMANCE, "spatial": {"weights": "sharded"}},
        "run": {"mode": "infer", "dtype": "bf16",
                "inference": {"prompt_tokens": 128, "output_tokens": 128, "batch": 32}},
    },
    "blackhole-p150-llama3.1-8b-inference": {
        "description": (
            "Llama 3.1 8B serving on one Tenstorrent Blackhole p150 (11 × 10 Tensix cores at 1.35 GHz, 32 GB "
            "GDDR6 at 512 GB/s): every op split over the cores by the cost model; bfp8/bfp4 weights DRAM-sharded, "
            "bfp8 KV cache, bf16 activations; batch 32, 128-token prompts, 128 generated tokens, the whole batch "
            "prefilled together."
        ) + TT_PERFORMANCE_NOTE,
        "system": "blackhole-p150",
        "model": "llama3.1-8b",
        "mapping": {"tp": 1, "pp": 1, "dp": 1, "micro_batch": 1, "global_batch": 1,
                    "formats": TT_PERFORMANCE, "spatial": {"weights": "sharded"}},
        "run": {"mode": "infer", "dtype": "bf16",
                "inference": {"prompt_tokens": 128, "output_tokens": 128, "batch": 32}},
    },
}


def _with_compute(node: dict[str, Any], update: dict[str, Any], note: str) -> dict[str, Any]:
    """A system's component tree with ``update`` over the fields of every compute in it and ``note`` added to
    each compute's comment: what a project's runtime does differently on the same chips."""
    out = dict(node)
    if out.get("compute") is not None:
        out["compute"] = {**out["compute"], **update, "comment": out["compute"].get("comment", "") + note}
    out["children"] = [_with_compute(c, update, note) for c in out.get("children", [])]
    return out


def build(name: str) -> Project:
    spec = PROJECTS[name]
    hardware = load_system(spec["system"]).model_dump(mode="json")
    if spec.get("compute"):
        hardware = _with_compute(hardware, spec["compute"], spec.get("compute_note", ""))
    project = Project.model_validate(
        {
            "name": name,
            "description": spec["description"],
            "hardware": hardware,
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
