"""Mapping IR: how a workload is split and placed onto the devices of a system."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from tilewright.engine.ir.common import DType, MathFidelity, QuietDefaultsModel, StrictModel

PosInt = Annotated[int, Field(ge=1)]


class Schedule(StrEnum):
    gpipe = "gpipe"
    one_f_one_b = "1f1b"
    interleaved = "interleaved-1f1b"


class Recompute(StrEnum):
    none = "none"
    selective = "selective"
    full = "full"


class PlacementStrategy(StrEnum):
    """Order in which pipeline stages take device groups on a grid."""

    row_major = "row-major"
    snake = "snake"  # boustrophedon: consecutive stages stay neighbours at row ends
    block = "block"  # each stage a compact rectangle of the grid


HyparChoice = Literal["dp", "mp"]
PipelineP2PMode = Literal["overlap", "blocking", "megatron-lm"]  # how pipeline sends run (plan.pipeline_p2p)
HostFramework = Literal[  # whose Python issues GPU kernels (plan.framework_host)
    "megatron-lm", "mcore", "mcore-te", "pytorch", "pytorch-compile", "megatron-deepspeed"
]


class LayerParallelism(StrictModel):
    """HyPar (Song et al., HPCA 2019): one layer's choice between data and model parallelism at each level
    of halving the data-parallel array (level 1 = the top cut between the two halves of the whole array).

    ``levels`` holds one choice per level. ``parallelism`` alone (older files, or a hand-written "this
    layer is model-parallel") means that choice at *every* level; with ``levels`` it is the top-level
    choice and is filled in from ``levels[0]``, so readers that only know ``parallelism`` see the cut
    that crosses the array's root links. Layers a mapping does not list are data-parallel at every level.
    """

    layer: Annotated[int, Field(ge=0)]
    parallelism: HyparChoice | None = Field(
        None, description="alone: the choice at every level; with levels: the top-level choice (levels[0])"
    )
    levels: list[HyparChoice] = Field(
        default_factory=list, description="one choice per level of halving, level 1 (the top cut) first"
    )

    @model_validator(mode="after")
    def _one_meaning(self) -> LayerParallelism:
        if self.parallelism is None and not self.levels:
            raise ValueError("parallelism: give parallelism (every level) or levels (one choice per level)")
        if self.levels:
            if self.parallelism is not None and self.parallelism != self.levels[0]:
                raise ValueError(
                    f"parallelism: '{self.parallelism}' differs from the top-level choice levels[0] = "
                    f"'{self.levels[0]}'"
                )
            object.__setattr__(self, "parallelism", self.levels[0])
        return self

    def choices(self, levels: int) -> list[HyparChoice]:
        """The choice at each of ``levels`` levels (top first); a single choice repeats at every level."""
        if self.levels:
            return list(self.levels)
        assert self.parallelism is not None  # the validator guarantees one of the two
        return [self.parallelism] * levels


class StagePlacement(StrictModel):
    """Explicit placement: a half-open range of workload layers → a pipeline stage → devices."""

    stage: Annotated[int, Field(ge=0)]
    layers: tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=1)]] = Field(
        description="[first, last) layer indices"
    )
    devices: list[Annotated[int, Field(ge=0)]] = Field(
        default_factory=list, description="device indices of the stage's group; empty = by strategy"
    )

    @model_validator(mode="after")
    def _range(self) -> StagePlacement:
        if self.layers[1] <= self.layers[0]:
            raise ValueError(f"layers: empty range [{self.layers[0]}, {self.layers[1]})")
        return self


MemoryCategory = Literal["weights", "gradients", "optimizer", "activations", "kv_cache"]


class Fp8Scaling(StrEnum):
    """How an fp8 run scales its tensors: Transformer Engine's training recipes
    (transformer_engine/common/recipe/__init__.py). The recipe decides the quantization kernels around every fp8
    GEMM (``perf.op_cost.fp8_cast_passes``), so it is a cost, not only a numerics, choice."""

    delayed = "delayed"  # DelayedScaling: the scale from an amax history, the amax fused into the cast
    tensor = "tensor"  # Float8CurrentScaling (FP8-CS): per-tensor amax pass, then the scaled cast
    block = "block"  # Float8BlockScaling: 1×128 activation / 128×128 weight blocks, fp32 scales (DeepSeek-V3)
    mxfp8 = "mxfp8"  # MXFP8BlockScaling: 1×32 blocks, E8M0 scales applied by the tensor cores (Blackwell)


class TensorFormats(QuietDefaultsModel):
    """Storage format of each kind of tensor; None = the run's data type. Real deployments mix them
    (bfp8 attention weights, bfp4 MLP weights, bf16 activations, bfp8 KV cache); every byte count of the
    plan (weight streams, activations, the KV cache) uses the format of the tensor it moves."""

    _quiet = ("weights_by_op", "fidelity_by_op", "fp8_scaling", "bf16_first_layers", "bf16_last_layers",
              "collectives", "collectives_by_op")

    weights: DType | None = None
    activations: DType | None = None
    kv_cache: DType | None = None
    weights_by_op: dict[str, DType] = Field(
        default_factory=dict,
        description="weights' format of the ops whose name within the layer matches a glob pattern "
        "(e.g. {'mlp_up': 'bfp4', 'mlp_gate': 'bfp4'} or {'mlp_*': 'bfp4'}), over ``weights``; the first "
        "matching pattern wins",
    )
    fidelity_by_op: dict[str, MathFidelity] = Field(
        default_factory=dict,
        description="matrix-engine fidelity of the ops matching a glob pattern, over ``mapping.fidelity``; "
        "unmatched ops keep it (or the default of their weights' format)",
    )
    fp8_scaling: Fp8Scaling | None = Field(
        None,
        description="scaling recipe of the fp8 GEMMs (Transformer Engine's): 'delayed', 'tensor' (current "
        "scaling, the default), 'block' (1×128 / 128×128 blocks) or 'mxfp8' (Blackwell's 1×32 microscaling); "
        "only with fp8 weights",
    )
    bf16_first_layers: Annotated[int, Field(ge=0)] = Field(
        0, description="fp8 training: the first N transformer layers of the model run outside fp8 (their GEMMs, "
        "quantization and weights bf16), Megatron-Core --first-last-layers-bf16 --num-layers-at-start-in-bf16 N "
        "(counted over the whole model, not per pipeline stage; perf.formats.edge_layers)",
    )
    bf16_last_layers: Annotated[int, Field(ge=0)] = Field(
        0, description="fp8 training: the last N transformer layers of the model in bf16, Megatron-Core "
        "--num-layers-at-end-in-bf16 N (multi-token-prediction layers are not among them: they stay fp8)",
    )
    collectives: DType | None = Field(
        None, description="format of the activations the tensor-parallel collectives send (None: the activations' "
        "format); a runtime may send its matmuls' outputs narrower than it keeps activations (tt-metal's "
        "llama3_70b_galaxy reduces WO, FF1, FF3 and FF2 in bfloat8_b) (perf.formats.OpFormats.message_bytes)",
    )
    collectives_by_op: dict[str, DType] = Field(
        default_factory=dict,
        description="format of the tensor-parallel collectives after the ops whose name within the layer matches "
        "a glob pattern (e.g. {'out_proj': 'bfp8', 'mlp_*': 'bfp8'}), over ``collectives``; first match wins",
    )


class SpatialPolicy(StrEnum):
    """How an op is spread over the cores inside one device that has a grid (``Compute.grid``)."""

    auto = "auto"  # the cheapest of the 2-D and 1-D splits (with K-split), by the cost model
    two_d = "2d"  # output blocks over rows × cols, A multicast along rows, B along columns
    one_d = "1d"  # one line of cores: one operand multicast to every core, the other split
    runtime_default = "runtime-default"  # what the vendor runtime picks with no program config (ttnn)


class WeightPlacement(StrEnum):
    """Where a grid device keeps its weights in DRAM (what the runtime's memory config says)."""

    interleaved = "interleaved"  # pages round-robin over every bank, read by arbitrary cores (the default)
    sharded = "sharded"  # width-sharded one slice per bank, each read by a core next to its bank (decode matmuls)
    # sharded, and in a decode step streamed by a DRAM prefetcher on its own cores into L1 ring buffers of the
    # matmul cores while every other op runs (tt-metal's dram_prefetcher, models/demos/llama3_70b_galaxy);
    # prefill reads them as ``sharded`` (``spatial_op.gemm_op``, ``inference_phases.with_prefetch_floor``)
    prefetched = "prefetched"


class SpatialSplit(StrictModel):
    """The split inside each device (nested mapping: tp/pp/dp count devices, this splits each op over the
    device's cores). ``grid``: use only ``rows × cols`` of the device's cores (default: all of them).
    ``weights``: DRAM placement of the weights; ``sharded`` is tt-metal's DRAM-sharded decode matmul
    (Saturating_DRAM_bandwidth.md): a 1-D split whose weight columns are read bank-adjacent; ``prefetched``
    adds a decode-step DRAM prefetcher that streams them into the matmul cores' L1 behind the other ops."""

    policy: SpatialPolicy = SpatialPolicy.auto
    grid: tuple[PosInt, PosInt] | None = None
    weights: WeightPlacement = WeightPlacement.interleaved


def tp_axes_for(axes: tuple[int, int] | None, tp: int) -> tuple[int, int] | None:
    """``axes`` (``Mapping.tp_axes``) while they still lay out ``tp`` devices, else None (1-D): what a mapping
    derived with another tp (a search candidate, a serving group, ``--tp``) keeps of a 2-D layout."""
    return axes if axes is not None and axes[0] * axes[1] == tp else None


def parse_pipeline_layout(text: str) -> list[int]:
    """``mapping.pipeline_layers`` as written by hand: layers per virtual stage, comma-separated, ``N*K`` for K
    stages of N ("1,2*30,0": DeepSeek-V3's 'Et|(tt|)*30mL'). ValueError names what is wrong."""
    out: list[int] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        count, _, times = part.partition("*")
        try:
            n, k = int(count), int(times) if times else 1
        except ValueError:
            raise ValueError(f"{part!r}: give layers per virtual stage, N*K for K stages of N "
                             "(e.g. 1,2*30,0)") from None
        if n < 0 or k < 1:
            raise ValueError(f"{part!r}: layers must be ≥ 0 and repeats ≥ 1")
        out += [n] * k
    if not out:
        raise ValueError("give layers per virtual stage, comma-separated (e.g. 1,2*30,0)")
    return out


def format_pipeline_layout(layout: list[int]) -> str:
    """The short form ``parse_pipeline_layout`` reads: runs of equal counts as ``N*K``."""
    parts: list[str] = []
    i = 0
    while i < len(layout):
        j = i
        while j < len(layout) and layout[j] == layout[i]:
            j += 1
        parts.append(str(layout[i]) if j - i == 1 else f"{layout[i]}*{j - i}")
        i = j
    return ",".join(parts)


class Mapping(QuietDefaultsModel):
    _quiet = (
        "tp_overlap_reduce_scatter",
        "formats", "fidelity", "spatial", "overlap_param_gather", "fsdp", "cp", "ep", "expert_imbalance", "tp_axes",
        "expert_tp", "overlap_ep_comm", "ep_dispatcher", "recompute_layers", "fused_cross_entropy", "fp8_param_gather",
        "overlap_tp_comm", "pipeline_layers", "recompute_modules", "cuda_graph_scope", "moe_router_fusion",
        "optimizer_moments", "delay_wgrad_compute", "grad_reduce_in_fp32", "optimizer_master",
        "overlap_param_gather_with_optimizer_step", "gradient_accumulation_fusion", "tp_axes_collectives",
        "pipeline_p2p", "offload_layers", "overlap_dgrad_comm", "host_framework",
        "log_params_norm", "log_num_zeros_in_grad", "timing_log_level", "check_for_nan_in_loss_and_grad",
        "fsdp_copies",
    )

    tp: PosInt = 1
    tp_axes: tuple[PosInt, PosInt] | None = Field(
        None,
        description="2-D tensor parallelism: the tensor group laid out rows × cols (product tp, ranks "
        "row-major); column-parallel ops all-reduce over each column (rows devices), row-parallel ops over each "
        "row (cols devices), as tt-transformers on a Galaxy mesh; None: every collective spans the whole group",
    )
    tp_axes_collectives: Literal["all-reduce", "scatter-gather", "tt-transformers"] = Field(
        "all-reduce", description="2-D tensor parallelism: how a column-parallel op's partial sums are combined. "
        "'all-reduce': each all-reduced along its column; 'scatter-gather' (tt-metal's "
        "llama3_70b_galaxy): each reduce-scattered, the element-wise ops after it (attention, SiLU mul) run on "
        "its shard, and their output all-gathered once before the row-parallel op; 'tt-transformers': the calls "
        "tt-transformers' TG code makes (the norms' statistics gathered, QKV's partial sums gathered and summed "
        "locally, the users gathered after attention; at hidden 8192 FF1/FF3 reduce-scattered and their product "
        "gathered, WO/FF2 reduce-scattered then gathered; below it every partial sum gathered), its decode's "
        "messages padded to whole tiles of rows (plan.tensor_axes)",
    )
    pp: PosInt = 1
    dp: PosInt = 1
    cp: PosInt = Field(
        1, description="context parallelism: each sequence split over cp ranks, K/V passed around a ring (training)"
    )
    ep: PosInt = Field(
        1, description="expert parallelism: routed experts split over ep of the dp replicas (of the tp × dp ranks "
        "with expert_tp below tp), tokens sent all-to-all"
    )
    expert_tp: PosInt | None = Field(
        None, description="expert tensor parallelism: each routed expert's weights split over expert_tp ranks "
        "(Megatron-Core --expert-tensor-parallel-size); the ep × expert_tp expert ranks fold over the stage's "
        "tp × dp ranks (MoE parallel folding, plan.experts); None: tp",
    )
    expert_imbalance: Annotated[float, Field(ge=1.0)] | None = Field(
        None, description="busiest expert-parallel rank's routed tokens over the mean (1 = exactly balanced; "
        "no effect at ep 1, where one rank runs every expert over all the routed tokens). None: dropless "
        "routing takes the statistical floor of balanced routing probabilities at the run's tokens per "
        "micro-batch (plan.routing_imbalance), capacity-padded routing 1; a value given here, 1 included, wins"
    )
    sequence_parallel: bool = False
    interleave: PosInt = Field(1, description="model chunks per device (interleaved 1F1B)")
    pipeline_layers: list[Annotated[int, Field(ge=0)]] | None = Field(
        None, description="transformer layers of each virtual stage in order (pp × interleave entries, virtual "
        "stage k on pipeline rank k mod pp), the embedding joining the first and the head the last (Megatron-Core "
        "pipeline_model_parallel_layout, e.g. NVIDIA's 'Et|(tt|)*30mL'); None: an even split",
    )
    micro_batch: PosInt = 1
    global_batch: PosInt = 1
    schedule: Schedule = Schedule.one_f_one_b
    pipeline_p2p: PipelineP2PMode | None = Field(
        None, description="training pipelines: 'overlap' lets a stage compute while its send is in flight (Megatron-"
        "Core's interleaved schedule with --overlap-p2p-comm); 'blocking' makes it wait for each send and the receive "
        "paired with it (Megatron-Core's non-interleaved 1F1B); 'megatron-lm' blocks and all-gathers each received "
        "tensor over the tensor group (Megatron-LM v2.x-v3.0's --scatter-gather-tensors-in-pipeline, without "
        "sequence parallelism); None: 'megatron-lm' for GPU training with full recompute (--checkpoint-activations), "
        "else 'overlap' (plan.pipeline_p2p)",
    )
    host_framework: HostFramework | None = Field(
        None, description="GPU training: whose Python issues a layer's kernels, for the host's time per op "
        "(plan.framework_host): 'megatron-lm' Megatron-LM v2.x's own layers; 'mcore' Megatron-Core's local "
        "tensor-parallel linears (legacy models from 2023 on, Megatron-Core's local spec); 'mcore-te' Megatron-Core "
        "with Transformer Engine's modules (--transformer-impl transformer_engine, NeMo); 'pytorch' plain PyTorch "
        "modules run eagerly (torchtitan, Hugging Face): each RMSNorm and gated activation a chain of ATen kernels "
        "(perf.eager_ops); 'pytorch-compile' the same under torch.compile (one pass each); 'megatron-deepspeed' "
        "Microsoft's Megatron-DeepSpeed: v2.x's layers and two blocking scalar copies per layer forward "
        "(plan.deepspeed_host); None: 'megatron-lm' "
        "(a default that followed recompute would make host time jump when only recompute changes)",
    )
    overlap_dgrad_comm: bool | None = Field(
        None, description="training at tp > 1: each column-parallel linear's input-gradient all-reduce (reduce-scatter "
        "with sequence parallelism) launched asynchronously and hidden behind its own weight-gradient GEMM, only what "
        "that GEMM cannot cover showing (Megatron-LM --async-tensor-model-parallel-allreduce, on by default from late "
        "2021; Megatron-Core, Transformer Engine); False: each blocks; None: False for GPU training with full "
        "recompute (Megatron-LM v2.x --checkpoint-activations, as pipeline_p2p reads it) and on devices no GPU "
        "framework drives, else True "
        "(plan.dgrad_overlap). Under overlap_tp_comm userbuffers overlap it already",
    )
    recompute: Recompute = Recompute.none
    recompute_layers: PosInt | None = Field(
        None, description="with recompute 'full': re-run only the first N transformer layers of each model chunk "
        "and keep every activation of the others (Megatron --recompute-method block --recompute-num-layers N); "
        "None: every layer",
    )
    recompute_modules: list[str] | None = Field(
        None, description="with recompute 'selective': the parts of each layer re-run in the backward, Megatron-Core's "
        "recompute_modules (core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts; perf.recompute), "
        "or torchtitan's op-level policy op_sac; "
        "None: ['core_attn'], the attention core",
    )
    cuda_graph_scope: list[str] | None = Field(
        None, description="GPU training: the parts of each layer replayed as CUDA graphs, Megatron-Core's "
        "--cuda-graph-scope (attn, mlp, moe, moe_router, moe_preprocess, mamba; full_iteration alone, "
        "--cuda-graph-impl local): their kernels cost the host one graph launch instead of one dispatch each "
        "(plan.cuda_graphs); None: no graphs, eager",
    )
    fused_cross_entropy: bool = Field(
        False, description="GPUs: the cross-entropy as one fused kernel (Megatron-Core --cross-entropy-loss-fusion, "
        "NVIDIA's recipes) instead of Megatron-LM's eager vocab-parallel kernels over fp32 logits (plan.launch)",
    )
    gradient_accumulation_fusion: bool = Field(
        True, description="GPU training: the linear layers' weight-gradient GEMMs accumulate straight into the "
        "gradient buffer (Megatron's default since v3.0 and in Megatron-Core); False "
        "(--no-gradient-accumulation-fusion, and Megatron-LM v2.x, which lacks it): each weight's gradient hook adds "
        "it with a main_grad.add_ kernel (plan.grad_hooks)",
    )
    log_params_norm: bool = Field(
        False, description="GPU training: every iteration takes the parameters' L2 norm (Megatron --log-params-norm: "
        "a multi-tensor norm, an all-reduce over the model-parallel group, a .item(); plan.train_logging)",
    )
    log_num_zeros_in_grad: bool = Field(
        False, description="GPU training: every optimizer step counts the gradients' zeros (Megatron "
        "--log-num-zeros-in-grad: count_nonzero per gradient tensor, an all-reduce, a .item(); plan.train_logging)",
    )
    timing_log_level: Annotated[int, Field(ge=0, le=2)] | None = Field(
        None, description="GPU training: Megatron's --timing-log-level, which timers exist (each start and stop "
        "synchronises the device): 2 every micro-batch's, 1 the iteration's parts (with barriers), 0 the iteration's; "
        "None: Megatron-LM v2.x-v3.0's, every timer without levels or barriers (plan.train_logging)",
    )
    check_for_nan_in_loss_and_grad: bool = Field(
        False, description="GPU training: each micro-batch's loss and each gradient bucket's norm checked for NaN "
        "with a host sync (Megatron-LM's default from late 2023, off with --no-check-for-nan-in-loss-and-grad; "
        "Megatron-LM v2.x-v3.0 has none; plan.train_logging)",
    )
    moe_router_fusion: bool = Field(
        False, description="GPU training of MoE models: the router's top-k, scores and aux loss as Transformer "
        "Engine's fused kernels (Megatron-Core --moe-router-fusion) instead of the eager chain (plan.moe_host)",
    )
    zero: Annotated[int, Field(ge=0, le=3)] = 0
    overlap_grad_reduce: bool = Field(
        False, description="reduce gradients in buckets during the last backward (Megatron --overlap-grad-reduce); "
        "ZeRO-2/3: each layer's reduce-scatter behind the next layer's backward. Implied by fsdp, whose "
        "reduce-scatters always run on a stream of their own (plan.sharding)"
    )
    overlap_param_gather: bool = Field(
        False, description="ZeRO-3/FSDP: all-gather the next layer's weights while the current one computes "
        "(prefetch; Megatron --overlap-param-gather, FSDP backward/forward prefetch); ZeRO-1/2: gather the updated "
        "weights bucket by bucket behind the next forward, not after the step (plan.param_gather)",
    )
    overlap_param_gather_with_optimizer_step: bool = Field(
        False, description="with overlap_param_gather and the distributed optimizer (ZeRO-1/2) under interleaved "
        "1F1B: step the first model chunk's parameters on their own, then launch that chunk's whole all-gather (one "
        "bucket) while the other chunks' parameters are stepped, so the next forward waits only for what that step "
        "cannot hide (Megatron-Core --overlap-param-gather-with-optimizer-step; plan.param_gather)",
    )
    fp8_param_gather: bool = Field(
        False, description="fp8 training with the distributed optimizer (ZeRO ≥ 1): keep the weights only as "
        "fp8 tensors, no bf16 copy, and all-gather them in fp8 after the step (Megatron-Core --fp8-param-gather; "
        "perf.memory.keeps_bf16_params)",
    )
    optimizer_moments: Literal["fp32", "bf16", "fp16", "fp8"] = Field(
        "fp32", description="mixed-precision Adam: the dtype of its two moments (Megatron-Core "
        "--use-precision-aware-optimizer --exp-avg-dtype D --exp-avg-sq-dtype D, both alike): 'bf16' and 'fp16' hold "
        "2 + 2 B per parameter instead of 4 + 4, 'fp8' 1 + 1; Transformer Engine's FusedAdam casts them to fp32 "
        "copies around its fp32 kernel, so the step streams more, not less (perf.memory.MOMENT_BYTES, "
        "plan.residency.adam_split); needs the distributed optimizer (zero ≥ 1)",
    )
    optimizer_master: Literal["fp32", "remainders", "fp16"] = Field(
        "fp32", description="mixed-precision Adam: how its master copy of the weights is held. 'fp32': 4 B per "
        "parameter; 'remainders': bf16 parameters plus the 16 low bits of each fp32 master value, 2 B, the exact fp32 "
        "value rebuilt in the kernel (Transformer Engine FusedAdam store_param_remainders, Megatron-Core's default "
        "under --use-precision-aware-optimizer; bf16 parameters only); 'fp16': an fp16 master with a per-tensor "
        "scale, 2 B (--main-params-dtype fp16). Held in the optimizer state, sharded by ZeRO ≥ 1, which it needs "
        "(perf.memory.MASTER_BYTES)",
    )
    grad_reduce_in_fp32: bool = Field(
        True, description="bf16/fp8 mixed precision: the gradient buffer the backward accumulates into and the "
        "data-parallel reduction moves is fp32 (4 B per parameter); False keeps it in the parameters' bf16 (2 B), "
        "as Megatron-Core's DistributedDataParallelConfig.grad_reduce_in_fp32=False (Megatron-LM forces it on for "
        "bf16; Megatron-Bridge's performance recipes turn it off). fp16 runs keep fp16 buffers either way "
        "(perf.memory.bytes_per_param)",
    )
    overlap_tp_comm: bool = Field(
        False, description="with sequence parallelism: pipeline each tensor-parallel all-gather and reduce-scatter "
        "with the GEMM beside it in tp chunks (Transformer Engine userbuffers, Megatron-Core --tp-comm-overlap); "
        "only what the GEMM cannot cover and one chunk show (plan.tp_overlap)",
    )
    tp_overlap_reduce_scatter: Literal["pipeline", "ring_exchange"] = Field(
        "pipeline", description="with overlap_tp_comm: how the forward's reduce-scatters after proj and fc2 "
        "overlap their GEMM; 'pipeline' runs the GEMM in 4 chunks, each chunk's reduce-scatter on 16 SMs taken "
        "from it (Transformer Engine PipelineOverlapCfg, NVIDIA's H100 bf16 recipes); 'ring_exchange' passes tp "
        "partial chunks around the ring on the copy engines with 1 SM set aside (RingExchangeOverlapCfg, their "
        "fp8 recipes); plan.tp_overlap",
    )
    overlap_ep_comm: bool = Field(
        False, description="MoE: hide each expert all-to-all behind the compute of another micro-batch's same "
        "layer (DeepSeek-V3's DualPipe, Megatron-Core --overlap-moe-expert-parallel-comm); only the excess shows",
    )
    delay_wgrad_compute: bool = Field(
        False, description="MoE with overlap_ep_comm: run the weight-gradient GEMMs apart from the input gradients, "
        "scheduled against the backward's all-to-all so they hide it too (Megatron-Core --delay-wgrad-compute: the "
        "routed experts' behind the dispatch's gradient, attention's and the shared experts' behind the next "
        "layer's combine gradient; plan.passes); needs overlap_ep_comm; nothing to hide at ep 1",
    )
    ep_dispatcher: Literal["alltoall", "deepep"] = Field(
        "alltoall", description="MoE token exchange: 'alltoall' sends each token to every expert's rank "
        "(Megatron-Core's alltoall dispatcher); 'deepep' sends it once per destination node over the network, "
        "then forwards it over the node's fabric to the GPUs of its experts (DeepEP, Megatron-Core's flex "
        "dispatcher; plan.experts)",
    )
    fsdp: bool = Field(
        False, description="PyTorch FSDP FULL_SHARD: ZeRO stage 3 with prefetch (sets zero 3 and overlap_param_gather) "
        "and its reduce-scatters overlapped with the backward whatever overlap_grad_reduce says (plan.sharding)"
    )
    fsdp_copies: bool = Field(
        False, description="with fsdp: PyTorch FSDP2's (fully_shard) copies on the compute stream — each layer's "
        "gathered weights split out of the all-gather buffer, its gradients copied (cast to the reduce dtype) into "
        "the reduce-scatter buffer (plan.sharding); off: sharding over flat buffers the layers view (Megatron-FSDP); "
        "no effect without ZeRO-3 weight gathers",
    )
    rank_order: Literal["tp-dp-pp", "tp-pp-dp"] = Field(
        "tp-dp-pp", description="fastest-varying parallel dimension first (Megatron: tp, then dp, then pp)"
    )
    placement: PlacementStrategy = PlacementStrategy.row_major
    stages: list[StagePlacement] = Field(default_factory=list, description="explicit placement overrides")
    layer_parallelism: list[LayerParallelism] = Field(default_factory=list)
    fusion: list[Annotated[list[str], Field(min_length=2)]] = Field(
        default_factory=list,
        description="chains of consecutive ops of a layer fused on chip, by their name within the layer "
        "(e.g. ['mlp_up', 'activation', 'mlp_down']): the intermediates never round-trip to DRAM",
    )
    memory_levels: dict[MemoryCategory, str] = Field(
        default_factory=dict,
        description="memory name holding each category (an SRAM, the DRAM, a host memory), or 'auto' for the "
        "fastest that fits; categories not named stay in the device's own memory",
    )
    offload_layers: Annotated[int, Field(ge=0)] | None = Field(
        None, description="training with memory_levels.activations in host memory: how many transformer layers "
        "of each model chunk, the first ones, copy their stored activations to the host (Megatron-Core "
        "cpu_offloading_num_layers, below the chunk's layers: the last one's backward starts as its forward ends, "
        "so it is never offloaded, plan.activation_offload); None: all but the last, the frameworks' maximum",
    )
    formats: TensorFormats = Field(
        default_factory=TensorFormats, description="storage format per tensor kind; unset = run.dtype"
    )
    fidelity: MathFidelity | None = Field(
        None, description="matrix-engine math fidelity on grid devices; None = by the weights' format"
    )
    spatial: SpatialSplit = Field(
        default_factory=SpatialSplit, description="split of each op over the cores of a grid device"
    )

    @field_validator("recompute_modules", "cuda_graph_scope", mode="before")
    @classmethod
    def _module_list(cls, value: object) -> object:
        """A comma-separated string ("layernorm,moe_act", as ``--set`` passes it) is the list it names."""
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _coherent(self) -> Mapping:
        if self.overlap_tp_comm and self.tp > 1 and not self.sequence_parallel:
            raise ValueError("overlap_tp_comm: overlapping tensor-parallel communication with the GEMMs needs "
                             "sequence_parallel (its all-gathers and reduce-scatters are what it pipelines)")
        if self.delay_wgrad_compute and not self.overlap_ep_comm:
            # Megatron-Core's TransformerConfig asserts overlap_moe_expert_parallel_comm; at ep 1, where there is
            # no all-to-all to hide, both are no-ops here (as overlap_tp_comm is at tp 1), so a degree change
            # alone never makes a mapping invalid
            raise ValueError("delay_wgrad_compute: deferring weight gradients behind the expert all-to-all needs "
                             "overlap_ep_comm")
        if self.overlap_param_gather_with_optimizer_step and not self.overlap_param_gather:
            # Megatron-LM's arguments.py: "Must use --overlap-param-gather-with-optimizer-step with
            # --overlap-param-gather"; its other needs (ZeRO-1/2, interleaving) depend on degrees: plan.checks
            raise ValueError("overlap_param_gather_with_optimizer_step: launching the first chunk's weight gather "
                             "during the optimizer step needs overlap_param_gather")
        if self.recompute_layers is not None and self.recompute is not Recompute.full:
            raise ValueError(f"recompute_layers: recomputing {self.recompute_layers} whole layers needs recompute "
                             f"'full', not '{self.recompute.value}'")
        if self.tp_axes is not None and self.tp_axes[0] * self.tp_axes[1] != self.tp:
            raise ValueError(f"tp_axes: {self.tp_axes[0]} × {self.tp_axes[1]} is not tp ({self.tp})")
        if self.fsdp:
            if self.zero not in (0, 3) and "zero" in self.model_fields_set:
                raise ValueError(f"fsdp: FSDP shards like ZeRO stage 3, not stage {self.zero}: set zero to 3 "
                                 "(--zero 3) or leave it unset")
            object.__setattr__(self, "zero", 3)
            if "overlap_param_gather" not in self.model_fields_set:
                object.__setattr__(self, "overlap_param_gather", True)
        if self.interleave > 1 and self.schedule is Schedule.one_f_one_b:
            # "--interleave N --schedule 1f1b" means interleaved 1F1B with N chunks per device.
            object.__setattr__(self, "schedule", Schedule.interleaved)
        if self.schedule is Schedule.interleaved and self.interleave == 1:
            raise ValueError("interleave: interleaved-1f1b needs 2 or more model chunks per device")
        if self.interleave > 1 and self.schedule is Schedule.gpipe:
            raise ValueError("interleave: only the 1f1b schedule interleaves model chunks")
        if self.global_batch % (self.micro_batch * self.dp):
            raise ValueError(
                f"global_batch: {self.global_batch} is not a multiple of micro_batch × dp "
                f"({self.micro_batch} × {self.dp})"
            )
        if self.stages:
            ids = sorted(s.stage for s in self.stages)
            if ids != list(range(len(ids))):
                raise ValueError("stages: stage numbers must run 0, 1, 2, … without gaps")
        return self

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def stage_devices(self) -> int:
        """Devices of one pipeline stage: its tensor, context and data-parallel ranks (tp × cp × dp)."""
        return self.tp * self.cp * self.dp

    @property
    def stage_split_text(self) -> str:
        """How a stage's devices split, as messages name it: "tp × dp", or "tp × cp × dp" with cp > 1."""
        return "tp × cp × dp" if self.cp > 1 else "tp × dp"

    @property
    def micro_batches(self) -> int:
        """Micro-batches per pipeline per iteration."""
        return self.global_batch // (self.micro_batch * self.dp)
