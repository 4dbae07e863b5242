"""Check the dgx-h100 preset against NVIDIA's published Megatron-Core pre-training throughput on DGX-H100.

Sources:

- NVIDIA-NeMo/Megatron-Bridge, ``docs/performance-summary.md`` and ``docs/performance-summary-archive.md``
  (NeMo containers 25.09, 25.11, 26.02; "System: DGX-H100" tables and the 26.02 per-model tables' DGX-H100
  rows), run with the Megatron-Bridge performance recipes (``scripts/performance/configs/*/
  *workload_base_configs.py``): ``release`` is the container, the recipe ``BRIDGE_H100``.
- NVIDIA/Megatron-LM pull request #5728 ("docs: refresh Qwen3 MoE recipe performance", open when read): the
  median model TFLOP/s/GPU over steady-state iterations 30–45 of Megatron-LM's own H100 MoE recipes
  (``examples/moe_recipes/qwen3_30b/h100/{bf16,fp8}_32GPU_TP1PP1EP8.yaml``,
  ``qwen3_235b/h100/bf16_256GPU_TP2PP8EP32.yaml``), measured with the matching Megatron-Bridge recipes
  (Megatron-Bridge #4469) and, the PR says, the same GPU count, parallelism, batch sizes, sequence length,
  precision and CUDA-graph mode as the YAML; the README values it replaces (pull request #5289, "curated
  benchmark sources") are the older measurements of the same recipes. ``release`` "MLM#5728" / "MLM#5289",
  the recipe on the row (``Published.recipe``). The PR publishes TFLOP/s only: tokens/s per GPU is that over
  NVIDIA's FLOPs per token (``nv_gflop_per_token``). Its other H100 recipes (DeepSeek-V3 bf16 and fp8) have
  no published number (#5289 left their cells empty "pending accuracy review").

DGX-H100: 8 H100 SXM per node on NVLink4/NVSwitch, 8 × 400 Gb/s InfiniBand per node. NVIDIA notes that MoE
runs force-balance the router ("we force-balance the token distribution among experts"; the Megatron-LM
recipes set ``moe_router_force_load_balancing``) and are dropless unless the row says token-drop. These are
measurements to *check* the model against, never to fit a constant to: nothing here feeds back into a preset.

Each distinct configuration is one row (identical configurations published by several releases are merged;
the row compares with the newest release and lists the others). Mappings follow the published columns and
the row's recipe (``Recipe``):

- sequence parallelism on whenever tp > 1 (``WorkloadBaseConfig.__post_init__``; the Megatron-LM recipes set
  ``sequence_parallel``);
- Megatron-Core's fused (flash) attention: selective recomputation of the attention core (it stores what a
  flash kernel stores) plus the fusion chain attention → softmax (one kernel, no score traffic), as
  ``presets/projects/tpu-v4-llama2-7b.json`` expresses it; a recipe without recomputation runs 'none', which
  with the fused chain stores and runs the same;
- the distributed optimizer (ZeRO-1) with overlapped gradient reduction and parameter gather, or FSDP (ZeRO-3
  with prefetch)
  where the FSDP column says so; fp8 rows run ``--dtype fp8`` (weighted GEMMs on the fp8 units, with
  the quantization passes of ``Recipe.fp8_recipe``, the scaling the run used: ``mapping.formats.fp8_scaling``);
- MoE: experts balanced (``expert_imbalance`` 1); the recipe's expert tensor parallelism, token dispatcher,
  expert all-to-all overlap, selective recomputation modules, CUDA-graph scopes and fused router; a token-drop
  row routes at Megatron-Bridge's capacity factor 1 padded to capacity (``TOKEN_DROP_CAPACITY``).

Force-balanced routing (``moe_router_force_load_balancing``, Megatron-Core ``router.py`` ``RandomSTE``) replaces
the router's logits by fresh normal samples every forward: each token's top-k is a uniformly random k-subset of
the experts, so a rank's expert load is a sum over thousands of tokens with a percent-level spread (Qwen3-30B, mbs
2 × 4096 tokens, top-8 of 128 experts, 16 per rank: each token puts a hypergeometric 1 ± 0.91 slots on a rank,
8,192 ± 82 token-slots per rank, the busiest of 8 ranks ~1.4 % above the mean). No published figure gives an
imbalance for these runs; ``expert_imbalance`` stays 1 (a trained router's imbalance is not what these
benchmarks measure).

Qwen3-30B-A3B on H100, dropless against token-drop: NVIDIA's own tracker (NVIDIA-NeMo/Megatron-Bridge issue
#1998, "[Regression] Low QWEN3 30B B200 and H100 performance with dropless", open when read: "2X slower
performance in QWEN3 30B on H100 and B200 with the dropless schedule compared to the token-drop schedule ...
the perf in 25.11 is 2X slower than 25.09") calls the 25.11/26.02 dropless rows a software regression, not a
recipe setting: same recipe (pp 2, ep 8, alltoall dispatcher, no recomputation, no CUDA graphs on H100), the
25.09 run with ``apply_moe_token_drop`` (capacity factor 1, padded: no host sync on the token counts). Its root
cause is not published, so nothing here models it; the 25.09 token-drop row is the one to judge the MoE costing
by.

Where a published mapping or recipe setting cannot be expressed, the nearest one that can is run and the row
says what was changed (``Row.gaps``): that list is the point of this check as much as the errors are.

Model FLOPs: NVIDIA's "Model TFLOP/s/GPU" counts causal attention (Llama-3 8B at s 8192: 51.5 GFLOP per
token = 6·N + 6·l·s·h), so tokens/s per GPU is the quantity compared; ``nv_tflops`` re-expresses our
tokens/s in NVIDIA's FLOPs per token (their TFLOP/s over their tokens/s), ``our_tflops`` is our own count.

Usage: python benchmarks/calibrate_nemo_h100.py [--engine analytic|event] [--only SUBSTRING] [--whatif | --detail]
  --only    rows whose label or release contains it (e.g. "MLM" for the Megatron-LM recipes)
  --whatif  attention-costing proxies per row (WHATIF); --detail  per-op times of one block per row
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from dataclasses import dataclass, field

from tilewright.engine.io.presets import load_model, load_system
from tilewright.engine.ir import Mapping, Project, RunSettings
from tilewright.engine.ir.mapping import Fp8Scaling, TensorFormats
from tilewright.engine.ir.workload import LlamaSpec, MLASpec, MoESpec, TransformerDims
from tilewright.engine.simulate import simulate

FLASH = [["attention", "softmax"]]  # Megatron-Core's fused attention: one kernel, scores stay on chip
# A token-drop row's expert capacity (MoESpec.capacity_factor): the performance scripts' use_tokendrop applies
# Megatron-Bridge's apply_moe_token_drop (src/megatron/bridge/training/utils/moe_token_drop.py) at its defaults,
# moe_expert_capacity_factor=1.0 and moe_pad_expert_input_to_capacity=True (scripts/performance/utils/helpers.py
# set_user_overrides; the 25.09 Qwen3 configs call it whenever use_tokendrop is unset): every expert computes
# exactly its capacity, and the all-to-all dispatcher's drop_and_pad path never copies the counts to the host.
TOKEN_DROP_CAPACITY = 1.0


@dataclass(frozen=True)
class Recipe:
    """What a run's recipe sets beyond the published columns, as the mapping fields it becomes. One recipe per
    run: NVIDIA's two sources run the same model with different recipes (Megatron-Bridge's Qwen3-235B uses the
    all-to-all dispatcher and no recomputation, Megatron-LM's HybridEP, ``moe_act``/``layernorm``
    recomputation and CUDA graphs), so the recipe belongs to the row, not to the model."""

    recompute: str = "selective"  # mapping.recompute: 'selective' (the flash core: nothing extra), 'full', 'none'
    recompute_layers: int | None = None  # recompute_method block, recompute_num_layers N (recompute 'full')
    recompute_modules: tuple[str, ...] | None = None  # recompute_modules (selective); None: the attention core
    expert_tp: int | None = None  # expert_tensor_parallel_size; None: tp (ours and Megatron's default)
    overlap_ep_comm: bool = False  # moe_a2a_overlap / overlap_moe_expert_parallel_comm
    delay_wgrad: bool = False  # delay_wgrad_compute (mapping.delay_wgrad_compute), with overlap_ep_comm only
    dispatcher: str = "alltoall"  # mapping.ep_dispatcher: 'alltoall', or 'deepep' for the flex dispatcher
    mtp_layers: int = 0  # mtp_num_layers: multi-token-prediction depths trained beside the model
    tp_overlap: str | None = None  # tp_comm_overlap's userbuffers configuration (mapping.overlap_tp_comm)
    tp_overlap_rs: str = "pipeline"  # its proj_fprop/fc2_fprop method (mapping.tp_overlap_reduce_scatter)
    cuda_graph_scope: tuple[str, ...] | None = None  # cuda_graph_impl transformer_engine, cuda_graph_scope
    fp8_recipe: str = "current"  # Transformer Engine scaling of an fp8 run: 'current' (FP8-CS) or 'blockwise'
    fp8_param_gather: bool = True  # an fp8 run's fp8_param_gather (mapping.fp8_param_gather); every recipe here
    router_fusion: bool = False  # moe_router_fusion (mapping.moe_router_fusion: TE's fused router, plan.moe_host)
    optimizer_moments: str = "fp32"  # precision-aware optimizer: exp_avg(_sq)_dtype (mapping.optimizer_moments)
    optimizer_master: str = "fp32"  # precision-aware optimizer: the master copy (mapping.optimizer_master)
    param_gather_with_step: bool = False  # overlap_param_gather_with_optimizer_step whenever dp, pp and vp are all > 1
    micro_batch: int | None = None  # micro_batch_size, where a published MBS cell contradicts the recipe (a gap)
    grad_reduce_in_fp32: bool = False  # ddp.grad_reduce_in_fp32 (mapping.grad_reduce_in_fp32): see BRIDGE_H100
    dp_overlap: bool = True  # overlap_grad_reduce and overlap_param_gather (the distributed optimizer's overlaps)
    unmodelled: tuple[str, ...] = ()  # recipe settings the mapping cannot express (reported as gaps)


FP8_SCALING = {"current": Fp8Scaling.tensor, "blockwise": Fp8Scaling.block}  # Recipe.fp8_recipe → ours
# Transformer layers each fp8 recipe keeps in bf16 (first, last: mapping.formats.bf16_first_layers / _last_layers).
# - 'current': Megatron-Bridge's bf16_with_fp8_current_scaling_mixed (src/megatron/bridge/training/
#   mixed_precision.py, the FP8-CS recipe of every Bridge fp8 row) sets first_last_layers_bf16=True,
#   num_layers_at_start_in_bf16=1, num_layers_at_end_in_bf16=1 ("The baseline current scaling recipe uses BF16
#   in the first and last Transformer layers"); Megatron-Core's fp8_utils.is_first_last_bf16_layer then runs
#   those two decoder layers outside fp8 autocast (an MTP depth is not one of them).
# - 'blockwise': Megatron-LM's examples/moe_recipes/qwen3_30b/h100/fp8_32GPU_TP1PP1EP8.yaml sets fp8_recipe
#   blockwise, fp8_format e4m3, fp8_param_gather and no first_last_layers_bf16: every layer fp8.
FP8_BF16_LAYERS = {"current": (1, 1), "blockwise": (0, 0)}


# Megatron-Bridge's H100 recipes per model (scripts/performance/configs/*/*workload_base_configs.py), the
# recipe of every NeMo row:
# - recompute_modules: GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V1 (and V2) in gpt_oss_workload_base_configs.py,
#   DEEPSEEK_V3_PRETRAIN_CONFIG_H100_V1 in deepseek_workload_base_configs.py. The Qwen3 recipes set
#   recompute_granularity None (set_qwen3_common_configs) and the Llama ones the core only or full layers:
#   with the flash core, selective 'core_attn' re-runs and stores nothing.
# - recompute_layers: Llama 3 8B's recompute_granularity full, recompute_method block, recompute_num_layers 5.
# - expert_tp: BASE_QWEN3_235B_A22B_CONFIG and BASE_DEEPSEEK_V3_CONFIG set expert_tensor_parallel_size=1, whole
#   experts per rank with the ep ranks folded over tp × dp. The tp-1 MoE rows (Qwen3-30B, gpt-oss) have no
#   tensor split to choose.
# - overlap_ep_comm: moe_a2a_overlap=True in QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_*.
# - dispatcher: DeepSeek-V3's H100 recipe uses the flex dispatcher with the HybridEP backend
#   (moe_flex_dispatcher_backend="hybridep": each token once per destination node, forwarded over NVLink,
#   ``plan.experts`` "deepep"); the others Megatron-Core's all-to-all dispatcher.
# - mtp_layers: DeepSeek-V3's recipe sets mtp_num_layers 1, on the last pipeline stage beside the loss (the 'm'
#   of its pp_layout). ``model_spec`` stays the main model, which the model cards count; the project adds the
#   depths (``TransformerDims.mtp_layers``).
# - tp_overlap: the llama recipes map H100 fp8 to userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192 (70B) and
#   userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192 (405B) (COMM_OVERLAP_CONFIG_MAP).
# - tp_overlap_rs: both fp8 configurations (src/megatron/bridge/training/comm_overlap.py) overlap the forward
#   reduce-scatters after proj and fc2 (proj_fprop, fc2_fprop) by ring exchange, RingExchangeOverlapCfg(num_sm=1,
#   set_sm_margin=True); only their bf16 twins pipeline them (PipelineOverlapCfg, 4 splits on 24 and 16 / 8 SMs).
#   Transformer Engine runs the GEMM beside each ring in tp row chunks (plan.tp_overlap, "Split GEMMs").
# - fp8_param_gather: the H100 fp8 rows run FP8-CS, Megatron-Bridge's bf16_with_fp8_current_scaling_mixed
#   (src/megatron/bridge/training/mixed_precision.py), which sets fp8_param_gather=True.
# - micro_batch: GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V1 (and V2, and the earlier unversioned
#   GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16) keep BASE_GPT_OSS_120B_CONFIG's micro_batch_size=1; only the
#   B200/GB200/GB300 variants set 4. The 25.11 DGX-H100 table prints MBS 4 with GA 2 for gpt-oss, which its own
#   columns contradict (gbs 512 over pp 4 on 64 GPUs is dp 16: GA 8 at mbs 4, 32 at mbs 1) and which are the
#   DGX-B200 row's cells of that table (64 GPUs, gbs 512, MBS 4, pp 1, ep 8, GA 2); at mbs 4 a stage holds
#   ~95 GiB on an 80 GB H100 (4 in-flight micro-batches of 9 layers at ~1.6 GiB each beside 37 GiB of model
#   state). The 26.02 table prints MBS 1 for the same recipe at gbs 1280.
# - router_fusion: every MoE performance script sets cfg.model.moe_router_fusion = True in its common settings
#   (set_qwen3_common_configs in scripts/performance/configs/qwen3/qwen3_llm_pretrain.py and the 25.09
#   set_qwen3_30b_a3b_specific_overrides before it, set_gpt_oss_common_configs, set_deepseek_v3_common_configs),
#   beside moe_router_force_load_balancing = True.
# - grad_reduce_in_fp32 False (Recipe's default): every model's performance script sets
#   cfg.mixed_precision.grad_reduce_in_fp32 = False and cfg.ddp.grad_reduce_in_fp32 = False in its common
#   settings (set_llama3_common_configs, set_llama31_common_configs, set_gpt_oss_common_configs,
#   set_qwen3_common_configs, set_deepseek_v3_common_configs in scripts/performance/configs/*/*_llm_pretrain.py):
#   bf16 gradient buffers, reduced in bf16. The Megatron-LM recipes keep Megatron-LM's fp32 buffer (its
#   arguments force --accumulate-allreduce-grads-in-fp32 with bf16): their Recipe sets True.
# - param_gather_with_step (every recipe) and optimizer_master "remainders" (the bf16 recipe, gpt-oss): the
#   performance scripts' last override, applied after the model's config (so no model config can undo it), sets
#   ``if compute_dtype == "bf16": recipe.optimizer.use_precision_aware_optimizer = True`` and ``if dp > 1 and pp > 1
#   and vp > 1: recipe.optimizer.overlap_param_gather_with_optimizer_step = True`` (and the same on comm_overlap),
#   dp = num_gpus / (tp·pp·cp). Read in each layout NVIDIA-NeMo/Megatron-Bridge scripts/performance/ has had (the
#   release tags are not resolvable here; which release ran which layout follows the config names the rows cite,
#   and every layout carries both lines): 25.09, utils/helpers.py get_model_recipe_with_user_overrides and
#   set_user_overrides (commit 013284246bc0, configs named by GPU count: DEEPSEEK_V3_H100_1024GPUS_FP8_CS_PARALLEL_
#   CONFIG; the older run_script.py of the per-model *_llm_pretrain.py configs has the same two lines); 25.11,
#   utils/helpers.py set_post_overrides (the *_workload_base_configs.py layout before config variants); 26.02,
#   utils/overrides.py set_post_overrides with config_variant "v1" (commit 00538e26aa54, the _V1/_V2 configs). Later
#   copies add ``and
#   recipe.optimizer.optimizer == "adam"`` (true here) and leave fp8_mx/nvfp4 out of the gather overlap (no H100
#   row's precision); the flat perf recipes (Megatron-Bridge #2803, mid-2026) drop the override, after 26.02. fp8
#   rows (compute_dtype fp8_cs) keep the plain distributed optimizer (optimizer_master "fp32"). The precision-aware
#   optimizer's dtypes are Megatron-Core's OptimizerConfig defaults: neither the library recipes' optimizer
#   (distributed_fused_adam_with_cosine_annealing) nor gpt_oss_120b_pretrain_config_h100 sets one, and the newer
#   gpt_oss_120b_pretrain_config sets main_grads/main_params/exp_avg/exp_avg_sq all fp32 explicitly (beside
#   use_precision_aware_optimizer False, which the override flips). So fp32 moments (optimizer_moments "fp32"),
#   fp32 main gradients (the optimizer's copy; the ddp buffer stays bf16, grad_reduce_in_fp32 False) and an fp32
#   master kept, with store_param_remainders True (OptimizerConfig's default), as the bf16 parameters plus 16-bit
#   remainders: optimizer_master "remainders".
BRIDGE_H100 = {
    "llama3-8b": Recipe(recompute="full", recompute_layers=5, param_gather_with_step=True),
    "llama3-70b": Recipe(tp_overlap="userbuffers_fp8_h100_h8192_tp4", tp_overlap_rs="ring_exchange",
                         param_gather_with_step=True),
    "llama3.1-405b": Recipe(tp_overlap="userbuffers_fp8_h100_h16384_tp8_cp2", tp_overlap_rs="ring_exchange",
                            param_gather_with_step=True),
    "gpt-oss-120b": Recipe(recompute_modules=("layernorm", "moe_act"), micro_batch=1, router_fusion=True,
                           optimizer_master="remainders", param_gather_with_step=True),
    "qwen3-30b-a3b": Recipe(router_fusion=True, param_gather_with_step=True),
    "qwen3-235b-a22b": Recipe(expert_tp=1, overlap_ep_comm=True, router_fusion=True, param_gather_with_step=True),
    "deepseek-v3": Recipe(recompute_modules=("mla_up_proj", "mlp"), expert_tp=1, dispatcher="deepep",
                          mtp_layers=1, router_fusion=True, param_gather_with_step=True),
}


@dataclass(frozen=True)
class Published:
    """One DGX-H100 measurement (columns as published) and the recipe it ran."""

    model: str
    release: str  # NeMo container ("26.02") or Megatron-LM pull request ("MLM#5728")
    gpus: int
    precision: str  # "fp8" or "bf16" (the fp8 scaling: recipe.fp8_recipe)
    gbs: int
    mbs: int
    seq: int
    fsdp: bool
    tp: int
    pp: int
    cp: int
    vp: int
    ep: int
    tokens_per_gpu: float
    tflops_per_gpu: float
    token_drop: bool = False
    note: str = ""
    recipe: Recipe | None = None  # None: Megatron-Bridge's H100 recipe of the model (BRIDGE_H100)

    @property
    def run_recipe(self) -> Recipe:
        return self.recipe if self.recipe is not None else BRIDGE_H100[self.model]

    @property
    def config(self) -> tuple:
        """What identifies a configuration (the release and measurements do not)."""
        return (self.model, self.gpus, self.precision, self.gbs, self.mbs, self.seq, self.fsdp, self.tp, self.pp,
                self.cp, self.vp, self.ep, self.token_drop, self.run_recipe)


# Qwen3-30B-A3B on H100 (module docstring): the dropless rows are the regression NVIDIA tracks as
# Megatron-Bridge issue #1998; the VP column of the 25.09 and 25.11 tables (24: one layer per virtual stage)
# is not what the recipe files of those releases set (QWEN3_30B_A3B_H100_FP8_CS_PARALLEL_CONFIG and the 25.09
# qwen3_30b_a3b_h100_16gpus_fp8_config: pp 2, vp 12, mbs 2), which the rows keep as printed.
_QWEN30B_NOTE = "dropless: 2x below the 25.09 token-drop run, a regression per Megatron-Bridge issue #1998"
_QWEN30B_VP = "the tables print VP 24; the recipe files of 25.09/25.11 set vp 12 (rows run as printed)"

# Megatron-Bridge's DGX-H100 rows, newest release first within a configuration. 25.09's table has no precision
# column; its footnote gives the H100 fp8 block-scaling variant in parentheses, so those rows are the FP8-CS runs.
_BRIDGE_ROWS = (
    Published("llama3-8b", "25.11", 8, "fp8", 128, 1, 8192, True, 1, 1, 1, 1, 1, 14451, 744),
    Published("llama3-8b", "25.09", 8, "fp8", 128, 1, 8192, True, 1, 1, 1, 1, 1, 14079, 725),
    Published("llama3-70b", "26.02", 64, "fp8", 256, 1, 8192, False, 4, 8, 1, 5, 1, 1621, 728),
    Published("llama3-70b", "25.11", 64, "fp8", 128, 1, 8192, False, 4, 8, 1, 5, 1, 1602, 719),
    Published("llama3-70b", "25.09", 64, "fp8", 128, 1, 8192, False, 4, 8, 1, 5, 1, 1619, 727),
    Published("llama3.1-405b", "26.02", 1024, "fp8", 1536, 1, 8192, False, 8, 8, 2, 8, 1, 311, 784),
    Published("llama3.1-405b", "25.11", 1024, "fp8", 512, 1, 8192, False, 8, 8, 2, 8, 1, 292, 737),
    Published("llama3.1-405b", "25.09", 1024, "fp8", 512, 1, 8192, False, 8, 8, 2, 8, 1, 302, 763),
    Published("gpt-oss-120b", "26.02", 64, "bf16", 1280, 1, 4096, False, 1, 4, 1, 1, 8, 5993, 163),
    Published("gpt-oss-120b", "25.11", 64, "bf16", 512, 4, 4096, False, 1, 4, 1, 1, 8, 5630, 153),
    Published("qwen3-30b-a3b", "26.02", 16, "fp8", 1024, 1, 4096, False, 1, 2, 1, 12, 8, 5113, 118,
              note="another copy of the 26.02 table prints 2557 tokens/s with the same 118 TFLOP/s: 5113 "
                   "keeps NVIDIA's FLOPs per token of the other Qwen3-30B rows (~23 GFLOP), 2557 does not; "
                   + _QWEN30B_NOTE),
    Published("qwen3-30b-a3b", "25.11", 16, "fp8", 512, 2, 4096, False, 1, 2, 1, 24, 8, 5275, 121,
              note=f"{_QWEN30B_NOTE}; {_QWEN30B_VP}"),
    Published("qwen3-30b-a3b", "25.09", 16, "fp8", 512, 2, 4096, False, 1, 2, 1, 24, 8, 10494, 241,
              token_drop=True, note=_QWEN30B_VP),
    Published("qwen3-235b-a22b", "26.02", 256, "fp8", 8192, 1, 4096, False, 2, 8, 1, 4, 32, 1633, 242),
    Published("qwen3-235b-a22b", "25.11", 256, "fp8", 2048, 1, 4096, False, 2, 8, 1, 4, 32, 1575, 233,
              note="the current performance-summary.md drops this row's GBS cell; the archive copy has 2048"),
    Published("qwen3-235b-a22b", "25.09", 256, "fp8", 2048, 1, 4096, False, 2, 8, 1, 4, 32, 1204, 178,
              token_drop=True),
    Published("deepseek-v3", "25.09", 1024, "fp8", 8192, 1, 4096, False, 2, 8, 1, 4, 64, 1297, 338),
)


def nv_gflop_per_token(model: str, seq: int) -> float:
    """NVIDIA's model GFLOP per token of ``model`` at sequence length ``seq``: their TFLOP/s over their tokens/s,
    pooled over the Megatron-Bridge rows of that model and length (each TFLOP/s is printed to three digits, a
    ±0.4 % rounding on one row; pooling shrinks it). Megatron-Bridge computes the same FLOPs for the runs behind
    pull request #5728 (measured through its recipes), so this converts that PR's TFLOP/s to tokens/s."""
    same = [p for p in _BRIDGE_ROWS if p.model == model and p.seq == seq]
    if not same:
        raise KeyError(f"no Megatron-Bridge row of {model} at s {seq} gives NVIDIA's FLOPs per token")
    return sum(p.tflops_per_gpu for p in same) / sum(p.tokens_per_gpu for p in same) * 1e3


