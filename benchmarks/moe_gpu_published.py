"""Published Megatron-Core MoE training runs on H100 with full configurations, from sources independent of the
NeMo / Megatron-Bridge performance tables ``calibrate_nemo_h100`` checks: NVIDIA's MoE team's own benchmark
repository and Megatron-LM's MoE README. ``calibrate_moe_gpu`` runs them; nothing here feeds a preset.

Sources (read through the public-code index; commits are the stored versions read):

- ``QWEN3_TABLE``: yanring/Megatron-MoE-ModelZoo ``best_practice/Qwen3/readme.md`` (commit c1ad0b5c89f4),
  "Performance Results", 256 H100 (NVLink 4, InfiniBand 8 × 50 GB/s), Qwen3-235B-A22B bf16, seq 4096: one row per
  configuration with TP, CP, EP, PP, EDP, ETP, VPP, DP, FSDP, MBS, GBS, recompute, step time (s) and TFLOP/s per
  GPU, and the Megatron-Core commit each ran (moe_dev f3e6c5, main 1e057005). Step time is measured; tokens/s per
  GPU = GBS × seq / step / GPUs. Its TFLOP/s agree with Megatron-LM's causal FLOPs formula to 0.5 %
  (``megatron_gflop_per_token``, checked by the test), so the TFLOP/s column is the step time restated.
- ``QWEN3_LONG``: the same file, "Long Context": Qwen3-235B-A22B bf16 on 32 nodes of H100, DeepEP, PP 8, VPP 4,
  EP 8, GBS 256 (its command line), TP 4, CP 1-8 at seq 16K-128K; TFLOP/s per GPU "forced balance" (the router
  replaced by ``--moe-router-force-load-balancing``) and "dropless" (the trained router of the loaded checkpoint:
  the model config sets ``--finetune --load``). Only TFLOP/s is published: tokens/s = TFLOP/s over the causal
  formula's FLOPs per token (the same repository's seq-4096 rows fix which formula it prints). The command adds
  ``--recompute-granularity selective --recompute-modules layernorm moe``.
- ``MIXTRAL``: the same repository ``best_practice/Mixtral/run_mixtral_8x22B.sh`` (commit 0993e667ef21):
  "Dropless training, stable performance should be around 455TFLOPS for H100", "Token Drop training, perf should
  be around 470TFLOPS" (``--moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity``), with MBS 1,
  seq 4096 and the model's line of ``runtime_configs/benchmarking/runtime.conf`` (stored version 30631ea5a4aa):
  TP 2, PP 8, EP 8, CP 1, VPP 1, GBS 256, 16 nodes, alltoall dispatcher, grouped GEMM; model config
  ``model_configs/benchmarking/Mixtral-8x22B.yaml`` (0993e667ef21): ETP 1, tp-comm-overlap, distributed optimizer
  with overlapped gradient reduce / parameter gather, permute and router fusion, aux-loss routing, log-num-zeros /
  log-params-norm, 56 layers of hidden 6144, FFN 16384, 48 heads, 8 query groups, Llama-2 tokenizer (vocabulary
  32,000). "Around": the value is rounded by its authors (±1 % at best).
  NVIDIA/Megatron-LM ``megatron/core/transformer/moe/README.md`` (commit 022bcb5afe88): "With MCore v0.9, we've
  achieved remarkable performance of 468 TFLOPS for Mixtral 8X7B bf16 training", beside its "Reference Best
  Parallel Mapping" table (Mixtral 8x7B dropless, All-to-All, BF16, 64 GPUs, seq 4096, TP 1, EP 8, PP 4, VP 8,
  MBS 1, GBS 256; "8xH100 80GB HBM3, NVLink 4th Generation, InfiniBand 8x400 Gbit/s"), which the ModelZoo's
  runtime.conf repeats (Mixtral-8x7B: 1 4 8 1 8 1 256, 8 nodes, alltoall, grouped GEMM). That the 468 TFLOP/s
  was measured at exactly that mapping is our reading of the README, not its words (``Run.note``).

FLOPs per token (``megatron_gflop_per_token``): Megatron-LM's ``num_floating_point_operations``
(``megatron/training/training.py``): 12 · L · h² · [(1 + g/a + c · s/h) · q/h + (F/h) · k · 3/2 + V/(2 L h)] per
token, q the query projection width (heads × kv_channels), F the expert FFN, k the top-k, V the padded vocabulary,
c = 1 in releases up to 2024 (every query-key pair) and c = 1/2 after Megatron-LM counted only the causal half
("Only half of the attention matrix is non-zero"). The Qwen3 rows' step times fix c = 1/2 for that repository's
2025 runs; MCore v0.9 (2024, Mixtral 8x7B) printed c = 1; the Mixtral 8x22B script's date is not pinned, so
that row is converted with both and reported as the range (``Run.flops_causal`` None).

Not transcribed: the MoE Parallel Folding paper (Liu et al., arXiv 2504.14960) gives MFU per model (Mixtral 8x22B
49.3 %, Qwen2-57B-A14B 39.0 %, Llama3-8x70B 41.6 %) but its per-run configurations were not readable here (the
stored copy holds the abstract only); the ModelZoo's Qwen3-Next-80B row (its note: "not well tuned") and any
B200/GB200 row (no preset checked against them here). DeepSeek-V3 H100 guides give settings without a number.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.engine.io.presets import load_model
from tilewright.engine.ir.workload import LlamaSpec, MoESpec, TransformerDims

MODELZOO = "yanring/Megatron-MoE-ModelZoo"
QWEN3_README = f"{MODELZOO} best_practice/Qwen3/readme.md@c1ad0b5c89f4"
MIXTRAL_SCRIPT = f"{MODELZOO} best_practice/Mixtral/run_mixtral_8x22B.sh@0993e667ef21 + runtime.conf@30631ea5a4aa"
MOE_README = "NVIDIA/Megatron-LM megatron/core/transformer/moe/README.md@022bcb5afe88"


def model_spec(name: str, seq: int) -> TransformerDims:
    """The run's model: Qwen3-235B-A22B as ``nemo_h100_models`` builds it, Mixtral 8x7B from our preset, Mixtral
    8x22B from the run's own model config (sources in the comment)."""
    if name == "qwen3-235b-a22b":
        from nemo_h100_models import model_spec as nemo_spec

        return nemo_spec(name, seq)
    if name == "mixtral-8x7b":
        spec = load_model("mixtral-8x7b")
    elif name == "mixtral-8x22b":
        spec = LlamaSpec(
            name=name, layers=56, hidden=6144, heads=48, kv_heads=8, ffn=16384, vocab=32000,
            moe=MoESpec(experts=8, top_k=2, expert_ffn=16384),
            comment="Megatron-MoE-ModelZoo model_configs/benchmarking/Mixtral-8x22B.yaml: 56 layers, hidden 6144, "
                    "FFN 16384, 48 heads (kv_channels 128), 8 query groups, SwiGLU, RMSNorm, rope, no biases, "
                    "untied; 8 experts top-2; Llama2Tokenizer (vocabulary 32,000; mistralai/Mixtral-8x22B-v0.1 "
                    "itself has 32,768). 140.6 B parameters (Mistral: 141 B), 39 B active.",
        )
    else:
        raise KeyError(name)
    return spec.model_copy(update={"seq_len": seq, "name": name})


