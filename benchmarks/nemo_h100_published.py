"""The DGX-H100 measurements ``calibrate_nemo_h100`` checks the dgx-h100 preset against, as published, with
their sources; and the distinct configurations they make (``rows``).

Sources:

- NVIDIA-NeMo/Megatron-Bridge, ``docs/performance-summary.md`` and ``docs/performance-summary-archive.md``
  (NeMo containers 25.09, 25.11, 26.02; "System: DGX-H100" tables and the 26.02 per-model tables' DGX-H100
  rows), run with the Megatron-Bridge performance recipes (``scripts/performance/configs/*/
  *workload_base_configs.py``): ``release`` is the container, the recipe ``BRIDGE_H100`` (25.09's
  ``BRIDGE_H100_2509`` where it differs, ``bridge_recipe``).
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

NVIDIA notes that MoE runs force-balance the router ("we force-balance the token distribution among experts";
the Megatron-LM recipes set ``moe_router_force_load_balancing``) and are dropless unless the row says
token-drop. These are measurements to *check* the model against, never to fit a constant to: nothing here
feeds back into a preset.

Each distinct configuration is one row (identical configurations published by several releases are merged;
the row compares with the newest release and lists the others).

Qwen3-30B-A3B on H100, dropless against token-drop: NVIDIA's own tracker (NVIDIA-NeMo/Megatron-Bridge issue
#1998, "[Regression] Low QWEN3 30B B200 and H100 performance with dropless", open when read: "2X slower
performance in QWEN3 30B on H100 and B200 with the dropless schedule compared to the token-drop schedule ...
the perf in 25.11 is 2X slower than 25.09") calls the 25.11/26.02 dropless rows a software regression, not a
recipe setting: same recipe (pp 2, ep 8, alltoall dispatcher, no recomputation, no CUDA graphs on H100), the
25.09 run with ``apply_moe_token_drop`` (capacity factor 1, padded: no host sync on the token counts). Its root
cause is not published, so nothing here models it; the 25.09 token-drop row is the one to judge the MoE costing
by.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nemo_h100_recipes import MLM_QWEN3_30B_BF16, MLM_QWEN3_30B_FP8, MLM_QWEN3_235B_BF16, Recipe, bridge_recipe


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
    recipe: Recipe | None = None  # None: Megatron-Bridge's H100 recipe of the model in that release (bridge_recipe)
    # a performance regression its maintainers reported for this run (issue cited): a measurement of a defect of
    # that release, not of the machine, so the summary also gives the means without it
    regression: str = ""

    @property
    def run_recipe(self) -> Recipe:
        return self.recipe if self.recipe is not None else bridge_recipe(self.model, self.release)

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
# "We have 2X slower performance in QWEN3 30B on H100 and B200 with the dropless schedule compared to the
# token-drop schedule. Basically, the perf in 25.11 is 2X slower than 25.09. We need to fix this in 26.02."
# (NVIDIA-NeMo/Megatron-Bridge issue #1998, 2026-01-20, labelled performance/release, open)
_QWEN30B_REGRESSION = "Megatron-Bridge issue #1998 (dropless Qwen3-30B 2x slower from 25.11, open)"
_QWEN30B_VP = "the tables print VP 24; the recipe files of 25.09/25.11 set vp 12 (rows run as printed)"

# Megatron-Bridge's DGX-H100 rows, newest release first within a configuration. 25.09's table has no precision
# column; its footnote gives the H100 fp8 block-scaling variant in parentheses, so those rows are the FP8-CS runs.
BRIDGE_ROWS = (
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
                   + _QWEN30B_NOTE, regression=_QWEN30B_REGRESSION),
    Published("qwen3-30b-a3b", "25.11", 16, "fp8", 512, 2, 4096, False, 1, 2, 1, 24, 8, 5275, 121,
              note=f"{_QWEN30B_NOTE}; {_QWEN30B_VP}", regression=_QWEN30B_REGRESSION),
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
    same = [p for p in BRIDGE_ROWS if p.model == model and p.seq == seq]
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


# Megatron-LM's H100 MoE recipe runs (pull request #5728, and the older values of #5289 it replaces), each with its
# recipe (nemo_h100_recipes: the YAML settings, with sources).
_MLM_NOTE = "Megatron-LM H100 recipe; TFLOP/s published, tokens/s = TFLOP/s over NVIDIA's FLOPs per token"
_MLM_OLD = "README value #5728 replaced (#5289: 'curated benchmark sources'), same recipe"
MLM_ROWS = (
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
PUBLISHED = BRIDGE_ROWS + MLM_ROWS


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
    for pub in PUBLISHED:
        if pub.config in by:
            by[pub.config].others.append(pub)
        else:
            by[pub.config] = Row(pub)
    return list(by.values())
