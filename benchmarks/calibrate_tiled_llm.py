"""LLM decode and prefill on tiled and wafer-scale machines: what the engine predicts, and why.

For a set of published-style configurations (model, machine, batch, prompt and output tokens) this prints the
engine's TTFT, TPOT and tokens/s per user, and a physics breakdown of one decode step (at the middle of the
generation) so that whoever holds measurements can compare them and see which term is off:

- ``DRAM floor``: the bytes the step reads and writes in the device's memory over its peak bandwidth (its
  SRAM bandwidth on an SRAM-only wafer) — no step can be faster;
- ``ops``: the sum of the step's op times on one device (DRAM/SRAM at the achievable bandwidth, arithmetic,
  pipeline fill, tails, and the fixed per-op cost), of which ``compute`` is the arithmetic and ``fixed`` the
  programs' fixed cost (``compute.fixed_op_s`` for each op's first program, the measured duration of each
  further one the runtime adds, ``compute.program_s_by_op``; ``compute.programs_by_op`` counts them);
- ``CCL``: the tensor-parallel collectives of the step (two all-reduces per layer with 1-D tensor parallelism,
  four on a 2-D mesh, or the Galaxy project's reduce-scatters and all-gathers, or tt-transformers' TG calls,
  ``mapping.tp_axes_collectives``;
  each in its collective format, ``mapping.formats.collectives*``; and on Tenstorrent boards the logits'
  all-gather of the on-device sampler, ``Compute.runtime_sampling``), timed by the same model as
  ``benchmarks/calibrate_ccl.py``.

Three TTFTs: ``TTFT batch`` is the engine's definition (every sequence of the batch arrives at once and the whole
batch is prefilled together); ``TTFT 1 user`` is a batch-1 prefill — how tt-transformers prefills (one user at
a time) and what its per-user TTFT means; ``TTFT 2k`` is a batch-1 prefill of a 2,048-token prompt, where
attention's share grows (on a grid chip it runs as a flash-attention kernel, ``perf.spatial_attention``, whose
K/V re-reads and softmax scale with the prompt). No measured LLM figure is in shared/reference (tiled_hardware.md
says so); where the builder publishes one for the same model, machine and batch (``SOURCES``: tt-transformers'
PERF.md, tt-metal's models/README.md, WaferLLM's abstract) it is printed beside ours with the time per token it
implies beyond our TPOT. Nothing here is fitted to those figures.

What a published t/s/u times (tt-transformers' ``simple_text_demo.py``, ``DEMO_TIMER``): each decode iteration
from before ``Generator.decode_forward_text`` to the next token on the host; the per-iteration logging, tokenizer
decode and stop checks run outside the timer, while the device is idle. The last section prints, for each
published Tenstorrent row, the bytes that iteration reads back over PCIe (``demo_readback_bytes``: at batch 1 the
on-device argmax's 32-row token tensor from each device; at batch > 1, in the demo at ``DEMO_TIMER``'s commit,
device 0's 32-row logits, sampled on the host) and their transfer time at Wormhole's measured host read rates
(``HOST_READ_BPS``) beside the preset's ``compute.runtime_step_s``, the fixed round trip each iteration pays,
and what the engine charges each decode step for the logits' read at batch > 1
(``compute.runtime_host_read_bytes_per_s``, ``plan.inference_phases.host_sampling_s``).
Then one decoder layer of the Galaxy's batch-32 step, op by op, beside the per-op device targets tt-metal publishes
for models/demos/llama3_70b_galaxy (``benchmarks/tiled_galaxy_ops.py``, with their source commit). The Galaxy
project models that runtime (prefetched weights, its programs per op, persistent collectives, reduce-scatters and
all-gathers in its matmuls' formats); its batch-1 row is tt-transformers' (``Config.tt_transformers``: the
system's programs, DRAM-interleaved weights, ttnn's generic collectives, and the collective calls its TG code
makes, ``mapping.tp_axes_collectives`` 'tt-transformers', partial sums in its ``ccl_dtype`` bfloat8_b).

Before it, tt-transformers on the Galaxy at batch 1 across the four TG rows of PERF.md's table (1B to 70B,
``TG_MODELS``): published and ours split by least squares into a time per layer and a time per step
(``layer_line``), and one layer's collective calls as tt-transformers' TG code makes them, each costed by our
model, beside legacy CCL measurements (``tiled_galaxy_ops.tt_tg_report``).

Usage: python benchmarks/calibrate_tiled_llm.py
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

from tilewright.engine.io.presets import load_project_preset, load_system
from tilewright.engine.ir.common import DType
from tilewright.engine.ir.mapping import WeightPlacement
from tilewright.engine.ir.project import Project
from tilewright.engine.perf.op_cost import programs_fixed_s, runtime_programs
from tilewright.engine.plan.inference_phases import host_sampling_s, inference_phases, sampling_tile
from tilewright.engine.plan.tensor_axes import TT_COMPOSITE_HIDDEN
from tilewright.engine.simulate import make_plan, simulate

# Published decode throughputs (tokens/s/user) of Tenstorrent's own model demos, each with its source. A check,
# never a fit: no constant of any preset is derived from them.
SOURCES = {
    "PERF": "tenstorrent/tt-metal models/tt_transformers/PERF.md @040a27c1 (tt-transformers demo, performance "
    "mode: bfp4 MLP, bfp8 attention weights, bfp8 KV cache; prefill 128 tokens, 200 decode iterations; "
    "'Performance' table at batch 1, 'Short-Context, Batch-32' table at batch 32)",
    "README": "tenstorrent/tt-metal models/README.md @02068156 (LLM table, last update Nov 3, 2025: batch 32, "
    "KV cache filled to 128 tokens, t/s/u of the first token after prefill; tt-metal release named per row)",
    "WaferLLM": "He et al., 'WaferLLM: A Wafer-Scale LLM Inference System', arXiv 2502.04563v2, abstract: 2700 "
    "tokens/s per request decoding Llama3-8B on a Cerebras WSE-2, 16-bit data (prompt and output lengths not "
    "stated there)",
}
LLAMA32_1B = (("name", "llama3.2-1b"), ("hidden", 2048), ("ffn", 8192), ("heads", 32), ("kv_heads", 8),
              ("layers", 16), ("vocab", 128256), ("tie_embeddings", True))  # HF meta-llama/Llama-3.2-1B config.json
LLAMA32_3B = (("name", "llama3.2-3b"), ("hidden", 3072), ("ffn", 8192), ("heads", 24), ("kv_heads", 8),
              ("layers", 28), ("vocab", 128256), ("tie_embeddings", True))  # HF meta-llama/Llama-3.2-3B config.json
LLAMA31_8B = "blackhole-p150-llama3.1-8b-inference"  # a preset whose workload is Llama 3.1 8B
LLAMA3_70B = "wormhole-galaxy-llama3-70b-inference"  # Llama 3 70B: Llama 3.1 70B's dimensions and vocabulary


@dataclass(frozen=True)
class Published:
    """A published decode throughput: tokens/s/user (one value or a low-high range over sources)."""

    tsu: tuple[float, ...]
    sources: tuple[str, ...]  # keys of SOURCES, with the release or table where the row says
    note: str = ""


@dataclass(frozen=True)
class Config:
    project: str  # a preset project
    batch: int
    prompt: int
    output: int
    workload_from: str = ""  # another preset project whose model to run instead
    dims: tuple[tuple[str, object], ...] = ()  # then these workload fields replaced (a model of no preset)
    published: Published | None = None
    # tt-transformers on a machine whose preset project models another runtime (the Galaxy's models/demos/
    # llama3_70b_galaxy): the system preset's compute (tt-transformers' device programs, generic collectives:
    # compute.runtime_ccl), DRAM-interleaved weights and the collective calls of its TG branches
    # (mapping.tp_axes_collectives 'tt-transformers')
    tt_transformers: bool = False


CONFIGS = (
    Config("wormhole-n150-llama2-7b-inference", 1, 128, 128),
    Config("wormhole-n150-llama2-7b-inference", 8, 512, 128),
    Config("wormhole-n150-llama2-7b-inference", 32, 128, 128),
    Config("wormhole-n150-llama2-7b-inference", 1, 128, 128, LLAMA31_8B, published=Published((28.3,), ("PERF",))),
    Config("wormhole-n150-llama2-7b-inference", 32, 128, 128, LLAMA31_8B,
           published=Published((22.3, 26.0), ("PERF", "README v0.62.0-rc35"))),
    Config("wormhole-n150-llama2-7b-inference", 1, 128, 128, LLAMA31_8B, LLAMA32_1B,
           published=Published((87.8,), ("PERF",))),
    Config("wormhole-n150-llama2-7b-inference", 1, 128, 128, LLAMA31_8B, LLAMA32_3B,
           published=Published((54.0,), ("PERF",))),
    Config("wormhole-n300-llama3.1-8b-inference", 1, 128, 128, published=Published((44.2,), ("PERF",))),
    Config("wormhole-n300-llama3.1-8b-inference", 32, 128, 128, published=Published((33.5,), ("PERF",))),
    Config("wormhole-t3000-llama2-70b-inference", 1, 128, 128),
    Config("wormhole-t3000-llama2-70b-inference", 32, 128, 128),
    Config("wormhole-t3000-llama2-70b-inference", 1, 128, 128, LLAMA3_70B,
           published=Published((16.6,), ("PERF",), "Llama 3.1 70B")),
    Config("wormhole-t3000-llama2-70b-inference", 32, 128, 128, LLAMA3_70B,
           published=Published((14.8, 15.9), ("PERF", "README v0.59.0-rc53"), "Llama 3.1 70B")),
    Config("wormhole-t3000-llama2-70b-inference", 1, 128, 128, LLAMA31_8B, published=Published((64.3,), ("PERF",))),
    Config("wormhole-galaxy-llama3-70b-inference", 1, 128, 128,
           published=Published((12.7,), ("PERF",), "Llama 3.1 70B, tt-transformers on TG"), tt_transformers=True),
    Config("wormhole-galaxy-llama3-70b-inference", 32, 128, 128,
           published=Published((72.5,), ("README v0.62.0-dev20251015",),
                               "Llama 3.1 70B, models/demos/llama3_70b_galaxy: another implementation")),
    Config("blackhole-galaxy-llama3-70b-inference", 32, 128, 128),
    Config("blackhole-p150-llama3.1-8b-inference", 1, 128, 128, published=Published((33.6,), ("PERF",))),
    Config("blackhole-p150-llama3.1-8b-inference", 32, 128, 128,
           published=Published((33.1,), ("README v0.64.0-dev20251030",), "Blackhole software 'under development'")),
    Config("cerebras-wse2-llama2-7b-inference", 1, 512, 128),
    Config("cerebras-wse2-llama2-7b-inference", 1, 2048, 128),
    Config("cerebras-wse2-llama2-7b-inference", 1, 512, 128, LLAMA31_8B, (("name", "llama3-8b"),),
           published=Published((2700.0,), ("WaferLLM",), "Llama3-8B: Llama 3.1 8B's dimensions")),
)


# PERF.md's TG rows of the same 'Performance' table (batch 1, tt-transformers on the Galaxy): four Llama models of
# 16 to 80 layers on one machine and runtime, a check of how the step grows with the layers (``layer_line``), not
# rows of the main table. Their figure first appears in models/demos/llama3/PERF.md (demo/demo.py,
# 'LlamaOptimizations' sections: the legacy ttnn.all_gather era) and is carried unchanged into every later
# models/tt_transformers/PERF.md, @040a27c1 included.
GALAXY = "wormhole-galaxy-llama3-70b-inference"
TG_MODELS = (
    Config(GALAXY, 1, 128, 128, LLAMA31_8B, LLAMA32_1B, Published((51.0,), ("PERF",)), tt_transformers=True),
    Config(GALAXY, 1, 128, 128, LLAMA31_8B, LLAMA32_3B, Published((33.5,), ("PERF",)), tt_transformers=True),
    Config(GALAXY, 1, 128, 128, LLAMA31_8B, published=Published((29.5,), ("PERF",)), tt_transformers=True),
    *(c for c in CONFIGS if c.project == GALAXY and c.tt_transformers),
)


# One decoder layer of Llama 3.1 70B on TG in the legacy-CCL era of these rows, profiled with tracy (a check beside
# the slope, never a fit): tenstorrent/tt-metal issue #15605 (2024-12-02): per layer 0.546 ms of device time and
# 0.246 ms of dispatch overhead, all-gathers 21 us and reduce-scatters 7 us of it per call; 'we still don't see this
# on e2e perf'.
PROFILED_TG_LAYER_S = (0.546e-3, 0.246e-3)  # (device, dispatch)


def layer_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """The least-squares line through (layers, seconds per step): seconds per layer and per step beside them. A
    decomposition of a set of steps of one machine and runtime, not a fit of any model constant."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return slope, my - slope * mx


