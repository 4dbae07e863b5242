"""``tilewright run``: assemble a project from a file and/or flags, simulate it, report it."""

from __future__ import annotations

import argparse
import gc
import os
from typing import Any

from tilewright.engine.cli.common import (
    COMMAND_LINE,
    finite_float,
    non_negative_int,
    refuse_overwriting_inputs,
    refuse_unreachable_outputs,
)
from tilewright.engine.cli.idle_flags import refuse_idle_run_flags
from tilewright.engine.cli.optimizer_flags import (
    add_optimizer_arguments,
    apply_optimizer_flags,
    refuse_idle_precision_flag,
)
from tilewright.engine.errors import EXIT_OUT_OF_MEMORY, InputError, Problem
from tilewright.engine.io.json_file import dumps_strict
from tilewright.engine.ir.mapping import Fp8Scaling, parse_pipeline_layout, tp_axes_for

DIM_FLAGS = ("layers", "hidden", "heads", "ffn", "seq_len", "vocab")
MAPPING_FLAGS = (
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "expert_tp",
    "expert_imbalance",
    "global_batch",
    "micro_batch",
    "interleave",
    "recompute",
    "recompute_layers",
    "zero",
    "schedule",
    "pipeline_p2p",
    "offload_layers",
    "host_framework",
)


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "project", nargs="?", metavar="PROJECT", help="a project file, or a preset project's name (tilewright presets)"
    )
    p.add_argument("--system", metavar="NAME|FILE")
    p.add_argument("--model", metavar="NAME|FILE", help="a preset, a file, or 'gpt' built from the dims")
    p.add_argument("--allow-large", action="store_true",
                   help="simulate even past the size limits (devices, layers, pipeline steps) the estimate sets")
    for dim in DIM_FLAGS:
        p.add_argument(f"--{dim.replace('_', '-')}", dest=dim, type=int, metavar="N")
    add_model_variant_arguments(p)
    p.add_argument("--devices", type=int, metavar="N")
    for flag in ("tp", "pp", "dp", "global-batch", "micro-batch", "interleave"):
        p.add_argument(f"--{flag}", type=int, metavar="N")
    p.add_argument("--cp", type=int, metavar="N", help="context parallelism: each sequence split over N devices")
    p.add_argument("--ep", type=int, metavar="N", help="expert parallelism: routed experts split over N dp ranks")
    p.add_argument("--expert-tp", type=int, metavar="N",
                   help="expert tensor parallelism: each routed expert split over N tensor ranks (default tp; 1: "
                   "whole experts, the ep × N expert ranks folded over tp × dp, Megatron-Core's ETP)")
    p.add_argument("--expert-imbalance", type=finite_float, metavar="X",
                   help="busiest expert rank's tokens over the mean (default 1, a balanced router)")
    p.add_argument("--pipeline-layers", metavar="LIST",
                   help="transformer layers per virtual stage (pp × interleave of them, N*K repeats), the "
                   "embedding on the first and the head on the last: Megatron-Core's pipeline layout")
    p.add_argument("--recompute", choices=["none", "selective", "full"])
    p.add_argument("--recompute-layers", type=int, metavar="N",
                   help="with --recompute full: re-run only the first N layers of each model chunk (Megatron's "
                   "--recompute-method block --recompute-num-layers N)")
    p.add_argument("--recompute-modules", metavar="LIST",
                   help="selective recomputation of these parts of each layer, comma-separated (Megatron-Core's "
                   "--recompute-modules: core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts); "
                   "sets --recompute selective unless given")
    p.add_argument("--cuda-graph-scope", metavar="LIST",
                   help="GPU training: replay these parts of each layer as CUDA graphs, comma-separated "
                   "(Megatron-Core's --cuda-graph-scope: attn, mlp, moe, moe_router, moe_preprocess, mamba, or "
                   "full_iteration alone); their kernels cost the host one graph launch instead of one dispatch each")
    p.add_argument("--sequence-parallel", action="store_true", default=None)
    p.add_argument("--zero", type=int, choices=[0, 1, 2, 3],
                   help="ZeRO stage: 1 optimizer, 2 + gradients, 3 + weights sharded over dp (per-layer gathers)")
    p.add_argument("--fsdp", action="store_true", default=None,
                   help="PyTorch FSDP (full shard): ZeRO stage 3 with the next layer's weights prefetched and each "
                   "layer's gradient reduce-scatter behind the next layer's backward")
    p.add_argument("--fsdp-copies", action="store_true", default=None,
                   help="with --fsdp (or --zero 3): PyTorch FSDP2's (fully_shard) copies on the compute stream, each "
                   "layer's gathered weights copied out of the all-gather buffer and its gradients copied into the "
                   "reduce-scatter buffer (mapping.fsdp_copies); default: flat buffers the layers view (Megatron-FSDP)")
    p.add_argument("--overlap-grad-reduce", action="store_true", default=None,
                   help="reduce gradients in buckets during the last backward, as the search's 'ovl-grad' "
                   "(Megatron --overlap-grad-reduce); implied by --fsdp, whose reduce-scatters always overlap")
    p.add_argument("--overlap-param-gather", action="store_true", default=None,
                   help="ZeRO-3: all-gather the next layer's weights while the current one computes; "
                   "ZeRO-1/2: gather the updated weights behind the next forward")
    p.add_argument("--fp8-param-gather", action="store_true", default=None,
                   help="fp8 training with ZeRO ≥ 1: weights kept only in fp8 and all-gathered in fp8 after the step "
                   "(Megatron-Core --fp8-param-gather)")
    p.add_argument("--optimizer-moments", choices=["fp32", "bf16", "fp16", "fp8"], default=None,
                   help="mixed-precision Adam: its moments' dtype (mapping.optimizer_moments); bf16 stores 2 + 2 B "
                   "per parameter (Megatron-Core --use-precision-aware-optimizer --exp-avg-dtype/--exp-avg-sq-dtype)")
    p.add_argument("--grad-reduce-dtype", choices=["fp32", "bf16"], default=None,
                   help="bf16/fp8 mixed precision: the gradient buffer's and the data-parallel reduction's format; "
                   "bf16 holds and moves 2 B per parameter instead of 4 (Megatron-Core's "
                   "DistributedDataParallelConfig.grad_reduce_in_fp32=False, NVIDIA's Megatron-Bridge recipes)")
    p.add_argument("--overlap-ep-comm", action="store_true", default=None,
                   help="MoE: hide each expert all-to-all behind another micro-batch's compute (DualPipe-style)")
    p.add_argument("--delay-wgrad-compute", action="store_true", default=None,
                   help="with --overlap-ep-comm: weight gradients run apart from the input gradients "
                   "and hide the backward's all-to-all too (Megatron-Core --delay-wgrad-compute)")
    p.add_argument("--ep-dispatcher", choices=["alltoall", "deepep"], default=None,
                   help="MoE token exchange, as the search's sharding column names it: alltoall (Megatron-Core's "
                   "alltoall dispatcher) or deepep (once per destination node, then over the node's fabric)")
    p.add_argument("--overlap-tp-comm", action="store_true", default=None,
                   help="with --sequence-parallel: hide tensor-parallel all-gathers and reduce-scatters behind the "
                   "GEMMs beside them (Transformer Engine userbuffers, Megatron-Core --tp-comm-overlap)")
    p.add_argument("--tp-overlap-rs", choices=["pipeline", "ring_exchange"], default=None,
                   help="with --overlap-tp-comm: the forward reduce-scatters after proj and fc2 pipelined in 4 "
                   "splits on 16 SMs (NVIDIA's bf16 userbuffers recipes) or passed around the ring on the copy "
                   "engines with 1 SM set aside (their fp8 recipes)")
    p.add_argument("--fused-cross-entropy", action="store_true", default=None,
                   help="GPUs: the loss as one fused kernel (Megatron-Core --cross-entropy-loss-fusion) instead of "
                   "Megatron-LM's eager kernels over fp32 logits")
    p.add_argument("--moe-router-fusion", action="store_true", default=None,
                   help="MoE on GPUs: the router's top-k, scores and aux loss as Transformer Engine's fused kernels "
                   "(Megatron-Core --moe-router-fusion)")
    p.add_argument("--no-gradient-accumulation-fusion", dest="gradient_accumulation_fusion", action="store_false",
                   default=None, help="GPU training: every weight's gradient added by its hook's main_grad.add_ "
                   "kernel, as Megatron-LM v2.x and Megatron's flag of that name (plan.grad_hooks)")
    p.add_argument("--log-params-norm", action="store_true", default=None,
                   help="GPU training: every iteration takes the parameters' norm (Megatron --log-params-norm: a "
                   "norm kernel, an all-reduce, a host sync; plan.train_logging)")
    p.add_argument("--log-num-zeros-in-grad", action="store_true", default=None,
                   help="GPU training: every step counts the gradients' zeros (Megatron --log-num-zeros-in-grad: "
                   "kernels per gradient tensor, an all-reduce, a host sync; plan.train_logging)")
    p.add_argument("--timing-log-level", type=int, choices=[0, 1, 2], default=None,
                   help="GPU training: Megatron's timers, each synchronising the device: 2 every micro-batch's, 1 the "
                   "iteration's parts with barriers, 0 the iteration's; default: Megatron-LM v2.x-v3.0's, every timer "
                   "without levels (plan.train_logging)")
    p.add_argument("--check-for-nan-in-loss-and-grad", action="store_true", default=None,
                   help="GPU training: each micro-batch's loss and each gradient bucket checked for NaN with a host "
                   "sync (Megatron-LM's default from late 2023; plan.train_logging)")
    p.add_argument("--schedule", choices=["gpipe", "1f1b"])
    p.add_argument("--pipeline-p2p", choices=["overlap", "blocking", "megatron-lm"], default=None,
                   help="training pipelines: 'overlap' computes while a send flies (Megatron-Core interleaved with "
                   "--overlap-p2p-comm), 'blocking' waits for each send, 'megatron-lm' also all-gathers each "
                   "received tensor over the tensor group (v2.x-v3.0 scatter-gather); default: 'megatron-lm' for GPU "
                   "training with full recompute, else 'overlap' (plan.pipeline_p2p)")
    p.add_argument("--overlap-dgrad-comm", choices=["on", "off"], default=None,
                   help="training at tp > 1: each column-parallel linear's input-gradient all-reduce (reduce-scatter "
                   "with --sequence-parallel) hidden behind its weight-gradient GEMM (Megatron --async-tensor-model-"
                   "parallel-allreduce, Megatron-Core, Transformer Engine); default: off for GPU training with full "
                   "recompute (Megatron-LM v2.x), else on (plan.dgrad_overlap)")
    p.add_argument("--host-framework", choices=["megatron-lm", "mcore", "mcore-te", "pytorch", "pytorch-compile",
                                               "megatron-deepspeed"],
                   default=None,
                   help="GPU training: whose Python issues each layer's kernels, for the host's time per op "
                   "(mapping.host_framework): 'megatron-lm' Megatron-LM v2.x's own layers, 'mcore' Megatron-Core's "
                   "local layers (--transformer-impl local), 'mcore-te' Megatron-Core with Transformer Engine's "
                   "modules (NeMo), 'pytorch' plain PyTorch modules run eagerly (torchtitan, Hugging Face: each "
                   "RMSNorm and gated activation a chain of ATen kernels), 'pytorch-compile' the same under "
                   "torch.compile, 'megatron-deepspeed' Microsoft's Megatron-DeepSpeed (v2.x's layers and two blocking "
                   "scalar copies per layer forward, plan.deepspeed_host); "
                   "default: 'megatron-lm' whatever the run (plan.framework_host)")
    p.add_argument("--offload-layers", type=non_negative_int, metavar="N",
                   help="training with the activations in host memory (--set mapping.memory_levels.activations=NAME, "
                   "the name of the system's host memory as it is spelt, e.g. host on the DGX presets): "
                   "offload the stored activations of the first N transformer layers of each model chunk "
                   "(Megatron-Core --cpu-offloading-num-layers); default: all but the last (plan.activation_offload)")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16", "fp8"])
    p.add_argument("--fp8-recipe", choices=[r.value for r in Fp8Scaling],
                   help="with fp8: Transformer Engine's scaling recipe (mapping.formats.fp8_scaling): delayed "
                   "(amax history, amax fused into the cast), tensor (current scaling, the default), block "
                   "(1×128 / 128×128 blocks, DeepSeek-V3), mxfp8 (Blackwell's 1×32 microscaling)")
    add_fp8_bf16_layers_argument(p)
    p.add_argument("--mode", choices=["train", "infer"])
    p.add_argument("--engine", choices=["event", "analytic"])
    add_optimizer_arguments(p)  # Megatron-Core's precision-aware optimizer, the param gather under the step
    p.add_argument("--no-aggregate", action="store_true", help="simulate every device, not one per symmetric group")
    add_inference_arguments(p)
    p.add_argument("--set", action="append", default=[], metavar="DOTTED.PATH=VALUE")
    p.add_argument("--json", action="store_true", help="print one JSON object of metrics on stdout")
    p.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace")
    p.add_argument("--csv", metavar="DIR", help="write metrics and timelines as CSV files")
    p.add_argument("--quiet", action="store_true", help="no progress bar on a terminal")