def megatron_gflop_per_token(spec: TransformerDims, causal: bool) -> float:
    """Megatron-LM's model GFLOPs per token (module docstring): its ``num_floating_point_operations`` over
    batch × seq, for a MoE model whose every layer is MoE without shared experts (the rows here)."""
    h, layers, s = spec.hidden, spec.layers, spec.seq_len
    heads = spec.heads
    groups = spec.kv_heads or heads
    q_ratio = heads * (spec.head_dim or h // heads) / h
    moe = spec.moe
    ffn, k = (moe.expert_ffn, moe.top_k) if moe is not None else (spec.ffn, 1)
    attention = (1 + groups / heads + (0.5 if causal else 1.0) * s / h) * q_ratio
    mlp = ffn / h * k * 1.5
    logits = spec.vocab / (2 * layers * h)
    return 12 * layers * h * h * (attention + mlp + logits) / 1e9


@dataclass(frozen=True)
class Run:
    """One published run: its configuration as the source gives it and the measurement (step time, or TFLOP/s
    per GPU with the FLOPs convention that converts it)."""

    label: str
    source: str
    model: str
    gpus: int
    seq: int
    gbs: int
    mbs: int
    tp: int
    pp: int
    vp: int
    ep: int
    dispatcher: str  # mapping.ep_dispatcher: 'alltoall' (A2A) or 'deepep' (flex DeepEP)
    cp: int = 1
    etp: int = 1  # expert_tensor_parallel_size (1 in every row)
    recompute: str = "none"  # 'none', 'selective' (recompute_modules), 'full'
    recompute_modules: tuple[str, ...] = ()
    overlap_ep_comm: bool = False  # --overlap-moe-expert-parallel-comm (with --delay-wgrad-compute)
    fsdp: bool = False
    token_drop: bool = False  # capacity factor 1, padded to capacity
    forced_balance: bool = False  # --moe-router-force-load-balancing
    router_fusion: bool = True
    fused_ce: bool = True  # --cross-entropy-loss-fusion
    tp_overlap: bool = False  # --tp-comm-overlap
    log_norms: bool = False  # --log-num-zeros-in-grad / --log-params-norm
    step_s: float | None = None
    tflops: float | None = None
    flops_causal: bool | None = True  # the FLOPs convention of ``tflops``; None: not pinned (both reported)
    note: str = ""

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp * self.cp)

    def tokens_per_gpu(self, causal: bool | None = None) -> float:
        """Tokens/s per GPU: measured from the step time, or the TFLOP/s over Megatron's FLOPs per token
        (``causal`` overrides the row's convention, for the rows that do not pin it)."""
        if self.step_s is not None:
            return self.gbs * self.seq / self.step_s / self.gpus
        assert self.tflops is not None
        c = self.flops_causal if causal is None else causal
        return self.tflops * 1e3 / megatron_gflop_per_token(model_spec(self.model, self.seq), bool(c))

    def tokens_range(self) -> tuple[float, float]:
        """(low, high) tokens/s per GPU: both FLOPs conventions where the row does not pin one."""
        if self.step_s is not None or self.flops_causal is not None:
            t = self.tokens_per_gpu()
            return t, t
        a, b = self.tokens_per_gpu(False), self.tokens_per_gpu(True)
        return min(a, b), max(a, b)