def from_tflops(model: str, release: str, gpus: int, precision: str, gbs: int, mbs: int, seq: int, tp: int,
                pp: int, vp: int, ep: int, tflops: float, recipe: Recipe, note: str) -> Published:
    """A measurement published as model TFLOP/s/GPU only (no cp, no FSDP, dropless), with the tokens/s per GPU
    it stands for in NVIDIA's FLOPs per token (``nv_gflop_per_token``)."""
    tokens = tflops * 1e3 / nv_gflop_per_token(model, seq)
    return Published(model, release, gpus, precision, gbs, mbs, seq, False, tp, pp, 1, vp, ep, tokens, tflops,
                     note=note, recipe=recipe)


# Megatron-LM's H100 MoE recipes (NVIDIA/Megatron-LM examples/moe_recipes/*/h100/*.yaml, ARGS), as read:
# - Qwen3-30B-A3B bf16_32GPU_TP1PP1EP8.yaml: seq_length 4096, tp 1, pp 1, ep 8, expert_tensor_parallel_size 1,
#   mbs 1, gbs 256, bf16; moe_token_dispatcher_type flex with moe_flex_dispatcher_backend hybridep (HybridEP,
#   ``plan.experts`` 'deepep': with ep 8 inside one node it is NVLink only), moe_permute_fusion,
#   moe_router_fusion, moe_router_dtype fp32, moe_grouped_gemm; no recompute_granularity, no CUDA graphs; the
#   distributed optimizer with overlap_grad_reduce and overlap_param_gather; cross_entropy_loss_fusion (te).
# - Qwen3-30B-A3B fp8_32GPU_TP1PP1EP8.yaml: the same, plus fp8_recipe blockwise (e4m3), fp8_param_gather, the
#   precision-aware optimizer (bf16 Adam moments, fp32 main parameters and gradients), and cuda_graph_impl
#   transformer_engine with cuda_graph_scope attn, moe_router, moe_preprocess. Its use_precision_aware_optimizer with
#   main_params_dtype fp32, main_grads_dtype fp32, exp_avg(_sq)_dtype bf16: moments bf16; the master stays a whole
#   fp32 copy (optimizer_master "fp32": with blockwise fp8 and fp8_param_gather Megatron-Core keeps the master itself,
#   and fp8 parameters are not the bf16 ones remainders complete).
# - Qwen3-235B-A22B bf16_256GPU_TP2PP8EP32.yaml: seq_length 4096, tp 2, pp 8, ep 32, expert_tensor_parallel_size
#   1, num_layers_per_virtual_pipeline_stage 3 with account_for_embedding/loss_in_pipeline_split (94 + 2 units
#   in 32 chunks of 3: vp 4, ``chunk_layers``), mbs 1, gbs 2048, bf16; HybridEP with permute and router
#   fusion; overlap_moe_expert_parallel_comm with delay_wgrad_compute; recompute_granularity selective,
#   recompute_modules moe_act layernorm; cuda_graph_impl transformer_engine, cuda_graph_scope moe_router
#   moe_preprocess; NVTE_FWD/BWD_LAYERNORM_SM_MARGIN 24; use_distributed_optimizer without overlap_grad_reduce
#   or overlap_param_gather (the 30B YAMLs set both; this one sets neither: Recipe.dp_overlap False), and
#   log_num_zeros_in_grad / log_params_norm (per-iteration host work, not modelled).
# None of the three sets overlap_param_gather_with_optimizer_step (Megatron-LM turns it on only by that flag, which
# the 235B run, dp 16 × pp 8 × vp 4, could take), and only the fp8 one the precision-aware optimizer: the bf16 runs
# keep Megatron-Core's plain distributed optimizer (fp32 moments and master). Read at NVIDIA/Megatron-LM
# 256f60650736 (bf16 YAMLs) and 59bbfaf318b5 (fp8 YAML).
# Settings every one of them shares that the mapping cannot express (gaps of each row):
_MLM_COMMON = (
    "HybridEP's host work charged as the all-to-all dispatcher's (plan.moe_host counts that dispatcher)",
)
MLM_QWEN3_30B_BF16 = Recipe(recompute="none", expert_tp=1, dispatcher="deepep", router_fusion=True,
                            unmodelled=_MLM_COMMON, grad_reduce_in_fp32=True)