def add_model_variant_arguments(p: argparse.ArgumentParser) -> None:
    """Block variants of a transformer model (``TransformerDims``), on top of ``--model`` or ``gpt``."""
    g = p.add_argument_group("transformer block variants")
    g.add_argument("--kv-heads", type=int, metavar="N", help="key/value heads: GQA (1 = multi-query)")
    g.add_argument("--head-dim", type=int, metavar="N", help="width per head (default hidden / heads)")
    g.add_argument("--moe-experts", type=int, metavar="E", help="mixture of experts: routed experts per block")
    g.add_argument("--moe-top-k", type=int, metavar="K", help="experts each token is routed to (with --moe-experts)")
    g.add_argument("--moe-expert-ffn", type=int, metavar="N", help="width of one routed expert (default: ffn)")
    g.add_argument("--moe-shared-experts", type=int, metavar="N", help="experts every token passes through (DeepSeek)")
    g.add_argument("--moe-capacity-factor", type=finite_float, metavar="F",
                   help="expert capacity over the balanced load (token slots padded); default dropless")
    g.add_argument("--moe-first-dense", type=int, metavar="N", help="leading blocks that keep a dense MLP")
    g.add_argument("--mla", metavar="KV_RANK,Q_RANK,NOPE,ROPE,V",
                   help="multi-head latent attention (DeepSeek-V2/V3): kv_lora_rank, q_lora_rank (0: a plain query "
                        "projection), qk_nope_head_dim, qk_rope_head_dim, v_head_dim, e.g. 512,1536,128,64,128")
    g.add_argument("--parallel-block", action="store_true", default=None,
                   help="attention and MLP in parallel from one norm (GPT-J, Falcon)")
    g.add_argument("--bias", choices=["all", "qkv", "none"],
                   help="linear-layer biases: all, on the qkv projection only (Qwen2), or none")