_Q = dict(source=QWEN3_README, model="qwen3-235b-a22b", gpus=256, seq=4096, gbs=2048)
QWEN3_TABLE = (
    Run("qwen3-235b deepep tp2 ep32 pp8 vp4", dispatcher="deepep", tp=2, pp=8, vp=4, ep=32, mbs=1,
        recompute="selective", recompute_modules=("layernorm", "moe_act"), step_s=19.7, tflops=245,
        note="moe_dev f3e6c5", **_Q),
    Run("qwen3-235b deepep tp2 ep32 pp8 vp4 +a2a overlap", dispatcher="deepep", tp=2, pp=8, vp=4, ep=32, mbs=1,
        recompute="selective", recompute_modules=("layernorm", "moe_act"), overlap_ep_comm=True, step_s=17.6,
        tflops=276, note="'+1f1b overlap': EP all-to-all overlap (with delayed wgrad); moe_dev f3e6c5", **_Q),
    Run("qwen3-235b deepep tp2 ep8 fsdp mbs4", dispatcher="deepep", tp=2, pp=1, vp=1, ep=8, mbs=4, fsdp=True,
        recompute="full", step_s=17.6, tflops=276, note="FSDP (EDP 32, DP 128), full recompute; main 1e057005",
        **_Q),
    Run("qwen3-235b a2a tp2 ep8 pp32 vp3", dispatcher="alltoall", tp=2, pp=32, vp=3, ep=8, mbs=1,
        recompute="selective", recompute_modules=("layernorm", "moe_act"), step_s=24.2, tflops=200,
        note="all-to-all dispatcher; main 1e057005", **_Q),
    Run("qwen3-235b deepep tp4 ep8 pp8 vp4", dispatcher="deepep", tp=4, pp=8, vp=4, ep=8, mbs=1, step_s=29.0,
        tflops=167, note="no recompute; main 1e057005", **_Q),
)

# Long context (forced-balance and dropless TFLOP/s of the same configuration)
_LONG = ((16384, 1, 295, 237), (32768, 2, 335, 277), (65536, 4, 368, 320), (131072, 8, 389, 357))
QWEN3_LONG = tuple(
    Run(f"qwen3-235b long s{seq // 1024}k cp{cp} {kind}", source=QWEN3_README, model="qwen3-235b-a22b", gpus=256,
        seq=seq, gbs=256, mbs=1, tp=4, pp=8, vp=4, ep=8, cp=cp, dispatcher="deepep", recompute="selective",
        recompute_modules=("layernorm", "moe"), forced_balance=kind == "forced", tflops=tf,
        note="forced balance" if kind == "forced" else "dropless, trained router (loaded checkpoint)")
    for seq, cp, forced, dropless in _LONG for kind, tf in (("forced", forced), ("dropless", dropless))
)

MIXTRAL = (
    Run("mixtral-8x22b dropless", source=MIXTRAL_SCRIPT, model="mixtral-8x22b", gpus=128, seq=4096, gbs=256, mbs=1,
        tp=2, pp=8, vp=1, ep=8, dispatcher="alltoall", fused_ce=False, tp_overlap=True, log_norms=True,
        tflops=455, flops_causal=None, note="'around 455TFLOPS'; FLOPs convention not pinned"),
    Run("mixtral-8x22b drop", source=MIXTRAL_SCRIPT, model="mixtral-8x22b", gpus=128, seq=4096, gbs=256, mbs=1,
        tp=2, pp=8, vp=1, ep=8, dispatcher="alltoall", fused_ce=False, tp_overlap=True, log_norms=True,
        token_drop=True, tflops=470, flops_causal=None,
        note="'around 470TFLOPS', capacity 1 padded; FLOPs convention not pinned"),
    Run("mixtral-8x7b dropless (v0.9)", source=MOE_README, model="mixtral-8x7b", gpus=64, seq=4096, gbs=256, mbs=1,
        tp=1, pp=4, vp=8, ep=8, dispatcher="alltoall", router_fusion=False, fused_ce=False, tflops=468,
        flops_causal=False, note="468 TFLOP/s (MCore v0.9) read as the README's reference mapping"),
)

RUNS = QWEN3_TABLE + QWEN3_LONG + MIXTRAL