MLM_QWEN3_30B_FP8 = Recipe(
    recompute="none", expert_tp=1, dispatcher="deepep", cuda_graph_scope=("attn", "moe_router", "moe_preprocess"),
    fp8_recipe="blockwise", router_fusion=True, optimizer_moments="bf16", unmodelled=_MLM_COMMON,
    grad_reduce_in_fp32=True,
)
MLM_QWEN3_235B_BF16 = Recipe(
    recompute_modules=("moe_act", "layernorm"), expert_tp=1, overlap_ep_comm=True, delay_wgrad=True,
    dispatcher="deepep", cuda_graph_scope=("moe_router", "moe_preprocess"), router_fusion=True,
    grad_reduce_in_fp32=True, dp_overlap=False, unmodelled=(*_MLM_COMMON,
        "NVTE_FWD/BWD_LAYERNORM_SM_MARGIN 24 (norm kernels leave 24 SMs to communication): not modelled",
        "log_num_zeros_in_grad and log_params_norm every iteration (host syncs and norm passes): not modelled"),
)
_MLM_NOTE = "Megatron-LM H100 recipe; TFLOP/s published, tokens/s = TFLOP/s over NVIDIA's FLOPs per token"
_MLM_OLD = "README value #5728 replaced (#5289: 'curated benchmark sources'), same recipe"
_MLM_ROWS = (
    from_tflops("qwen3-30b-a3b", "MLM#5728", 32, "bf16", 256, 1, 4096, 1, 1, 1, 8, 240.5, MLM_QWEN3_30B_BF16,
                _MLM_NOTE),
    from_tflops("qwen3-30b-a3b", "MLM#5289", 32, "bf16", 256, 1, 4096, 1, 1, 1, 8, 234.1, MLM_QWEN3_30B_BF16,
                _MLM_OLD),
    from_tflops("qwen3-30b-a3b", "MLM#5728", 32, "fp8", 256, 1, 4096, 1, 1, 1, 8, 242.9, MLM_QWEN3_30B_FP8,
                _MLM_NOTE),
    from_tflops("qwen3-30b-a3b", "MLM#5289", 32, "fp8", 256, 1, 4096, 1, 1, 1, 8, 232.4, MLM_QWEN3_30B_FP8,
                _MLM_OLD),
    from_tflops("qwen3-235b-a22b", "MLM#5728", 256, "bf16", 2048, 1, 4096, 2, 8, 4, 32, 302.0,
                MLM_QWEN3_235B_BF16, _MLM_NOTE),
    from_tflops("qwen3-235b-a22b", "MLM#5289", 256, "bf16", 2048, 1, 4096, 2, 8, 4, 32, 214.3,
                MLM_QWEN3_235B_BF16, _MLM_OLD),
)
_ROWS = _BRIDGE_ROWS + _MLM_ROWS