def _model_variants(args: argparse.Namespace, data: dict[str, Any]) -> dict[str, Any]:
    """The workload fields the block-variant flags set (commands without those flags set none)."""
    out: dict[str, Any] = {}
    for flag in ("kv_heads", "head_dim"):
        if getattr(args, flag, None) is not None:
            out[flag] = getattr(args, flag)
    if getattr(args, "parallel_block", None):
        out["parallel_block"] = True
    bias = getattr(args, "bias", None)
    if bias is not None:
        out |= {"qkv_bias": bias != "none", "out_bias": bias == "all", "mlp_bias": bias == "all"}
    experts, top_k = getattr(args, "moe_experts", None), getattr(args, "moe_top_k", None)
    existing = data.get("moe") if isinstance(data.get("moe"), dict) else None
    if (experts is None) != (top_k is None) and existing is None:
        raise InputError(COMMAND_LINE, Problem("--moe-experts/--moe-top-k", "give both, or neither"))
    moe_extras = {key: getattr(args, flag, None) for key, flag in MOE_FLAGS.items()}
    moe_extras = {k: v for k, v in moe_extras.items() if v is not None}
    if moe_extras and experts is None and not data.get("moe"):
        raise InputError(COMMAND_LINE, Problem("--moe-" + next(iter(moe_extras)).replace("_", "-"),
                                               "needs a mixture-of-experts model (--moe-experts and --moe-top-k)"))
    if existing is not None and (experts is not None or top_k is not None):
        # a MoE model (DeepSeek-V3, Mixtral) keeps its expert width, shared experts, dense blocks and router:
        # the flags change only what they name (a new object used to drop them and size experts by the dense ffn)
        out["moe"] = existing | {k: v for k, v in (("experts", experts), ("top_k", top_k)) if v is not None}
    elif experts is not None:
        ffn = data.get("ffn") or 4 * int(data.get("hidden") or 0)
        out["moe"] = {"experts": experts, "top_k": top_k, "expert_ffn": ffn}
    if moe_extras:
        out["moe"] = {**(out.get("moe") or data.get("moe") or {}), **moe_extras}
    mla = getattr(args, "mla", None)
    if mla is not None:
        out["mla"] = _mla(mla)
    if out and data.get("kind") not in ("gpt", "llama", "bert"):
        given = [f for f in VARIANT_FLAGS if getattr(args, f, None) is not None]  # named as typed
        raise InputError(COMMAND_LINE, Problem("--" + (given[0] if given else "kv_heads").replace("_", "-"),
                                               f"a {data.get('kind')} model has no transformer blocks"))
    return out