def tg_model_rows() -> list[tuple[Config, Project, float, float]]:
    """Each ``TG_MODELS`` configuration: its project, our TPOT and the published time per token (s)."""
    out = []
    for c in TG_MODELS:
        p = configured(c)
        assert c.published is not None
        out.append((c, p, simulate(p, series=False).tpot_s or math.nan, 1.0 / c.published.tsu[0]))
    return out


def tg_report() -> None:
    """Print the TG rows across models, the per-layer and per-step parts of both, and the layer's collectives as
    tt-transformers calls them (``tiled_galaxy_ops.tt_tg_report``)."""
    from tiled_galaxy_ops import tt_tg_report  # a sibling script: benchmarks/ is the script's directory on sys.path

    rows = tg_model_rows()
    print("\ntt-transformers on the Galaxy at batch 1 across PERF.md's TG rows (its Performance table):")
    for _, p, ours, pub in rows:
        print(f"  {p.workload.name:12s} {p.workload.layers:3d} layers: published {seconds(pub):>8s} per token, ours "
              f"{seconds(ours):>8s}, missing {seconds(pub - ours)}")
    pub_line = layer_line([(p.workload.layers, pub) for _, p, _, pub in rows])
    our_line = layer_line([(p.workload.layers, ours) for _, p, ours, _ in rows])
    for label, (slope, icept) in (("published", pub_line), ("ours", our_line)):
        sign = "-" if icept < 0 else "+"
        print(f"  {label:9s}: {seconds(slope)} per layer {sign} {seconds(abs(icept))} per step (least squares over "
              "the rows)")
    dev, disp = PROFILED_TG_LAYER_S
    print(f"  profiled : {seconds(dev + disp)} per layer ({seconds(dev)} device + {seconds(disp)} dispatch; Llama 3.1 "
          "70B on TG, tracy, tt-metal issue #15605)")
    print("  The published step grows by about the same time per layer from a 1B to a 70B model, whose layer holds "
          "~14x the weights: a per-layer cost that does not scale with the bytes, as the fixed costs of the "
          "layer's collective calls and programs do; the rest is per step (LM head, sampling, host). Ours charges "
          "each collective call of this generic runtime its measured launch (the Galaxy's launch_s_by_kind: "
          "21 us before an all-gather, 7 us before a reduce-scatter, tt-metal issue #15605) on the calls its TG "
          "code makes (mapping.tp_axes_collectives 'tt-transformers': at 70B the 11 below, 7 all-gathers and 4 "
          "reduce-scatters per layer; below hidden 8192 8 all-gathers); not modelled: the programs around each "
          "call beyond the system's programs_by_op, and legacy CCL kernels slower than ours (the T3K check at "
          "the end).")
    tt_tg_report(rows[-1][1], rows[-1][1].workload.layers)