def model_spec(name: str, seq: int) -> TransformerDims:
    """The model at the published sequence length: our presets where they exist, else the Hugging Face
    config.json architecture (source in each comment)."""
    if name == "llama3-8b":
        # Llama 3 8B and 3.1 8B share every dimension (meta-llama/Meta-Llama-3-8B and Llama-3.1-8B config.json).
        spec = load_model("llama3.1-8b")
    elif name == "llama3-70b":
        spec = load_model("llama3-70b")
    elif name == "llama3.1-405b":
        spec = LlamaSpec(
            name=name, layers=126, hidden=16384, heads=128, kv_heads=8, ffn=53248, vocab=128256,
            comment="meta-llama/Llama-3.1-405B config.json: hidden 16384, 126 layers, 128 heads, 8 KV heads, "
                    "intermediate 53248, vocabulary 128,256, untied; 405,853,388,800 parameters.",
        )
    elif name == "gpt-oss-120b":
        spec = LlamaSpec(
            name=name, layers=36, hidden=2880, heads=64, kv_heads=8, head_dim=64, ffn=2880, vocab=201088,
            qkv_bias=True, out_bias=True, mlp_bias=True, sliding_window=128, sliding_window_layers="even",
            attention_sinks=True, moe=MoESpec(experts=128, top_k=4, expert_ffn=2880, router_bias=True),
            comment="openai/gpt-oss-120b config.json: hidden 2880, 36 layers, 64 heads of 64, 8 KV heads, "
                    "vocabulary 201,088, untied; attention with biases, 128-token sliding window on even "
                    "layers (layer_types alternate sliding/full); every block MoE: 128 SwiGLU experts of width "
                    "2880 with biases, top-4, router with bias; attention sinks (GptOssAttention.sinks, one learned "
                    "logit per head: 64 parameters per layer, no work). Model card (arXiv 2508.10925): 116.83 B "
                    "parameters, 5.13 B active (tilewright import-hf of the config gives the same spec).",
        )
    elif name == "qwen3-30b-a3b":
        spec = LlamaSpec(
            name=name, layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128, ffn=6144, vocab=151936,
            qk_norm=True, moe=MoESpec(experts=128, top_k=8, expert_ffn=768),
            comment="Qwen/Qwen3-30B-A3B config.json: hidden 2048, 48 layers, 32 heads of 128, 4 KV heads, "
                    "vocabulary 151,936, untied; every block MoE (decoder_sparse_step 1, no mlp_only_layers): "
                    "128 experts of width 768 (moe_intermediate_size), top-8, no shared expert. Model card: "
                    "30.5 B parameters, 3.3 B activated. QK-norm (Qwen3Attention q_norm, k_norm: 2 × 128 gains per "
                    "layer, an RMSNorm over each query and key head).",
        )
    elif name == "qwen3-235b-a22b":
        spec = LlamaSpec(
            name=name, layers=94, hidden=4096, heads=64, kv_heads=4, head_dim=128, ffn=12288, vocab=151936,
            qk_norm=True, moe=MoESpec(experts=128, top_k=8, expert_ffn=1536),
            comment="Qwen/Qwen3-235B-A22B config.json: hidden 4096, 94 layers, 64 heads of 128, 4 KV heads, "
                    "vocabulary 151,936, untied; every block MoE: 128 experts of width 1536, top-8, no shared "
                    "expert; QK-norm (2 × 128 gains per layer). Model card: 235 B parameters, 22 B activated.",
        )
    elif name == "deepseek-v3":
        spec = LlamaSpec(
            name=name, layers=61, hidden=7168, heads=128, ffn=18432, vocab=129280,
            mla=MLASpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                        v_head_dim=128),
            moe=MoESpec(experts=256, top_k=8, expert_ffn=2048, shared_experts=1, first_dense_layers=3,
                        router_bias=True, max_nodes_per_token=4),
            comment="deepseek-ai/DeepSeek-V3 config.json: hidden 7168, 61 layers, 128 heads, MLA (q_lora_rank "
                    "1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v 128), dense intermediate 18432 in the "
                    "first 3 blocks, then 256 routed experts of 2048 (top-8) + 1 shared, noaux_tc router bias; "
                    "vocabulary 129,280, untied. DeepSeek-V3 report (arXiv 2412.19437): 671 B parameters, 37 B "
                    "activated; the multi-token-prediction module (11.5 B unique, 14 B with its copies of the "
                    "embedding and head) is added by project_for (Recipe.mtp_layers). Node-limited routing: "
                    "topk_group 4 of n_group 8 (each token to at most 4 nodes).",
        )
    else:
        raise KeyError(name)
    return spec.model_copy(update={"seq_len": seq, "name": name})