# the block-variant flags, in the order a refusal names the first one given
VARIANT_FLAGS = ("kv_heads", "head_dim", "moe_experts", "moe_top_k", "moe_expert_ffn", "moe_shared_experts",
                 "moe_capacity_factor", "moe_first_dense", "mla", "parallel_block", "bias")
# moe fields set by --moe-… flags (beyond --moe-experts/--moe-top-k)
MOE_FLAGS = {"expert_ffn": "moe_expert_ffn", "shared_experts": "moe_shared_experts",
             "capacity_factor": "moe_capacity_factor", "first_dense_layers": "moe_first_dense"}


def _mla(text: str) -> dict[str, Any]:
    """``--mla KV_RANK,Q_RANK,NOPE,ROPE,V`` as the workload's ``mla`` object (Q_RANK 0: no query latent)."""
    parts = text.split(",")
    if len(parts) != 5 or not all(p.strip().isdigit() for p in parts):
        raise InputError(COMMAND_LINE, Problem("--mla", f"{text!r}: give five whole numbers, "
                                                         "KV_RANK,Q_RANK,NOPE,ROPE,V (e.g. 512,1536,128,64,128)"))
    kv, q, nope, rope, v = (int(p) for p in parts)
    return {"kv_lora_rank": kv, "q_lora_rank": q or None, "qk_nope_head_dim": nope, "qk_rope_head_dim": rope,
            "v_head_dim": v}