LONG_PROMPT = 2048  # tokens of the ``TTFT 2k`` column

# How tt-transformers' demo times a decode iteration, read from its code (a check of what the published figures
# include, never a fit): tenstorrent/tt-metal models/tt_transformers/demo/simple_text_demo.py @001cd078 (and the
# later form with token_accuracy, the same timer), models/tt_transformers/tt/generator.py @000ec121.
DEMO_TIMER = (
    "simple_text_demo.py @001cd078: profiler 'inference_decode_time_i' spans decode_forward_text (trace replay "
    "by ttnn.execute_trace(blocking=False), no host-to-device input copy when the argmax runs on the device: "
    "_easy_trace_text resets inputs only without it or when the page table changes; then read_decode_output, a "
    "blocking to_torch of each device's output) and, without on-device argmax, sample_host; logging, "
    "tokenizer.decode of every user's text and the EOS checks run after the timer stops. "
    "decode t/s/u = (iterations - 1) / sum of the timed iterations (iteration 0, which compiles and captures the "
    "trace, is excluded). argmax_on_device only at batch 1 per submesh and temperature 0. PERF.md's Speed column: "
    "the traced run ('all the performance metrics below were taken for a maximum generation of 200 tokens'), "
    "not the untraced ci-token-matching case (enable_trace False, 'Teacher forcing does not work if it is on')"
)
# Wormhole host read rates of tt-metal's EnqueueReadBuffer, 4 KB pages: ~2.5 GB/s with FD2, ~6 GB/s with FD1
# (tt-metal issue #8098, 2024; its aim was 22 GB/s, #3491). No Blackhole figure is published; the same range is
# printed for it.
HOST_READ_BPS = (2.5e9, 6e9)
TOKEN_BYTES = 4  # ttnn.argmax's output index: uint32
LOGIT_BYTES = 2  # the logits read back to the host: bf16, row major (untilized on the device)