# Model-card parameter counts (billions) and how many digits the card quotes them to: (total, active, active
# excludes the input embedding). gpt-oss counts active parameters without the embedding table (5.13 B =
# ours 5.71 B − 0.58 B of word embedding); Qwen and DeepSeek count it.
MODEL_CARD = {
    "llama3-8b": (8.03, 8.03, False),
    "llama3-70b": (70.6, 70.6, False),
    "llama3.1-405b": (405.0, 405.0, False),
    "gpt-oss-120b": (116.83, 5.13, True),
    "qwen3-30b-a3b": (30.5, 3.3, False),
    "qwen3-235b-a22b": (235.0, 22.0, False),
    "deepseek-v3": (671.0, 37.0, False),
}


@dataclass
class Row:
    """A distinct configuration, the measurements published for it and the mapping we can run."""

    pub: Published  # the newest release's row
    others: list[Published] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)

    @property
    def moe(self) -> bool:
        return self.pub.ep > 1

    @property
    def label(self) -> str:
        p = self.pub
        drop = " drop" if p.token_drop else ""
        return f"{p.model}{drop} {p.gpus}g {p.precision} gbs{p.gbs}"


def rows() -> list[Row]:
    """Distinct configurations in publication order, identical ones merged (newest first)."""
    by: dict[tuple, Row] = {}
    for pub in _ROWS:
        if pub.config in by:
            by[pub.config].others.append(pub)
        else:
            by[pub.config] = Row(pub)
    return list(by.values())