# run.inference settings set by flags of the same name (with --mode infer)
INFERENCE_FLAGS = ("prompt_tokens", "output_tokens", "batch", "attention", "kv_block_tokens", "prefill")


def add_inference_arguments(p: argparse.ArgumentParser) -> None:
    from tilewright.engine.ir.common import DType

    g = p.add_argument_group("inference (with --mode infer; the batch arrives at once)")
    g.add_argument("--prompt-tokens", type=int, metavar="N", help="prompt length per sequence")
    g.add_argument("--output-tokens", type=int, metavar="N",
                   help="tokens generated per sequence: the prefill makes the first, then N − 1 decode steps")
    g.add_argument("--batch", type=int, metavar="N", help="sequences served together")
    g.add_argument("--attention", choices=["fused", "materialised"],
                   help="fused: flash-style, causal FLOPs, scores on chip (inference's default); materialised: "
                        "s² scores stored and moved. Training too: fused adds the fusion chain attention → "
                        "softmax to mapping.fusion, materialised removes it")
    g.add_argument("--kv-dtype", choices=[d.value for d in DType], metavar="DTYPE",
                   help="KV-cache format (mapping.formats.kv_cache; default: the activations'): "
                        + ", ".join(d.value for d in DType))
    g.add_argument("--kv-block-tokens", type=int, metavar="N", help="tokens per KV-cache page (default 16)")
    g.add_argument("--prefill", choices=["batched", "sequential"],
                   help="batched: the batch's prompts in one pass (vLLM); sequential: one sequence after another, "
                        "TTFT the first one's (tt-transformers); default: the device's runtime_prefill")


def _inference_flags(args: argparse.Namespace, run: dict[str, Any], mapping: dict[str, Any]) -> list[str]:
    """Put the inference flags into the raw ``run`` and ``mapping``; the flags that were given. Without
    flags nothing is touched (a malformed ``run.inference`` is then reported by validation)."""
    given = {name: getattr(args, name) for name in INFERENCE_FLAGS if getattr(args, name, None) is not None}
    if "attention" in given and run.get("mode", "train") != "infer":  # training: the same choice, as a fusion
        mapping["fusion"] = attention_fusion(mapping.get("fusion"), given.pop("attention") == "fused")
    if given:
        run["inference"] = _object(run.get("inference"), "run.inference") | given
    flags = ["--" + name.replace("_", "-") for name in given]
    if getattr(args, "kv_dtype", None):
        mapping["formats"] = _object(mapping.get("formats"), "mapping.formats") | {"kv_cache": args.kv_dtype}
        flags.append("--kv-dtype")
    return flags


# the fusion chain of fused (flash) attention in training: one kernel, scores never leave the chip
FUSED_ATTENTION = ["attention", "softmax"]


def attention_fusion(fusion: Any, fused: bool) -> list[Any]:
    """``mapping.fusion`` with the attention → softmax chain added (``fused``) or taken out: what
    ``--attention`` means for a training run, whose attention kind is that fusion chain (an inference
    run's is ``run.inference.attention``)."""
    if fusion is not None and not isinstance(fusion, list):
        raise InputError(COMMAND_LINE, Problem("mapping.fusion", f"must be a list to take --attention, not "
                                                                 f"{type(fusion).__name__}"))
    chains = [c for c in (fusion or []) if c != FUSED_ATTENTION]
    return [*chains, FUSED_ATTENTION] if fused else chains


def add_fp8_bf16_layers_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fp8-bf16-layers", metavar="START,END",
                   help="with fp8 training: the first START and last END transformer layers run in bf16 "
                   "(mapping.formats.bf16_first_layers / bf16_last_layers; Megatron-Core --first-last-layers-bf16 "
                   "--num-layers-at-start-in-bf16 START --num-layers-at-end-in-bf16 END; NVIDIA's FP8-CS recipe: 1,1)")