def demo_readback_bytes(batch: int, vocab: int, devices: int, tile: int = 32) -> int:
    """Bytes the demo's timed iteration reads back over PCIe: with the argmax on the device (batch 1) a token
    per row of the tile-padded batch from each device (``concat_host_output`` reads every device tensor); at
    batch > 1 the logits of device 0 (the all-gathered vocabulary, tile-padded rows, ``process_output_decode``),
    which the host then samples."""
    rows = math.ceil(batch / tile) * tile
    if batch == 1:
        return rows * TOKEN_BYTES * devices
    return rows * math.ceil(vocab / tile) * tile * LOGIT_BYTES


def readback_rows(cases: tuple[Config, ...] = CONFIGS) -> list[tuple[Config, Project, int, float, float, float]]:
    """Each row published in tt-transformers' PERF.md (measured by the demo of ``DEMO_TIMER``; the README's
    rows come from several demos): its project, the bytes its demo iteration reads back, their transfer time at
    the slower host read rate, the preset's ``runtime_step_s`` and the engine's charge for the host's read of
    the logits (``host_sampling_s``: 0 at batch 1)."""
    out = []
    for c in cases:
        if c.published is None or "PERF" not in c.published.sources:
            continue
        p = configured(c)
        devices = p.mapping.tp
        nbytes = demo_readback_bytes(c.batch, p.workload.vocab, devices)
        compute = make_plan(p).stages[-1].dev.compute
        host = host_sampling_s(compute, p.workload.vocab, c.batch)
        out.append((c, p, nbytes, nbytes / HOST_READ_BPS[0], compute.runtime_step_s, host))
    return out