def _largest_divisor(n: int, limit: int, also: int) -> int:
    return max(d for d in range(1, limit + 1) if n % d == 0 and also % d == 0)


def chunk_layers(model: str, layers: int, pp: int, vp: int) -> list[int]:
    """Transformer layers of each virtual stage under Megatron's interleaved layout (``mapping.pipeline_layers``),
    for the models whose layers pp × vp does not divide. DeepSeek-V3 on H100 gives it (pp_layout
    "Et|(tt|)*30mL": virtual stage 0 embedding + 1 layer, 30 of 2 layers, the last MTP + loss; the MTP depth
    rides with the head, outside the layout's count); the others count the embedding and the loss as one layer
    each (Megatron's account_for_embedding/loss_in_pipeline_split: Megatron-LM's Qwen3-235B H100 recipe sets
    both with 3 units per virtual stage; Megatron-Bridge's library recipes the performance scripts start from set
    both too, llama31_405b_pretrain_config in src/megatron/bridge/recipes/llama/llama3.py and
    qwen3_235b_a22b_pretrain_config in recipes/qwen/qwen3_moe.py, and the scripts leave them), so every chunk
    holds equal units."""
    if model == "deepseek-v3":
        chunks = [1] + [2] * 30 + [0]
    else:
        per, extra = divmod(layers + 2, pp * vp)
        if extra:
            raise ValueError(f"{model}: {layers} layers + 2 do not split into {pp * vp} chunks")
        chunks = [per] * (pp * vp)
        chunks[0] -= 1
        chunks[-1] -= 1
    assert sum(chunks) == layers and len(chunks) == pp * vp, (model, chunks)
    return chunks


