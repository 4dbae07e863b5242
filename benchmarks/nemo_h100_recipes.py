"""The recipes behind the DGX-H100 rows of ``calibrate_nemo_h100``: what each run's recipe sets beyond the
published columns (``Recipe``), read from Megatron-Bridge's H100 performance recipes (``BRIDGE_H100``, every NeMo
row; ``BRIDGE_H100_2509`` where the 25.09 release's differ) and Megatron-LM's H100 MoE recipe YAMLs
(``MLM_QWEN3_*``), with the source of every setting beside it.
Kept apart from the published numbers (``nemo_h100_published``) because a recipe is what we read from code, a row
what NVIDIA measured; ``nemo_h100_run.project_for`` turns both into a mapping.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.engine.ir.mapping import Fp8Scaling
from tilewright.engine.ir.workload import LoadBalancing

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

    recompute: str = "selective"  # mapping.recompute: 'selective' (the flash core: its forward re-run), 'full', 'none'
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
    load_balancing: LoadBalancing = "aux_loss"  # moe_router_load_balancing_type (MoESpec.load_balancing: plan.moe_host)
    rope_fusion: bool = True  # apply_rope_fusion (LlamaSpec.rope_fusion; False: plan.eager_rope)
    optimizer_moments: str = "fp32"  # precision-aware optimizer: exp_avg(_sq)_dtype (mapping.optimizer_moments)
    optimizer_master: str = "fp32"  # precision-aware optimizer: the master copy (mapping.optimizer_master)
    param_gather_with_step: bool = False  # overlap_param_gather_with_optimizer_step whenever dp, pp and vp are all > 1
    micro_batch: int | None = None  # micro_batch_size, where a published MBS cell contradicts the recipe (a gap)
    grad_reduce_in_fp32: bool = False  # ddp.grad_reduce_in_fp32 (mapping.grad_reduce_in_fp32): see BRIDGE_H100
    dp_overlap: bool = True  # overlap_grad_reduce and overlap_param_gather (the distributed optimizer's overlaps)
    log_norms: bool = False  # log_params_norm and log_num_zeros_in_grad (mapping fields of the same names)
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
#   recompute_granularity None (set_qwen3_common_configs: recompute 'none') and the Llama ones the core only or
#   full layers: with the flash core, selective 'core_attn' stores nothing, and Megatron-Core re-runs the flash
#   kernel's forward in the backward (perf.recompute.reruns_flash: 'mcore-te' here).
# - recompute_layers: Llama 3 8B's recompute_granularity full, recompute_method block, recompute_num_layers 5.
# - expert_tp: BASE_QWEN3_235B_A22B_CONFIG and BASE_DEEPSEEK_V3_CONFIG set expert_tensor_parallel_size=1, whole
#   experts per rank with the ep ranks folded over tp × dp. The tp-1 MoE rows (Qwen3-30B, gpt-oss) have no
#   tensor split to choose.
# - overlap_ep_comm: moe_a2a_overlap=True in QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_* (25.09: BRIDGE_H100_2509).
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
# - attention (gpt-oss, left at the fused chain every row runs, nemo_h100_run.FLASH): the sinks (one learned
#   logit per head, softmax_type "learnable") ran in Transformer Engine's cuDNN FusedAttention in both rows.
#   (a) Megatron-Bridge docs/releases/software-versions.md: NeMo 25.11 ships TE 2.9 with cuDNN 9.13.1.26, NeMo
#   26.02 TE 2.12 with cuDNN 9.18.0.50. (b) GPTOSSProvider (src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py,
#   read at 355cef457010) falls back to AttnBackend.local only ``if not is_te_min_version("2.8")``; both
#   containers are past 2.8, so attention_backend stays Megatron-Core's default 'auto'. The field default
#   ``AttnBackend.local  # currently only "local" is supported`` is an earlier copy (y-okochi fork, 1d471d3f56b4);
#   a later one (salberdi-nvidia fork, 56b7cfa1f07a) sets no backend, and every NVIDIA-NeMo copy read carries the
#   TE-2.8 check. Which copy Bridge 0.2.0 shipped is not pinned here (release tags do not resolve), but no copy
#   after the first forces local with TE >= 2.8 (25.09 shipped TE 2.7 and has no gpt-oss row). (c) Megatron-Core's
#   TEDotProductAttention passes softmax_type to TE (TE >= 2.8); TE's get_attention_backend disables only
#   FlashAttention for a non-vanilla softmax in bshd/sbhd, and nvte_get_fused_attn_backend
#   (transformer_engine/common/fused_attn/fused_attn.cpp) admits off-by-one/learnable from cuDNN 9.13.1
#   ("9.13.1+: vanilla, off-by-one, learnable"; TE #2148, label 2.8.0: "FusedAttention ... BSHD/SBHD: cuDNN
#   9.13.1+"), with the 128-token window (window (128, 0), causal) in the cuDNN >= 9.2 SWA path. The unfused
#   fallbacks reported elsewhere are other layouts or libraries: THD (packed) sinks needed cuDNN 9.18 (TE #2483,
#   #2568), TE #2318 ran cuDNN 9.10.2. (d) The performance scripts set no attention_backend for gpt-oss on H100
#   (gpt_oss_120b_pretrain_config_h100, GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V1/V2: pp 4, recompute_modules
#   layernorm/moe_act, no CUDA graphs), and the library recipe (recipes/gpt_oss/gpt_oss.py) none either. So the
#   unfused what-if (mapping.fusion empty: +28-29 %) is not these runs, and our model (at this writing) does not
#   fit it: 91.6 GB per GPU on an 80 GiB H100 (each full-attention layer keeps its softmax for the backward,
#   64 heads × 4096² in bf16 = 2 GiB per micro-batch, in each of 4 in-flight micro-batches).
# - router_fusion: every MoE performance script sets cfg.model.moe_router_fusion = True in its common settings
#   (set_qwen3_common_configs in scripts/performance/configs/qwen3/qwen3_llm_pretrain.py and the 25.09
#   set_qwen3_30b_a3b_specific_overrides before it, set_gpt_oss_common_configs, set_deepseek_v3_common_configs),
#   beside moe_router_force_load_balancing = True.
# - load_balancing: gpt-oss trains without a balancing loss. Megatron-Bridge's GPT-OSS model sets
#   moe_router_load_balancing_type "none" twice: GPTOSSProvider's field default
#   (src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py, read at 355cef457010 and 12bc34a8ee30) and
#   GPTOSSBridge.provider_bridge (gpt_oss_bridge.py, read at 0e4d6ed607e0), which the library recipe's
#   AutoBridge.from_hf_pretrained("openai/gpt-oss-120b").to_megatron_provider() builds (recipes/gpt_oss/gpt_oss.py,
#   both layouts read: 07b4a5837b4a, db2bfddc1fe5); neither that recipe, set_gpt_oss_common_configs nor the H100
#   workload configs set it again (scripts/performance/configs/gpt_oss/, read at 0501207b95db). With it Megatron-
#   Core's TopKRouter.routing skips the aux loss (is_aux_loss_enabled False): plan.moe_host charges top-k only.
#   moe_router_force_load_balancing still replaces the logits by random ones (routing balanced, no loss). The
#   other rows keep Megatron-Core's default "aux_loss" charge (Qwen3's and DeepSeek-V3's types not checked here).
# - rope_fusion: gpt-oss rotates its queries and keys with Megatron-Core's eager RoPE (plan.eager_rope). Nothing
#   turns the fusion on: GPTOSSProvider, GPTOSSBridge.provider_bridge, the library recipe, set_gpt_oss_common_configs
#   and the H100 workload configs (all read as above) set no apply_rope_fusion, and Megatron-Core's TransformerConfig
#   defaults it to False (the Llama providers set True themselves: Llama rows stay fused). Were it set, YaRN's
#   attention scaling turns it off again: NVIDIA/Megatron-LM pull request #2038 ("Fixes for gpt-oss", merged
#   2025-10-29, with Megatron-Bridge #1155): "disable rope fusion when mscale is used"; and Megatron-Bridge's earlier
#   validate_rope_fusion_compatibility (src/megatron/bridge/utils/fusions.py) refuses it for any position embedding
#   but 'rope' (gpt-oss's is 'yarn'). The B300/GB200/GB300/VR200 gpt-oss-20b configs, which switch to plain 'rope',
#   still set apply_rope_fusion False explicitly (gpt_oss_llm_pretrain.py, read at 0501207b95db).
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
                           load_balancing="none", rope_fusion=False, optimizer_master="remainders",
                           param_gather_with_step=True),
    "qwen3-30b-a3b": Recipe(recompute="none", router_fusion=True, param_gather_with_step=True),
    "qwen3-235b-a22b": Recipe(recompute="none", expert_tp=1, overlap_ep_comm=True, router_fusion=True,
                              param_gather_with_step=True),
    "deepseek-v3": Recipe(recompute_modules=("mla_up_proj", "mlp"), expert_tp=1, dispatcher="deepep",
                          mtp_layers=1, router_fusion=True, param_gather_with_step=True),
}


# The 25.09 release's recipes where they differ from BRIDGE_H100 (read in the later layouts), read in the 25.09
# layout of scripts/performance (configs named by GPU count, the layout whose set_qwen3_common_configs applies
# apply_moe_token_drop to every Qwen3 config: the token-drop rows are 25.09's; stored copies read through the
# public-code index, their commits not resolvable there):
# - qwen3-235b-a22b: configs/qwen3/workload_base_configs.py QWEN3_235B_A22B_H100_256GPUS_FP8_CS_PARALLEL_CONFIG
#   (tp 2, pp 8, vp 4, ep 32, etp 1, mbs 1, gbs 2048, the row's columns) sets no moe_a2a_overlap, and neither
#   configs/qwen3/qwen3_llm_pretrain.py (qwen3_235b_a22b_h100_256gpus_config, set_qwen3_common_configs: fused
#   bias activation, no recomputation, moe_router_fusion, token drop, bf16 gradient reduction) nor the earlier
#   per-model qwen3_235b_a22b_llm_pretrain.py (``A2A_1F1B = False if kwargs.get("moe_a2a") is None``) turns on
#   overlap_moe_expert_parallel_comm; that layout's setup_experiment.py defaults moe_a2a_overlap to False
#   (``moe_a2a_overlap = False if moe_a2a_overlap is None else moe_a2a_overlap``) and forces it on only for
#   DeepSeek-V3 on H100. ``moe_a2a_overlap=True`` arrives with the later workload_base_configs layout
#   (QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_*: BRIDGE_H100). So the 25.09 row exposes its all-to-alls.
BRIDGE_H100_2509 = {
    "qwen3-235b-a22b": Recipe(recompute="none", expert_tp=1, router_fusion=True, param_gather_with_step=True),
}


def bridge_recipe(model: str, release: str) -> Recipe:
    """The Megatron-Bridge recipe a NeMo row of ``release`` ran: 25.09's where it differs (``BRIDGE_H100_2509``),
    else the model's ``BRIDGE_H100``."""
    if release == "25.09" and model in BRIDGE_H100_2509:
        return BRIDGE_H100_2509[model]
    return BRIDGE_H100[model]


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
#   log_num_zeros_in_grad / log_params_norm (per-iteration host work: Recipe.log_norms, plan.train_logging).
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
    grad_reduce_in_fp32=True, dp_overlap=False, log_norms=True, unmodelled=(*_MLM_COMMON,
        "NVTE_FWD/BWD_LAYERNORM_SM_MARGIN 24 (norm kernels leave 24 SMs to communication): not modelled"),
)