@dataclass(frozen=True)
class ShardedMatmul:
    """A published device time of one DRAM-sharded decode matmul (``ttnn.linear`` with
    ``MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig``): C[32×n] = A[32×k] · B[k×n], A width-sharded in
    L1, B width-sharded over the DRAM banks (one slice per bank, read by the worker core next to it), C in L1."""

    label: str
    k: int
    n: int
    weights: str  # B's format (A and C bf16)
    fidelity: str
    us: float  # published device time
    source: str


# Wormhole, 12 banks: tt-metal's DeepSeek-V3 decode shapes with their measured times in the test's comments
# (tenstorrent/tt-metal tests/ttnn/unit_tests/operations/matmul/test_matmul_deepseek.py @04b3c7b9,
# test_matmul_l1_dram_sharded: 'qkv_a Roofline 8.4, achieve 13.2', 'wq_b Roofline 21, achieves 23', 'wo Roofline
# 64.99, achieve 93 / Can achieve 83 with in0_block_w // 2'). A check of the op model, never a fit.
SHARDED_MATMULS = (
    ShardedMatmul("DeepSeek-V3 qkv_a", 896, 2112, "bfp8", "LoFi", 13.2, "test_matmul_deepseek.py qkv_a"),
    ShardedMatmul("DeepSeek-V3 wq_b", 1536, 3072, "bfp8", "LoFi", 23.0, "test_matmul_deepseek.py wq_b"),
    ShardedMatmul("DeepSeek-V3 wo", 16384, 896, "bfp8", "LoFi", 93.0, "test_matmul_deepseek.py wo (83 tuned)"),
)
SHARDED_MATMUL_DEVICE = "wormhole-n150-llama2-7b-inference"  # a preset project on an n150 (12 DRAM banks)