def project_for(row: Row, engine: str = "analytic") -> Project:
    """The nearest expressible project; fills ``row.gaps`` with what differs from the published run."""
    p, r = row.pub, row.pub.run_recipe
    spec = model_spec(p.model, p.seq)
    gaps: list[str] = []
    dp = p.gpus // (p.tp * p.pp * p.cp)
    ep = p.ep
    etp = (r.expert_tp or p.tp) if ep > 1 and p.tp > 1 else None  # None: tp (ours and Megatron's)
    if ep > 1 and (p.tp * dp) % (ep * (etp or p.tp)):
        experts = spec.moe.experts if spec.moe else 1
        ep = _largest_divisor(dp, dp, experts)
        gaps.append(f"ep {p.ep} × expert tp {etp or p.tp} does not fold over tp×dp ({p.tp}×{dp}): run at ep {ep}")
    layout = None
    if p.vp > 1 and spec.layers % (p.pp * p.vp):  # Megatron's uneven interleaved layout
        layout = chunk_layers(p.model, spec.layers, p.pp, p.vp)
    if p.token_drop and spec.moe is not None:  # drop-and-pad at capacity 1: balanced by construction, no host sync
        spec = spec.model_copy(update={"moe": spec.moe.model_copy(update={"capacity_factor": TOKEN_DROP_CAPACITY})})
    mbs = r.micro_batch or p.mbs
    if mbs != p.mbs:
        gaps.append(f"published MBS {p.mbs} contradicts the recipe's micro_batch_size {mbs} (and the row's own GA): "
                    f"run at mbs {mbs}")
    # the fp8 rows' scaling recipe (mapping.formats.fp8_scaling: perf.op_cost's quantization kernels)
    # and the layers it keeps in bf16 (``FP8_BF16_LAYERS``: perf.formats' edge layers)
    first, last = FP8_BF16_LAYERS[r.fp8_recipe]
    formats = (TensorFormats(fp8_scaling=FP8_SCALING[r.fp8_recipe], bf16_first_layers=first, bf16_last_layers=last)
               if p.precision == "fp8" else TensorFormats())
    gaps.extend(r.unmodelled)
    if r.mtp_layers:
        spec = spec.model_copy(update={"mtp_layers": r.mtp_layers})
    row.gaps = gaps
    mapping = Mapping(
        tp=p.tp, pp=p.pp, dp=dp, cp=p.cp, ep=ep, expert_tp=etp, sequence_parallel=p.tp > 1, interleave=p.vp,
        pipeline_layers=layout, micro_batch=mbs, global_batch=p.gbs, fusion=FLASH,
        recompute=r.recompute, recompute_layers=r.recompute_layers,
        recompute_modules=list(r.recompute_modules) if r.recompute_modules is not None else None,
        cuda_graph_scope=list(r.cuda_graph_scope) if r.cuda_graph_scope is not None else None,
        fused_cross_entropy=True,  # cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="te" in every recipe
        overlap_tp_comm=r.tp_overlap is not None and p.tp > 1,  # tp_comm_overlap with the recipe's userbuffers
        tp_overlap_reduce_scatter=r.tp_overlap_rs,
        # the distributed optimizer with overlap_grad_reduce and overlap_param_gather: Megatron-Bridge's
        # CommOverlapConfig._get_optimizer_overlap_cfgs sets both whenever dp > 1 with the distributed optimizer
        # (src/megatron/bridge/training/comm_overlap.py), the Megatron-LM recipes as their YAMLs say (above); FSDP
        # prefetches (fsdp sets overlap_param_gather itself)
        zero=0 if p.fsdp else 1, fsdp=p.fsdp, overlap_grad_reduce=r.dp_overlap, overlap_param_gather=r.dp_overlap,
        fp8_param_gather=p.precision == "fp8" and r.fp8_param_gather,  # fp8 weights only, gathered in fp8
        overlap_ep_comm=r.overlap_ep_comm, delay_wgrad_compute=r.delay_wgrad, ep_dispatcher=r.dispatcher,
        formats=formats,
        moe_router_fusion=r.router_fusion, optimizer_moments=r.optimizer_moments,
        optimizer_master=r.optimizer_master, grad_reduce_in_fp32=r.grad_reduce_in_fp32,
        # the scripts' rule (BRIDGE_H100) whenever dp, pp and vp are all > 1; an FSDP run (ZeRO-3) has no post-step
        # gather to overlap (plan.checks), and no FSDP row is pipelined
        overlap_param_gather_with_optimizer_step=(r.param_gather_with_step and not p.fsdp
                                                  and dp > 1 and p.pp > 1 and p.vp > 1),
    )
    return Project(name=row.label, hardware=load_system("dgx-h100"), workload=spec, mapping=mapping,
                   run=RunSettings(dtype=p.precision, engine=engine))


@dataclass
class Outcome:
    row: Row
    tokens_per_gpu: float
    our_tflops: float
    breakdown: dict[str, float]
    oom: bool
    wall_s: float

    @property
    def error(self) -> float:
        return self.tokens_per_gpu / self.row.pub.tokens_per_gpu - 1

    @property
    def nv_tflops(self) -> float:
        """Our tokens/s in NVIDIA's FLOPs per token (their TFLOP/s over their tokens/s)."""
        p = self.row.pub
        return self.tokens_per_gpu * p.tflops_per_gpu / p.tokens_per_gpu


def evaluate(row: Row, engine: str = "analytic") -> Outcome:
    project = project_for(row, engine)
    t0 = time.perf_counter()
    res = simulate(project)
    wall = time.perf_counter() - t0
    m = res.metrics_json()
    per_gpu = m["tokens_per_s"] / res.devices
    tflops = res.model_flops_per_iteration / res.iteration_time_s / res.devices / 1e12
    return Outcome(row, per_gpu, tflops, m["time_breakdown_s"], res.oom is not None, wall)


def summary(outcomes: list[Outcome]) -> dict[str, float]:
    """Mean |error| of tokens/s per GPU by family (dense/MoE) and precision (bf16/fp8), and overall."""
    groups: dict[str, list[float]] = defaultdict(list)
    for o in outcomes:
        groups["all"].append(abs(o.error))
        groups["moe" if o.row.moe else "dense"].append(abs(o.error))
        groups[o.row.pub.precision].append(abs(o.error))
    return {k: sum(v) / len(v) for k, v in groups.items()}