def fp8_bf16_layers(args: argparse.Namespace, formats: Any) -> dict[str, Any] | None:
    """``mapping.formats`` with ``--fp8-bf16-layers START,END`` applied (None without the flag): two whole
    numbers ≥ 0; whether the run can take them (fp8 training, layers enough) is the project's check."""
    text = getattr(args, "fp8_bf16_layers", None)
    if text is None:
        return None
    parts = [t.strip() for t in text.split(",")]
    if len(parts) != 2 or not all(t.isdigit() for t in parts):
        raise InputError(COMMAND_LINE, Problem("--fp8-bf16-layers", f"{text!r}: give START,END, two whole numbers "
                                               "≥ 0 (mapping.formats.bf16_first_layers, bf16_last_layers), e.g. 1,1"))
    first, last = (int(t) for t in parts)
    return _object(formats, "mapping.formats") | {"bf16_first_layers": first, "bf16_last_layers": last}


def _object(value: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        what = type(value).__name__
        raise InputError(COMMAND_LINE, Problem(path, f"must be a JSON object to take the flags, not {what}"))
    return dict(value)


def model_data(args: argparse.Namespace, base: dict[str, Any] | None) -> dict[str, Any]:
    """The raw workload of ``--model`` (a preset, a file, or ``gpt``) with the dimension flags applied."""
    from tilewright.engine.io.presets import load_model

    dims = {d: getattr(args, d) for d in DIM_FLAGS if getattr(args, d) is not None}
    if args.model == "gpt" or (args.model is None and base is None):
        missing = [d for d in ("layers", "hidden", "heads") if d not in dims]
        if missing:
            raise InputError(COMMAND_LINE, Problem("--model gpt", f"needs --{', --'.join(missing)}"))
        data = {"kind": "gpt", "name": "gpt", **dims}
        return data | _model_variants(args, data)
    data = load_model(args.model).model_dump(mode="json") if args.model else dict(base or {})
    if dims and data.get("kind") not in ("gpt", "llama", "bert"):
        raise InputError(COMMAND_LINE, Problem("--layers/--hidden/…", f"a {data.get('kind')} model has no such dims"))
    data.update(dims)
    return data | _model_variants(args, data)


def pipeline_layout(text: str) -> list[int]:
    """``--pipeline-layers``: layers per virtual stage, comma-separated, ``N*K`` for K stages of N layers
    ("1,2*30,0": DeepSeek-V3's 'Et|(tt|)*30mL')."""
    try:
        return parse_pipeline_layout(text)
    except ValueError as exc:
        raise InputError(COMMAND_LINE, Problem("--pipeline-layers", str(exc))) from None


def _mapping_data(args: argparse.Namespace, base: dict[str, Any], capacity: int | None) -> dict[str, Any]:
    m = dict(base)
    if getattr(args, "pipeline_layers", None) is not None:
        m["pipeline_layers"] = pipeline_layout(args.pipeline_layers)
    for name in MAPPING_FLAGS:
        value = getattr(args, name)
        if value is not None:
            m[name] = value
    modules = getattr(args, "recompute_modules", None)
    if modules is not None:  # as Megatron-Bridge's recompute_modules override: selective unless said otherwise
        m["recompute_modules"] = [part.strip() for part in modules.split(",") if part.strip()]
        if args.recompute is None and m.get("recompute", "none") == "none":
            m["recompute"] = "selective"
    scope = getattr(args, "cuda_graph_scope", None)
    if scope is not None:  # checked with the project (plan.checks: mapping.cuda_graph_scope)
        m["cuda_graph_scope"] = [part.strip() for part in scope.split(",") if part.strip()]
    if args.sequence_parallel:
        m["sequence_parallel"] = True
    axes = m.get("tp_axes")
    if isinstance(axes, list | tuple) and len(axes) == 2 and isinstance(m.get("tp"), int):  # --tp: 2-D while it fits
        m["tp_axes"] = tp_axes_for(tuple(m["tp_axes"]), m["tp"])  # type: ignore[arg-type]
    for flag in ("fsdp", "fsdp_copies", "overlap_param_gather", "overlap_ep_comm", "fused_cross_entropy",
                 "overlap_tp_comm", "moe_router_fusion", "delay_wgrad_compute", "overlap_grad_reduce",
                 "log_params_norm", "log_num_zeros_in_grad", "check_for_nan_in_loss_and_grad"):
        if getattr(args, flag, None):
            m[flag] = True
    if getattr(args, "overlap_dgrad_comm", None):  # plan.dgrad_overlap
        m["overlap_dgrad_comm"] = args.overlap_dgrad_comm == "on"
    if getattr(args, "gradient_accumulation_fusion", None) is False:
        m["gradient_accumulation_fusion"] = False
    if getattr(args, "timing_log_level", None) is not None:  # plan.train_logging
        m["timing_log_level"] = args.timing_log_level
    if getattr(args, "ep_dispatcher", None):  # checked with the project (idle_flags: MoE, training)
        m["ep_dispatcher"] = args.ep_dispatcher
    if getattr(args, "tp_overlap_rs", None):
        m["tp_overlap_reduce_scatter"] = args.tp_overlap_rs
    if getattr(args, "fp8_param_gather", None):  # checked with the project (plan.checks)
        m["fp8_param_gather"] = True
    if getattr(args, "optimizer_moments", None):  # checked with the project (plan.checks)
        m["optimizer_moments"] = args.optimizer_moments
    if getattr(args, "grad_reduce_dtype", None):  # checked with the project (plan.checks)
        m["grad_reduce_in_fp32"] = args.grad_reduce_dtype == "fp32"
    if args.interleave and args.interleave > 1 and m.get("schedule", "1f1b") == "1f1b":
        m["schedule"] = "interleaved-1f1b"
    tp, pp = m.get("tp", 1), m.get("pp", 1)
    per = "tp × pp"
    if isinstance(m.get("cp"), int) and isinstance(pp, int):  # cp ranks count like pipeline stages here
        pp, per = pp * m["cp"], "tp × pp × cp"
    if args.dp is None:
        devices = args.devices or (capacity if "dp" not in base and capacity else None)
        if devices:
            if devices % (tp * pp):
                raise InputError(
                    COMMAND_LINE, Problem("--devices", f"{devices} is not a multiple of {per} ({tp * pp})")
                )
            m["dp"] = devices // (tp * pp)
    elif args.devices is not None and args.devices != tp * pp * args.dp:
        raise InputError(COMMAND_LINE, Problem("--devices", f"{args.devices} ≠ {per} × dp = {tp * pp * args.dp}"))
    if "global_batch" not in m:
        m["global_batch"] = m.get("micro_batch", 1) * m.get("dp", 1) * max(pp, 1)
    return m


def assemble_project(args: argparse.Namespace):
    """The project a run simulates: the file (if any), then flags, then ``--set`` overrides."""
    from tilewright.engine.cli.flag_blame import FlagEdits
    from tilewright.engine.io.json_file import read_json, require_object
    from tilewright.engine.io.migrate import migrate
    from tilewright.engine.io.overrides import apply_overrides, parse_set_option
    from tilewright.engine.io.presets import load_system, resolve
    from tilewright.engine.io.project_file import project_from_data
    from tilewright.engine.plan.budget import check_budget
    from tilewright.engine.plan.checks import raise_for_problems

    path = resolve("projects", args.project) if args.project else None  # a file, or a preset's name
    source = str(path) if path else COMMAND_LINE
    base: dict[str, Any] = {}
    if path:
        base = migrate(require_object(read_json(path), source), source)
    edits = FlagEdits(args, source, base)  # a refusal of what a flag set names the flag, not the file
    data: dict[str, Any] = dict(base)
    data.setdefault("name", "command-line run")
    if path and "hardware" not in data and not args.system:  # no silent default for a file's missing part
        raise InputError(source, Problem("hardware", "missing: a project names its hardware (or pass --system NAME)"))
    # any dimension or block-variant flag edits the project's model (only --layers used to: --seq-len, --hidden,
    # --kv-heads, --moe-experts … were dropped without a word on a project file)
    model_flags = any(getattr(args, f, None) not in (None, False) for f in (*DIM_FLAGS, *VARIANT_FLAGS))
    if path and "workload" not in data and not (args.model or model_flags):
        raise InputError(source, Problem("workload", "missing: a project names its model (or pass --model NAME)"))
    for part in ("hardware", "mapping", "run", "workload"):
        if part in base and not isinstance(base[part], dict):
            raise InputError(source, Problem(part, f"must be a JSON object, not {type(base[part]).__name__}"))
    if args.system or "hardware" not in data:
        data["hardware"] = load_system(args.system or "dgx-a100").model_dump(mode="json")
    data["workload"] = (
        model_data(args, base.get("workload")) if (args.model or model_flags or not base) else base["workload"]
    )
    capacity = _capacity(data["hardware"], source)
    data["mapping"] = _mapping_data(args, dict(base.get("mapping") or {}), capacity)
    run = dict(data.get("run") or {})
    for key in ("dtype", "mode", "engine"):
        if getattr(args, key):
            run[key] = getattr(args, key)
    if args.no_aggregate:
        run["aggregate"] = False
    if getattr(args, "fp8_recipe", None):  # validation refuses it without an fp8 tensor to scale
        data["mapping"]["formats"] = (_object(data["mapping"].get("formats"), "mapping.formats")
                                      | {"fp8_scaling": args.fp8_recipe})
    if (edge := fp8_bf16_layers(args, data["mapping"].get("formats"))) is not None:  # checked with the project
        data["mapping"]["formats"] = edge
    inference_flags = _inference_flags(args, run, data["mapping"])
    data["run"] = run
    apply_optimizer_flags(args, data["mapping"], run)  # Megatron's names; checked with the project (plan.checks)
    edits.after_flags(data)
    for option in args.set:
        path, value = parse_set_option(option)
        apply_overrides(data, path, value, COMMAND_LINE)
        edits.set_option(path, option)
    with edits.blamed():
        project = project_from_data(data, source)
    if inference_flags and project.run.mode != "infer":
        raise InputError(COMMAND_LINE, Problem(", ".join(inference_flags), "set an inference run: add --mode infer"))
    if getattr(args, "tp_overlap_rs", None) and not project.mapping.overlap_tp_comm:
        # the method of an overlap the run does not do would change nothing (the studio greys it out)
        raise InputError(COMMAND_LINE, Problem("--tp-overlap-rs", f"'{args.tp_overlap_rs}' picks how overlapped "
                                               "tensor-parallel reduce-scatters hide; this run does not overlap them "
                                               "(add --overlap-tp-comm: mapping.overlap_tp_comm)"))
    with edits.blamed():
        check_budget(project, source, allow_large=args.allow_large)  # before anything grows with the sizes
    refuse_idle_run_flags(args, project)  # flags this project's simulation would not read, by the flag typed
    with edits.blamed():  # then by field (plan.idle_fields; plan.context_length: an inference sequence past the
        raise_for_problems(project, source, allow_large=args.allow_large)  # context, blamed on a length flag)
    refuse_idle_precision_flag(args, project)  # the flag where it applies to nothing (all dtypes fp32)
    return project


def _capacity(hw: Any, source: str) -> int | None:
    """Devices the hardware holds (None when it grows to fit): the hardware is validated first, so a bad
    part is reported with its field like every other input error."""
    from tilewright.engine.io.json_file import validate_as
    from tilewright.engine.ir.hardware import Component

    component: Component = validate_as(Component, hw, source, prefix="hardware")
    return None if _growable(component) else component.device_count()


def _growable(component) -> bool:
    return component.growable or any(_growable(c) for c in component.children)


def run_command(args: argparse.Namespace) -> int:
    # One short-lived run: the cyclic collector would only rescan the plan and the timeline (~10 % of
    # the wall time of a large run) and finds no garbage worth it; it is switched back on afterwards.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _run(args)
    finally:
        if enabled:
            gc.enable()


def _check_outputs(args: argparse.Namespace) -> None:
    """Output paths that cannot work are refused before the run, not after it: ``--trace p.json`` with
    ``p.json`` the project would replace the design with a trace; a trace cannot be written over a folder,
    nor CSV files into a file."""
    if args.project:
        from tilewright.engine.io.presets import resolve

        source = os.path.realpath(resolve("projects", args.project))
        for flag, out in (("--trace", args.trace), ("--csv", args.csv)):
            if out and os.path.realpath(out) == source:
                raise InputError(COMMAND_LINE, Problem(flag, f"{out} is the project file itself; choose another path"))
    # --system/--model files are inputs too (a preset's name is no file here, so it is skipped)
    refuse_overwriting_inputs({"--trace": args.trace, "--csv": args.csv}, [args.system, args.model])
    refuse_unreachable_outputs({"--trace": args.trace, "--csv": args.csv})
    if args.trace and os.path.isdir(args.trace):
        raise InputError(COMMAND_LINE, Problem("--trace", f"{args.trace} is a folder; name a file"))
    if args.csv and os.path.exists(args.csv) and not os.path.isdir(args.csv):
        raise InputError(COMMAND_LINE, Problem("--csv", f"{args.csv} is a file; name a folder for the CSV files"))
    if args.csv:  # a folder holding other files would be refused by write_csv, after the whole run
        from tilewright.engine.results.csv_export import check_csv_folder

        check_csv_folder(args.csv)


def _run(args: argparse.Namespace) -> int:
    _check_outputs(args)
    project = assemble_project(args)
    from tilewright.engine.cli.progress import ProgressPrinter
    from tilewright.engine.simulate import simulate

    series = bool(args.trace or args.csv)  # link series only go to files
    with ProgressPrinter(not args.quiet, lines=False) as printer:  # a bar on a terminal, silent into a file
        result = simulate(project, series=series, progress=printer if printer.enabled else None)
    if args.trace:
        from tilewright.engine.results.chrome_trace import write_chrome_trace

        write_chrome_trace(result, args.trace)
    if args.csv:
        from tilewright.engine.results.csv_export import write_csv

        write_csv(result, args.csv)
    if args.json:
        print(dumps_strict(result.metrics_json(), sort_keys=True))
    else:
        print(result.summary_text())
    return EXIT_OUT_OF_MEMORY if result.oom or result.host_oom else 0  # the host memory holds offloaded state


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="simulate one training iteration or an inference request")
    add_run_arguments(p)
    p.set_defaults(handler=run_command)