def sharded_matmul_rows() -> list[tuple[ShardedMatmul, float, float]]:
    """Each published DRAM-sharded decode matmul with the op model's time on the n150 preset and the bytes
    tt-metal reads (B with N padded to 32 × banks)."""
    from tilewright.engine.perf.spatial import device_chip, gemm_on_grid

    chip = device_chip(make_plan(load_project_preset(SHARDED_MATMUL_DEVICE)).stages[0].dev)
    out = []
    for mm in SHARDED_MATMULS:
        c = gemm_on_grid(chip, 32, mm.k, mm.n, "bf16", mm.weights, "bf16", mm.fidelity, "auto", None,
                         (False, True, False), True)
        banks = chip.dram_banks  # tt-metal pads N to a multiple of 32 × banks (pad_to_dram_banks)
        n_pad = math.ceil(mm.n / (chip.tile * banks)) * chip.tile * banks
        out.append((mm, c.seconds, mm.k * n_pad * chip.tile_bytes(mm.weights) / chip.tile**2))
    return out


def configured(
    c: Config, batch: int | None = None, output: int | None = None, prompt: int | None = None
) -> Project:
    """The preset with the configuration's batch, prompt and output tokens (and model)."""
    p = load_project_preset(c.project)
    inf = p.run.inference.model_copy(
        update={"batch": batch or c.batch, "prompt_tokens": prompt or c.prompt, "output_tokens": output or c.output}
    )
    update: dict = {"run": p.run.model_copy(update={"inference": inf})}
    if c.workload_from:
        update["workload"] = load_project_preset(c.workload_from).workload
    if c.dims:
        update["workload"] = update.get("workload", p.workload).model_copy(update=dict(c.dims))
    if c.tt_transformers:
        update["hardware"] = load_system(p.hardware.name)
        # the TG branches keep every weight interleaved in DRAM ('TODO: Fix this when TG supports DRAM sharded
        # matmuls': mlp.py's as_sharded_tensor memory_config DRAM_MEMORY_CONFIG if args.is_galaxy, attention.py's wo
        # likewise; the decode matmuls run FF1_3_TG_PROGCFG / core_grid 4 x 8 instead of the DRAM-sharded program)
        spatial = p.mapping.spatial.model_copy(update={"weights": WeightPlacement.interleaved})
        # the collectives tt-transformers' TG code calls (mapping.tp_axes_collectives 'tt-transformers',
        # plan.tensor_axes; tiled_galaxy_ops.TT_TG_CALLS lists them at 70B), each in the format it sends:
        # tt_all_reduce's partial sums in its ccl_dtype, bfloat8_b (tt/model_config.py: self.ccl_dtype =
        # ttnn.bfloat8_b; attention.py QKV, WO, mlp.py FF2 pass dtype=ccl_dtype, FF1/FF3's reduce-scatters take
        # the matmuls' bfloat8_b outputs); bfloat16 for the norms' statistics (rms_norm_pre_all_gather's output),
        # the users' gather after attention ('Running bf16 until we have SDPA output bfp8 df') and, below hidden
        # 8192, FF1/FF3's tt_all_reduce, which passes no dtype (its default ttnn.bfloat16, the input cast to it)
        by_op = {"*norm*": DType.bf16, "attention": DType.bf16, "softmax": DType.bf16}  # softmax: unfused attention
        if update.get("workload", p.workload).hidden != TT_COMPOSITE_HIDDEN:
            by_op |= {"mlp_up": DType.bf16, "mlp_gate": DType.bf16}
        formats = p.mapping.formats.model_copy(update={"collectives": DType.bfp8, "collectives_by_op": by_op})
        update["mapping"] = p.mapping.model_copy(
            update={"spatial": spatial, "formats": formats, "tp_axes_collectives": "tt-transformers"})
    return p.model_copy(update=update)


@dataclass(frozen=True)
class StepBreakdown:
    """One decode step on the busiest stage, per device (seconds, bytes)."""

    ops_s: float
    compute_s: float
    fixed_s: float
    ccl_s: float
    bytes: float
    floor_s: float
    ops: int