# What-if variants, cumulative, that attribute the dense rows' error to attention costing (module docstring of
# engine/plan/launch.py: fused attention keeps the scores on chip). Each is expressible in the IR today, as a
# proxy: a window of s/2 gives every query s/2 keys, the pair count of causal attention; fusing the softmax
# into out_proj keeps its a·s² output on chip as a flash kernel does; no recomputation drops the separate
# re-run of the attention core, which is costed unfused (flash recomputes the scores inside its backward).
WHATIF = ("causal pairs", "+ softmax out on chip", "+ no unfused re-run")


def whatif_projects(row: Row) -> list[Project]:
    base = project_for(row)
    spec, m = base.workload, base.mapping
    out = []
    if spec.sliding_window is None:
        spec = spec.model_copy(update={"sliding_window": spec.seq_len // 2})
    out.append(base.model_copy(update={"workload": spec}))
    m = m.model_copy(update={"fusion": [["attention", "softmax", "out_proj"]]})
    out.append(base.model_copy(update={"workload": spec, "mapping": m}))
    m = m.model_copy(update={"recompute": "none", "recompute_modules": None})
    out.append(base.model_copy(update={"workload": spec, "mapping": m}))
    return out


def whatif(selected: list[Row]) -> None:
    print(f"{'row':40} {'meas':>6} {'base':>7} " + " ".join(f"{w:>22}" for w in WHATIF))
    for row in selected:
        base = evaluate(row)
        cells = []
        for project in whatif_projects(row):
            res = simulate(project)
            per = res.samples_per_iteration * res.tokens_per_sample / res.iteration_time_s / res.devices
            cells.append(f"{per:>8.0f} ({100 * (per / row.pub.tokens_per_gpu - 1):+6.1f}%)")
        print(f"{row.label:40} {row.pub.tokens_per_gpu:>6.0f} {100 * base.error:>+6.1f}% "
              + " ".join(f"{c:>22}" for c in cells))


def detail(row: Row) -> None:
    """Per-op times of one block (a MoE block if the model has one) for one micro-batch on one device of
    stage 0, as the plan costs them one op at a time, with the expert all-to-alls; for routed-expert GEMMs
    also the time of one GEMM per local expert (Megatron-Core's grouped GEMM on Hopper runs one GEMM per
    expert) on the same efficiency curve, against ours (one GEMM over every token-slot)."""
    import tilewright.engine.plan.plan as planmod
    from tilewright.engine.ir.ops import MoERole
    from tilewright.engine.plan.passes import backward_pass, forward_pass
    from tilewright.engine.simulate import make_plan

    seen: list = []
    original = planmod.forward_pass

    def spy(layers, ctx, *a, **k):  # type: ignore[no-untyped-def]
        seen.append((layers, ctx))
        return original(layers, ctx, *a, **k)

    planmod.forward_pass = spy
    try:
        plan = make_plan(project_for(row))
    finally:
        planmod.forward_pass = original
    ctx = seen[0][1]
    blocks = [ops for layers, _ in seen for ops in layers if ops and ops[0].name.startswith("block")]
    moe = [ops for ops in blocks if any(o.moe is not None for o in ops)]
    ops = (moe or blocks)[0]
    comp = ctx.dev.compute
    print(f"{row.label}: one micro-batch ({ctx.micro_batch:g} samples) of {ops[0].name.split('.')[0]}, tp {ctx.tp}, "
          f"ep {ctx.expert_parallel}; ms")
    for op in ops:
        f, b = forward_pass([[op]], ctx), backward_pass([[op]], ctx)
        comm = [f"{kind} {plan.tp_time(0, 0, kind, n) * 1e3:.3f}" for kind, n in
                (seg.comm for seg in f.segments if seg.comm)]
        line = (f"  {op.name.split('.', 1)[1]:20} F {sum(s.busy_s for s in f.segments) * 1e3:7.3f} "
                f"B {sum(s.busy_s for s in b.segments) * 1e3:7.3f}  {', '.join(comm)}")
        if op.moe is not None and op.moe.role is MoERole.expert and op.gemm is not None:
            local = op.moe.experts / ctx.expert_parallel
            m_rows, n, k = op.gemm[0] * ctx.micro_batch, op.gemm[1] / ctx.tp, op.gemm[2]
            peak = ctx.dev.matmul_peak(ctx.formats, True)

            def gemm_s(m: float, peak: float = peak, n: float = n, k: float = k) -> float:
                flops = 2 * m * n * k / comp.shape_efficiency(m, n, k)
                return sum(ctx.dev.matmul_parts(flops, peak))

            one, per = gemm_s(m_rows), local * gemm_s(m_rows / local)
            line += f"  [fwd GEMM: one {one * 1e3:.3f}, {local:g} per-expert {per * 1e3:.3f} ×{per / one:.2f}]"
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="analytic", choices=["analytic", "event"])
    ap.add_argument("--only", default="", help="run only rows whose label or release contains this")
    ap.add_argument("--whatif", action="store_true", help="attention-costing variants (WHATIF) per row")
    ap.add_argument("--detail", action="store_true", help="per-op times of one block of each selected row")
    args = ap.parse_args()
    selected = [row for row in rows() if args.only in row.label or args.only in row.pub.release]
    if args.whatif:
        return whatif(selected)
    if args.detail:
        for row in selected:
            detail(row)
        return None
    outcomes = []
    print(f"{'row':40} {'rel':>9} {'meas tok/s':>10} {'pred':>8} {'error':>7} {'NV TF':>6} {'ourTF':>6} "
          f"{'wall':>5}  breakdown (s per iteration)")
    for row in selected:
        o = evaluate(row, args.engine)
        outcomes.append(o)
        p = row.pub
        rel = p.release + ("+" if row.others else "")
        parts = ", ".join(f"{k} {v:.2f}" for k, v in o.breakdown.items() if v > 0.005)
        print(f"{row.label:40} {rel:>9} {p.tokens_per_gpu:>10.0f} {o.tokens_per_gpu:>8.0f} {100 * o.error:>+6.1f}% "
              f"{o.nv_tflops:>6.0f} {o.our_tflops:>6.0f} {o.wall_s:>5.1f}  {parts}{'  OOM' if o.oom else ''}")
        for other in row.others:
            err = o.tokens_per_gpu / other.tokens_per_gpu - 1
            print(f"{'':40} {other.release:>9} {other.tokens_per_gpu:>10.0f} {'':>8} {100 * err:>+6.1f}%")
        for gap in row.gaps:
            print(f"{'':46}gap: {gap}")
    if outcomes:
        s = summary(outcomes)
        print("mean |error| of tokens/s/GPU: " + ", ".join(f"{k} {100 * v:.1f} % (n={n})" for k, v, n in (
            (k, s[k], sum(1 for o in outcomes if k == "all" or k == ("moe" if o.row.moe else "dense")
                          or k == o.row.pub.precision)) for k in ("all", "dense", "moe", "bf16", "fp8") if k in s)))


if __name__ == "__main__":
    main()
