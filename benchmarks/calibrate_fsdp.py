"""Check sharded data parallelism (PyTorch FSDP2 = ZeRO-3 with prefetch) against torchtitan's published runs.

Sources (pytorch/torchtitan, ``docs/performance.md``; each row names the commit of the copy it is read from):

- ``A100``: the 2024 version (@ 041336434916bdc0f88c1f89fda176fd3c2092e4): Llama 3 8B / 70B and Llama 2 13B / 70B
  with FSDP2 (1D) on 64 A100-80GB, "WPS (word per second, or more accurately, token per second)" per GPU. Llama 3
  runs local batch 1 at sequence 8192 (``train_configs/llama3_8b.toml`` @ 0011fb905e9561a51af0f265e35d989f7448b1d8:
  ``batch_size = 1``, ``seq_len = 8192``, ``compile = false``, ``enable_float8_linear = false``), Llama 2 at 4096
  ("the default sequence length in Llama 2 is 4096"); eager, bf16.
- ``H100``: the December 2024 version (@ eaea6f6a2fa940f03a10906be1df3489cf30af85; torch 1963fc8, torchao eab345c,
  torchtitan 9dec370): Llama 3.1 8B on 8 and 128 H100 of Meta's Grand Teton, FSDP 1D eager / + torch.compile /
  + Float8 (Tables 1 and 3: local batch 2, selective AC), FSDP + CP (Table 2: local batch 1, full AC, compile +
  Float8). TPS/GPU "read at the (arbitrarily determined) 90th iteration". Sequence 8192 (the 8B train config of
  that time, ``torchtitan/models/llama/train_configs/llama3_8b.toml`` @ 08a5a9f: ``seq_len = 8192``); Table 2
  gives its own lengths.

Models (torchtitan ``ModelArgs``: Llama 3 8B dim 4096, 32 layers, 32 heads, 8 KV heads, FFN 14336 (multiplier 1.3,
multiple of 1024), vocabulary 128,256; 70B dim 8192, 80 layers, 64 heads, 8 KV, FFN 28672; Llama 2 13B dim 5120,
40 layers, 40 heads (no GQA), FFN 13824 (4·5120·2/3 rounded up to 256), vocabulary 32,000; Llama 2 70B as Llama
3 70B with a 32,000 vocabulary): our presets where they exist (``llama3.1-8b``, ``llama3-70b``, ``llama2-70b``),
else the spec below.

What each torchtitan setting becomes (``project_for``), and what it cannot (``Row.gaps``):

- FSDP2 ``fully_shard`` per TransformerBlock and the root, ``reshard_after_forward`` True (every block's weights
  gathered again for the backward): ``mapping.fsdp`` (ZeRO-3 with prefetch, ``plan.sharding``). Mixed precision
  ``param_dtype`` bf16, ``reduce_dtype`` fp32 (torchtitan's ``mixed_precision_param`` / ``mixed_precision_reduce``
  defaults; ``choices=["float32"]`` for the reduce dtype in ``torchtitan/config_manager.py``): weights all-gathered
  in bf16, gradients reduce-scattered in fp32 (``grad_reduce_in_fp32``); sharded fp32 parameters, AdamW on the
  shards. FSDP2's copy-out after each gather and copy-in before each reduce-scatter run on the compute stream
  (``mapping.fsdp_copies``, sourced in ``plan.sharding``). torchtitan leaves the last block resharded-free after the
  forward (``reshard_after_forward = int(layer_id) < len(model.layers) - 1``): its backward gather, one of 32-80,
  is still charged here. A re-run block is gathered twice, not three times: its recompute runs inside the gather
  of its backward (``plan.sharding``); charging a third gather in the recompute had the full-AC A100 rows 1.8-2.0 %
  and the selective-layer ones 0.9-1.1 % slower (the A100 mean |error| went from 5.5 to 6.2 % with the fix: every
  A100 row was already over its measurement).
- Activation checkpointing: 'full' = every block re-run (``recompute`` full); 'selective layer' (``selective_ac_option
  = '2'``: every second block wrapped in ``checkpoint_wrapper``) = full recompute of half the blocks
  (``recompute_layers`` = layers / 2, the same count of re-run blocks: ``_apply_ac_to_transformer_block`` wraps
  the blocks whose count is a multiple of ``ac_freq``); 'selective op' (torchtitan's ``_save_list`` policy: keep
  the outputs of every second ``aten.mm`` and of flash attention, re-run the other matmuls — wk, wo and w3 of each
  block — and the pointwise ops; pytorch/torchtitan ``torchtitan/parallelisms/parallelize_llama.py`` @
  004b3148a92b565ef0ce7a7bcc61e0159c7ec930) is selective recomputation of ``op_sac`` (``perf.recompute``), which
  leaves out wk's share of our fused qkv (a gap on the row).
- Attention: ``F.scaled_dot_product_attention`` (flash backend): the fused chain attention → softmax, at the
  rates of the kernel SDPA runs by default, FlashAttention-2 (host_framework 'pytorch' / 'pytorch-compile':
  ``plan.framework_host.attention_device``, ``Compute.sdpa_flash``), not Transformer Engine's cuDNN kernel. On
  H100 that is 0.37 / 0.32 of the peak forward / backward (0.34 / 0.30 causal) against cuDNN's 0.60 / 0.52
  (0.55 / 0.49); on A100 both are FlashAttention-2 and nothing differs between frameworks, and ``dgx-a100`` now
  carries FlashAttention-2's measured rates (its ``flash_*`` fields: 0.72 / 0.62, causal 0.65 / 0.57, Dao arXiv
  2307.08691 Figs. 4-6) where the fused chain ran at the GEMM curve's best before, which moved the A100 rows from
  7.8 to 5.5 % mean |error|. SDPA's kernel took the H100 rows at 8k from +48..+55 % to +35..+38 % and the
  long-sequence rows (attention-bound) from +81/+80/+152/+170 % to +35/+26/+66/+73 %.
- ``torch.compile`` (per TransformerBlock, inductor): the residual add fused into the following RMSNorm
  (``fusion`` residual1 → norm2); GEMMs stay cuBLAS. Eager runs fuse nothing else.
- Float8 (torchao ``Float8Linear``, dynamic tensorwise scaling, every ``nn.Linear`` but the output head, which the
  engine keeps in bf16 for every fp8 training run: ``plan.device_layers.vocab_layers``):
  ``--dtype fp8`` with ``fp8_scaling`` 'tensor'; fp8 all-gather off (``enable_fsdp_float8_all_gather`` false).
- Host framework 'pytorch' (eager rows): plain PyTorch modules, v2.x's host counts, and each RMSNorm and the SwiGLU
  product run as eager PyTorch runs them, a chain of ATen kernels streaming their tensors, some in fp32
  (``perf.eager_ops``: 8 kernels forward, 16 backward per RMSNorm; 2 and 3 for SwiGLU). 'pytorch-compile'
  (compile rows): inductor fuses each chain, so the ops cost one pass each; compile's lower host cost is not
  modelled (these rows are far from host-bound: 8192-16384 tokens per block pass). A check that fits nothing: the
  model's eager over compile tokens/s is 0.862 on 8 H100 and 0.864 on 128, torchtitan's measured 0.864 (5,762 /
  6,667) and 0.860 (5,605 / 6,514); what both rows still lack is shared (``--whatif``: the Grand Teton H100).

Systems: A100 rows the ``dgx-a100`` preset grown to 64 GPUs. H100 rows the ``dgx-h100`` preset (H100 SXM5, 700 W,
80 GB HBM3 3.35 TB/s); Grand Teton's H100 has 96 GB HBM2e at 2.4 TB/s and ran at a 500 W power limit, and
torchtitan's footnote says its peak is "between SXM and NVL". ``--whatif`` runs a documented variant
(``grand_teton``): HBM bandwidth scaled by 2.4 / 3.35 (the doc's figure over the preset's), dense peak scaled by
the H100 NVL's datasheet peak over the SXM5's (835 / 989 bf16 TFLOP/s dense, NVIDIA H100 datasheet), the low end
of the doc's range — a bracket, not a fit.

What the model still lacks (our tokens/s are high on every row): the eager complex RoPE (``apply_rotary_emb``
through ``view_as_complex``, 3 kernels each way for q and for k) has no op in our graph, and the eager chains' extra
saved tensors are not in the memory model. The H100 rows also ran at
500 W on HBM2e (``--whatif``). The CP rows grow worse with the CP degree (cp4, cp8 at +68, +77 % against
+24 % at cp2 and +35 % at 32k without CP). The CP rows run torch's ``context_parallel``
(``torch/distributed/tensor/experimental/_attention.py``), modelled for the plain-PyTorch frameworks in
``plan.torch_ring`` rather than Transformer Engine's ring (``plan.context``):

- the same pairs per rank: round-robin load balancing (``enable_load_balance``; each rank holds chunks r and
  2cp − 1 − r), step 0 a causal SDPA over the local chunks, each later step an unmasked one over half the queries
  or half the keys, so every rank computes s²/(2cp) pairs — the later steps at FlashAttention-2's unmasked rate
  (0.37 / 0.32 against 0.34 / 0.30 causal): the model's attention got ~7 % faster at cp8;
- the K/V exchange: ``rotate_method`` 'allgather' (torchtitan's default): one all-gather of every rank's K/V,
  repeated to all 32 heads (``repeat_kv``: 4x the GQA bytes), issued at step 0 and waited for at step 1, so it
  hides behind step 0's kernel alone (at 256k on cp8, 4.3 GB in ~10 ms against ~26 ms: hidden, its 24 SMs
  slowing the kernel); the backward gathers again and passes dK/dV on in fp32 after every step, the last send
  waited for with nothing beside it (cp_comm 0.095 s per iteration on every CP row: 1.07 GB per layer);
- the fp32 merges (``_SDPAMerger``) and the backward's fp32 accumulators and send buffers: 12 GB per layer's
  forward, 54 GB per backward at cp8, ~1 s of the 256k row's iteration, as ``memory_stall``.

Together they leave the CP rows where they were (cp2 +25.5 → +24.0 %, cp4 +66.4 → +68.1 %, cp8 +72.8 → +76.9 %):
what grows with cp is still missing. The measured 256k row runs at 548 tokens/s/GPU, 60 s per 262,144-token step,
when its attention at FlashAttention-2's rates (forward, full-AC re-run, backward) takes ~30 s of our 34 s; the
~26 s missing is most of the attention time again.

Checked since, and not the cause:

- the kernel: torchtitan's train context enters ``sdpa_kernel([FLASH_ATTENTION, EFFICIENT_ATTENTION])`` under CP
  ("currently we only support these two SDP backends", cuDNN a TODO: ``get_train_context``, as read in its 2025
  home ``torchtitan/distributed/utils.py`` @ cddd7dc; the December 2024 copy not read), flash comes first in SDPA's
  priority either way (cuDNN last and not picked unasked in the December 2024 nightlies: pytorch/pytorch issues
  #141133, #142132), and torch's ``_scaled_dot_product_ring_flash_attention`` then calls
  ``aten._scaled_dot_product_flash_attention`` for every step, causal or not: FlashAttention-2 throughout, the
  preset's ``sdpa_flash`` rates;
- full AC: the recompute pass re-runs the ring's forward, its all-gather, unmasked steps and merges included
  (``tests/test_torch_ring.py``), as ``torch.utils.checkpoint`` re-runs the block;
- the host: torchtitan compiles each block with ``fullgraph=True``, so the monkey-patched SDPA, the ring loop and
  its merges are traced into the block's graph (``fullgraph=True`` allows no graph break): merges fused, the
  rotater's per-step K/V ``torch.cat`` (unused after step 0's all-gather) dead code, and no host synchronisation
  anywhere in the ring (its waits are stream waits); a step's launches are microseconds beside its 25-80 ms kernel;
- the ring's traffic left out (``_partial_update``'s copies, the ``.contiguous()`` of the repeated K/V): < 0.5 %
  of the 256k iteration.

What the measurements say instead: every T2 row holds 32k tokens per rank, so each doubling of cp adds unmasked
half-steps of the same shape (cp − 1 of them in all), each with its merge and dK/dV send; nothing else changes
with cp but the gathered buffer's size. Measured seconds per added step: 4.5 (no CP → cp2), 8.8 (cp2 → cp4),
7.3 (cp4 → cp8); the model's 4.2, 3.9, 3.9 (``--whatif`` 5.0, 4.6, 4.6). The excess is a jump between cp2 and
cp4 — cp2's step costs what FlashAttention-2's rate says, cp4's and cp8's about twice that — not a cost
proportional to steps, bytes or kernel time, which would also show at cp2. Unsourced hypotheses, not modelled:
the caching allocator's retries (cudaFree of cached blocks, a device synchronisation each) under the transient
gathered K/V (1.1, 2.1, 4.3 GB per layer at cp2, 4, 8) beside ~84 GiB reserved on every T2 row (torchtitan logs
``num_alloc_retries``; the doc does not publish it), or run-to-run variation of a single reading at the 90th
iteration; their size under ``--whatif``: 8.9 s of 30.6 (cp4) and 19.6 s of 59.8 (cp8) per iteration.
FlashAttention-2's rate at 500 W is not known either (``--whatif`` scales the peak only).

These are measurements to *check* the model against, never to fit a constant to: nothing here feeds back into a
preset.

Usage: python benchmarks/calibrate_fsdp.py [--engine analytic|event] [--only SUBSTRING] [--whatif]
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass, field

from nemo_h100_run import measure
from tilewright.engine.io.presets import load_model, load_system
from tilewright.engine.ir import LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.hardware import Component
from tilewright.engine.ir.mapping import Fp8Scaling, TensorFormats

TITAN = "pytorch/torchtitan"
DOC_A100 = (TITAN, "docs/performance.md", "041336434916bdc0f88c1f89fda176fd3c2092e4")
DOC_H100 = (TITAN, "docs/performance.md", "eaea6f6a2fa940f03a10906be1df3489cf30af85")
FLASH = ["attention", "softmax"]  # SDPA's flash kernel: one kernel, scores stay on chip
COMPILED = ["residual1", "norm2"]  # inductor fuses the residual add into the next RMSNorm within a block


@dataclass(frozen=True)
class Published:
    """One torchtitan measurement and every input it ran with (module docstring)."""

    table: str  # "A100 Llama 3", "H100 T1" ...
    model: str
    gpu: str  # "a100" or "h100"
    gpus: int
    local_batch: int
    seq: int
    ac: str  # "none", "selective-op", "selective-layer", "full"
    compile: bool
    float8: bool
    tokens_per_gpu: float
    cp: int = 1
    tp: int = 1
    source: tuple[str, str, str] = DOC_H100

    @property
    def fsdp(self) -> int:
        return self.gpus // (self.cp * self.tp)

    @property
    def group(self) -> str:
        return f"{self.gpu}{' cp' if self.cp > 1 else ''}"


_A = DOC_A100
PUBLISHED = (
    # docs/performance.md @ 0413364, "Llama 3 performance numbers" (64 A100-80GB, FSDP2, local batch 1)
    Published("A100 Llama 3", "llama3-8b", "a100", 64, 1, 8192, "selective-layer", False, False, 2904, source=_A),
    Published("A100 Llama 3", "llama3-8b", "a100", 64, 1, 8192, "selective-op", False, False, 2973, source=_A),
    Published("A100 Llama 3", "llama3-70b", "a100", 64, 1, 8192, "full", False, False, 331, source=_A),
    # "Llama 2 performance numbers" (local batch 2 but 70B selective op at 1, footnote 1)
    Published("A100 Llama 2", "llama2-13b", "a100", 64, 2, 4096, "none", False, False, 2162, source=_A),
    Published("A100 Llama 2", "llama2-13b", "a100", 64, 2, 4096, "selective-layer", False, False, 1914, source=_A),
    Published("A100 Llama 2", "llama2-13b", "a100", 64, 2, 4096, "selective-op", False, False, 1904, source=_A),
    Published("A100 Llama 2", "llama2-70b", "a100", 64, 1, 4096, "selective-op", False, False, 355, source=_A),
    Published("A100 Llama 2", "llama2-70b", "a100", 64, 2, 4096, "full", False, False, 353, source=_A),
    # docs/performance.md @ eaea6f6, Table 1: 8 GPUs, local batch 2, selective AC (the config's 'op')
    Published("H100 T1", "llama3-8b", "h100", 8, 2, 8192, "selective-op", False, False, 5762),
    Published("H100 T1", "llama3-8b", "h100", 8, 2, 8192, "selective-op", True, False, 6667),
    Published("H100 T1", "llama3-8b", "h100", 8, 2, 8192, "selective-op", True, True, 8532),
    # Table 3: 128 GPUs, local batch 2
    Published("H100 T3", "llama3-8b", "h100", 128, 2, 8192, "selective-op", False, False, 5605),
    Published("H100 T3", "llama3-8b", "h100", 128, 2, 8192, "selective-op", True, False, 6514),
    Published("H100 T3", "llama3-8b", "h100", 128, 2, 8192, "selective-op", True, True, 8380),
    # Table 2: FSDP + CP + compile + Float8, 8 GPUs, local batch 1, full AC
    Published("H100 T2", "llama3-8b", "h100", 8, 1, 32768, "full", True, True, 3890, cp=1),
    Published("H100 T2", "llama3-8b", "h100", 8, 1, 65536, "full", True, True, 2540, cp=2),
    Published("H100 T2", "llama3-8b", "h100", 8, 1, 131072, "full", True, True, 1071, cp=4),
    Published("H100 T2", "llama3-8b", "h100", 8, 1, 262144, "full", True, True, 548, cp=8),
)


def model_spec(name: str, seq: int) -> LlamaSpec:
    """The model at ``seq`` (module docstring: torchtitan's ModelArgs)."""
    if name == "llama3-8b":
        spec = load_model("llama3.1-8b")  # Llama 3 8B and 3.1 8B share every dimension
    elif name in ("llama3-70b", "llama2-70b"):
        spec = load_model(name)
    elif name == "llama2-13b":
        spec = LlamaSpec(name=name, layers=40, hidden=5120, heads=40, kv_heads=40, ffn=13824, vocab=32000,
                         comment="torchtitan llama2 13B ModelArgs: dim 5120, 40 layers, 40 heads, FFN 13824, "
                                 "vocabulary 32,000 (meta-llama/Llama-2-13b-hf config.json agrees)")
    else:
        raise KeyError(name)
    return spec.model_copy(update={"seq_len": seq, "name": name})


def grand_teton(hw: Component) -> Component:
    """The dgx-h100 preset as Grand Teton's H100 (module docstring): each GPU's HBM at 2.4 / 3.35 of the preset's
    bandwidth and 96 GB, its peak FLOP/s at the H100 NVL's 835 / 989 of the SXM5's. A documented what-if bracket,
    not a fit."""
    data = hw.model_dump(mode="json")
    scale_bw, scale_peak = 2.4 / 3.35, 835.0 / 989.0

    def walk(node: object) -> None:
        if isinstance(node, dict):
            compute = node.get("compute")
            if isinstance(compute, dict) and compute.get("peak_flops"):
                compute["peak_flops"] = {k: v * scale_peak for k, v in compute["peak_flops"].items()}
                compute["vector_flops"] = compute["vector_flops"] * scale_peak
                hbm = node["memories"][0]
                hbm["bandwidth_bytes_per_s"] *= scale_bw
                hbm["capacity_bytes"] = 96e9
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(data)
    return Component.model_validate(data)


@dataclass
class Row:
    pub: Published
    gaps: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        p = self.pub
        tech = "+".join(t for t, on in (("compile", p.compile), ("fp8", p.float8)) if on) or "eager"
        cp = f" cp{p.cp}" if p.cp > 1 else ""
        return f"{p.model} {p.gpus}{p.gpu[0]} b{p.local_batch} s{p.seq // 1024}k {p.ac} {tech}{cp}"


def project_for(row: Row, engine: str = "analytic", whatif: bool = False) -> Project:
    """The nearest expressible project of a torchtitan run (module docstring); fills ``row.gaps``."""
    p = row.pub
    spec = model_spec(p.model, p.seq)
    gaps: list[str] = []
    recompute, layers, modules = "none", None, None
    if p.ac == "full":
        recompute = "full"
    elif p.ac == "selective-layer":
        recompute, layers = "full", spec.layers // 2
    elif p.ac == "selective-op":
        recompute, modules = "selective", ["op_sac"]
        gaps.append("op-level SAC: wk's re-run (part of our fused qkv) not counted")
    fusion = [FLASH, COMPILED] if p.compile else [FLASH]
    formats = TensorFormats(fp8_scaling=Fp8Scaling.tensor) if p.float8 else TensorFormats()
    mapping = Mapping(
        tp=p.tp, pp=1, dp=p.fsdp, cp=p.cp, micro_batch=p.local_batch, global_batch=p.local_batch * p.fsdp,
        fsdp=True, fsdp_copies=True, overlap_grad_reduce=True, grad_reduce_in_fp32=True, fusion=fusion,
        recompute=recompute, recompute_layers=layers, recompute_modules=modules, formats=formats,
        host_framework="pytorch-compile" if p.compile else "pytorch",
    )
    hw = load_system("dgx-a100" if p.gpu == "a100" else "dgx-h100")
    if whatif and p.gpu == "h100":
        hw = grand_teton(hw)
    row.gaps = gaps
    return Project(name=row.label, hardware=hw, workload=spec, mapping=mapping,
                   run=RunSettings(dtype="fp8" if p.float8 else "bf16", engine=engine))


@dataclass
class Outcome:
    row: Row
    tokens_per_gpu: float
    breakdown: dict[str, float]
    oom: bool
    wall_s: float

    @property
    def error(self) -> float:
        return self.tokens_per_gpu / self.row.pub.tokens_per_gpu - 1


def evaluate(row: Row, engine: str = "analytic", whatif: bool = False) -> Outcome:
    m = measure(project_for(row, engine, whatif))
    return Outcome(row, m.tokens_per_gpu, m.breakdown, m.oom, m.wall_s)


def summary(outcomes: list[Outcome]) -> dict[str, tuple[float, int]]:
    """Mean |error| of tokens/s per GPU by group (GPU type, with CP apart) and overall, with the row counts."""
    groups: dict[str, list[float]] = defaultdict(list)
    for o in outcomes:
        groups["all"].append(abs(o.error))
        groups[o.row.pub.group].append(abs(o.error))
    return {k: (sum(v) / len(v), len(v)) for k, v in groups.items()}


def rows() -> list[Row]:
    return [Row(p) for p in PUBLISHED]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="analytic", choices=["analytic", "event"])
    ap.add_argument("--only", default="", help="run only rows whose label or table contains this")
    ap.add_argument("--whatif", action="store_true", help="H100 rows on the Grand Teton variant (grand_teton)")
    args = ap.parse_args()
    selected = [r for r in rows() if args.only in r.label or args.only in r.pub.table]
    print(f"{'table':13} {'row':52} {'meas':>6} {'pred':>6} {'error':>7} {'wall':>5}  breakdown (s per iteration)")
    outcomes = []
    for row in selected:
        o = evaluate(row, args.engine, args.whatif)
        outcomes.append(o)
        parts = ", ".join(f"{k} {v:.3f}" for k, v in o.breakdown.items() if v > 0.0005)
        print(f"{row.pub.table:13} {row.label:52} {row.pub.tokens_per_gpu:>6.0f} {o.tokens_per_gpu:>6.0f} "
              f"{100 * o.error:>+6.1f}% {o.wall_s:>5.1f}  {parts}{'  OOM' if o.oom else ''}")
        for gap in row.gaps:
            print(f"{'':20}gap: {gap}")
    if outcomes:
        print("mean |error| of tokens/s/GPU: " + ", ".join(
            f"{k} {100 * v:.1f} % (n={n})" for k, (v, n) in summary(outcomes).items()))


if __name__ == "__main__":
    main()