def decode_breakdown(project: Project) -> StepBreakdown:
    """The decode step at the middle of the generation, split into the terms of the module docstring."""
    plan = make_plan(project)
    ph = inference_phases(plan)
    ctx = sorted(ph.samples)[len(ph.samples) // 2]
    best: StepBreakdown | None = None
    for r, ps in enumerate(ph.samples[ctx]):
        dev = plan.stages[r].dev
        mem = dev.local_dram or dev.remote_dram
        peak = mem.bandwidth_bytes_per_s if mem is not None else dev.sram_bandwidth
        step_ops = list(_ops(plan, r, ph.micro_batch))
        ops = sum(runtime_programs(op, dev.compute) for op in step_ops)
        fixed = sum(programs_fixed_s(op, dev.compute) for op in step_ops)
        ccl = sum(plan.tp_time(r, 0, kind, nbytes) for kind, nbytes in (s.comm for s in ps.segments if s.comm))
        nbytes = sum(s.local_bytes for s in ps.segments)
        b = StepBreakdown(ps.busy_s, ps.compute_s, fixed, ccl, nbytes, nbytes / peak, ops)
        if best is None or b.ops_s + b.ccl_s > best.ops_s + best.ccl_s:
            best = b
    assert best is not None
    return best


def _ops(plan, r: int, sequences: int):
    """The ops of stage ``r`` in one decode step of ``sequences`` sequences (the inference graph has the same
    ops at every context; the on-device sampling tail, ``Compute.runtime_sampling``, depends on the batch)."""
    from tilewright.engine.workloads.transformer_inference import inference_graph

    dims = plan.project.workload
    graph = inference_graph(dims, 1, 2, sequences, True, sampling_tile(plan.stages[-1].dev.compute))
    st = plan.stages[r]
    for c in sorted(st.chunk_layers):
        for i in st.chunk_layers[c]:
            yield from graph.layer_ops(i)


def seconds(t: float) -> str:
    """A duration with its unit, three significant figures (ms, or µs below a millisecond)."""
    if t != t:  # NaN: no decode step
        return "—"
    if t >= 1.0:
        return f"{t:.3g} s"
    return f"{t * 1e3:.3g} ms" if t >= 1e-3 else f"{t * 1e6:.3g} µs"


def published_cells(pub: Published | None, tpot: float) -> tuple[str, str]:
    """The published t/s/u (range) and the time per token it implies beyond our TPOT (range, ms)."""
    if pub is None:
        return "—", "—"
    lo, hi = min(pub.tsu), max(pub.tsu)
    tsu = f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"
    gaps = sorted(1.0 / t - tpot for t in (lo, hi))
    unit, scale = ("ms", 1e3) if max(abs(g) for g in gaps) >= 1e-3 else ("µs", 1e6)
    gap = f"{gaps[0] * scale:+.1f} {unit}" if lo == hi else f"{gaps[0] * scale:+.1f}..{gaps[1] * scale:+.1f} {unit}"
    return tsu, gap


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    cols = (
        "machine / model",
        "batch",
        "in/out",
        "TTFT batch",
        "TTFT 1 user",
        "TTFT 2k",
        "TPOT",
        "t/s/u",
        "DRAM floor",
        "ops",
        "compute",
        "fixed",
        "CCL",
        "programs",
        "published t/s/u",
        "missing/token",
    )
    widths = (38, 5, 8, 10, 11, 9, 9, 7, 10, 9, 9, 9, 9, 8, 11, 13)
    line = " ".join(f"{c:>{w}s}" if i else f"{c:{w}s}" for i, (c, w) in enumerate(zip(cols, widths, strict=True)))
    print(line)
    print("-" * len(line))
    for c in CONFIGS:
        p = configured(c)
        r = simulate(p, series=False)
        one = simulate(configured(c, batch=1, output=1), series=False) if c.batch > 1 else r
        long = simulate(configured(c, batch=1, output=1, prompt=LONG_PROMPT), series=False)
        b = decode_breakdown(p)
        tpot = r.tpot_s or math.nan
        cells = (
            f"{p.hardware.name} / {p.workload.name}",
            str(c.batch),
            f"{c.prompt}/{c.output}",
            seconds(r.ttft_s),
            seconds(one.ttft_s),
            seconds(long.ttft_s),
            seconds(tpot),
            f"{1 / tpot:.1f}",
            seconds(b.floor_s),
            seconds(b.ops_s),
            seconds(b.compute_s),
            seconds(b.fixed_s),
            seconds(b.ccl_s),
            str(b.ops),
            *published_cells(c.published, tpot),
        )
        print(" ".join(f"{x:>{w}s}" if i else f"{x:{w}s}" for i, (x, w) in enumerate(zip(cells, widths, strict=True))))
    print("\nTTFT batch: the whole batch prefilled at once (the engine's definition); TTFT 1 user: a batch-1 prefill;")
    print(f"TTFT 2k: a batch-1 prefill of {LONG_PROMPT} prompt tokens.")
    print("decode step at the middle of the generation, busiest stage, per device: DRAM floor = bytes / peak DRAM")
    print("(SRAM) bandwidth; ops = Σ op times (includes compute, fixed and memory at the achievable bandwidth); CCL =")
    print("tensor-parallel collectives. TPOT ≈ ops + CCL (+ pipeline sends).")
    print("published: the builder's own figure (Tenstorrent's demos, WaferLLM), t/s/u (a range where sources differ);")
    print("missing/token = the published time per token minus our TPOT (positive: time the model does not account")
    print("for; ms, or µs when below one). A check, not a fit. Sources:")
    for c in CONFIGS:
        if c.published is not None:
            p = configured(c)
            note = f" ({c.published.note})" if c.published.note else ""
            print(f"  {p.hardware.name} / {p.workload.name} batch {c.batch}{note}: {', '.join(c.published.sources)}")
    for key, text in SOURCES.items():
        print(f"  {key}: {text}")
    print("\nDRAM-sharded decode matmuls (32 rows, B width-sharded over the DRAM banks), published device time vs")
    print(f"the op model on {SHARDED_MATMUL_DEVICE}'s device; GB/s of the bytes tt-metal reads (N padded to")
    print("32 x banks):")
    for mm, t, nbytes in sharded_matmul_rows():
        print(f"  {mm.label:18s} k {mm.k:6d} n {mm.n:5d} {mm.weights} {nbytes / 1e6:6.2f} MB: published "
              f"{mm.us:5.1f} us ({nbytes / mm.us / 1e3:3.0f} GB/s), model {t * 1e6:5.1f} us "
              f"({nbytes / t / 1e9:3.0f} GB/s), {t * 1e6 / mm.us - 1:+.0%}  [{mm.source}]")
    print("  source: tenstorrent/tt-metal tests/ttnn/unit_tests/operations/matmul/test_matmul_deepseek.py @04b3c7b9")
    lo, hi = HOST_READ_BPS
    print("\nWhat the published t/s/u times per decode iteration (read from tt-transformers' code):")
    print(f"  {DEMO_TIMER}.")
    print(f"Bytes that iteration reads back over PCIe and their transfer at {lo / 1e9:g}-{hi / 1e9:g} GB/s (Wormhole")
    print("host reads, tt-metal issue #8098), beside the preset's runtime_step_s (the fixed round trip: trace")
    print("launch, read command, completion) and the engine's charge per decode step for the logits' read")
    print("(runtime_host_read_bytes_per_s; 0 where the preset has no rate):")
    for c, p, nbytes, slow, step, host in readback_rows():
        what = "tokens" if c.batch == 1 else "logits"
        print(f"  {p.hardware.name + ' / ' + p.workload.name:36s} batch {c.batch:2d}: {what} {nbytes:>9,d} B in "
              f"{seconds(nbytes / hi)}-{seconds(slow)}; runtime_step_s {seconds(step)}; logits read {seconds(host)}")
    print("  at batch 1 the transfer is negligible: the host step is the runtime's fixed round trip, not the")
    print("  constant ms per token left in the missing/token column. At batch > 1 the demo samples on the host")
    print("  (@001cd078, as did the models/demos/llama3 demo @0c4b9e98 of PERF.md's first batch-32 table): the")
    print("  engine charges the logits' read, not the host's conversion and argmax over them (no published rate).")
    tg_report()
    print("\nOne decoder layer of the Galaxy's batch-32 decode step against tt-metal's published per-op decode")
    print("targets of models/demos/llama3_70b_galaxy (benchmarks/tiled_galaxy_ops.py):\n")
    from tiled_galaxy_ops import report  # a sibling script: benchmarks/ is the script's directory on sys.path

    report()


if __name__ == "__main__":
    main()
