"""Whose Python issues a GPU layer's kernels (``mapping.host_framework``), and what it costs the host.

``plan.launch`` counts the host's work per op kind from Megatron-LM v2.x's GPT layer (``KERNELS``, ``HOST_CALLS``:
460 µs forward, 504 µs backward per layer on a DGX A100's host). Later frameworks run the same ops through
heavier Python, above all in the linear layers, which is what a small, host-bound job pays. The frameworks:

- **'megatron-lm'**: Megatron-LM v2.x's own ``mpu`` layers (2020-22): ``plan.launch``'s counts.
- **'mcore'**: Megatron-Core's local tensor-parallel linears (``megatron/core/tensor_parallel/layers.py``
  ``ColumnParallelLinear``/``RowParallelLinear``), which Megatron-LM's legacy models build from 2023 on
  (``megatron/model/transformer.py``'s ``ParallelMLP``/``ParallelAttention``: ``tensor_parallel.ColumnParallelLinear``)
  and Megatron-Core's local layer spec uses (``get_gpt_layer_local_spec``, ``--transformer-impl local``).
- **'pytorch'**: plain PyTorch modules run eagerly (torchtitan's Llama, Hugging Face's): the host's counts are
  v2.x's (a module call and its functional per op), but each RMSNorm and gated activation is a chain of ATen
  kernels on the device and on the host (``perf.eager_ops``, ``eager_pointwise`` below).
- **'pytorch-compile'**: the same modules under ``torch.compile`` (torchtitan's per-block compile): inductor fuses
  each pointwise chain into one or two kernels, so the ops cost the one pass Megatron's fused kernels do; host
  counts v2.x's (compile's lighter host, a few launches per fused region, is not modelled: such runs are far from
  host-bound).
- **'megatron-deepspeed'**: Microsoft's Megatron-DeepSpeed, whose layers are v2.x's ``mpu`` fork (``plan.launch``'s
  counts) and whose ``ParallelTransformerLayer.forward`` adds two blocking host-to-device copies before the MLP
  (``plan.deepspeed_host``).
- **'mcore-te'**: Megatron-Core with Transformer Engine's modules: ``TELayerNormColumnParallelLinear`` (TE's
  ``LayerNormLinear``: the LayerNorm fused into the QKV and fc1 linears) and ``TERowParallelLinear`` (TE's
  ``Linear``). Megatron-Core's first GPT (``pretrain_gpt_core.py``, 2023) used them whatever
  ``--transformer-impl`` said (``megatron/core/transformer/attention.py`` @ 1dcf12d695f462a7da98168757cfadeed76d45a6
  imports ``TELayerNormColumnParallelLinear``, ``TERowParallelLinear``, ``TEDotProductAttention``; its
  ``transformer_layer.py`` makes both LayerNorms ``IdentityOp``); later the TE layer spec, NeMo's recipes.

**Forward of a linear layer, measured.** NVIDIA/TransformerEngine pull request #1191 (T. Moon, 2024-09-18) timed
the CPU runtime of one forward pass of Megatron-Core's modules in bf16 at tp 1 (Megatron-LM @ 6b35ca80): the local
``ColumnParallelLinear`` 74 µs, ``TEColumnParallelLinear`` 140 µs (115 µs after that PR's optimisations: memoised
process-group properties, no ``cpu_offload`` import per call, fewer ``nn.Module.__setattr__`` and tensor-attribute
reads — "many basic PyTorch operations, e.g. getting attributes from torch.Tensor, involve O(1 us) overhead").
Each is one GEMM launch (``host_dispatch_s``) and the rest framework calls (``host_call_s``), at the presets' 10 µs
and 3 µs: local (74 − 10) / 3 = 21 calls, TE (140 − 10) / 3 = 43 calls, against v2.x's 8 (``plan.launch``: the
module, the region Function, the matmul Function, its saves). The local linear's bias add, a second launch in
Megatron-Core's ``LinearWithGradAccumulationAndAsyncCommunication``, is inside the 74 µs. TE's is the pre-#1191
figure: TE ≤ 1.10, the 2023-24 containers; later TE (1.11+, and 2.x's CPU-overhead work, pull requests #2146,
#2439, #2559) costs less and is not modelled. The measuring host is not named: taken at the presets' call costs.

**Backward of a TE linear, counted** (``transformer_engine/pytorch/module/linear.py`` ``_Linear.backward`` @
0004dbd0231cb02d7b47d45344900a494fa13f46, bf16, no userbuffers): two GEMM launches — the data gradient and the
weight gradient, whose cuBLASLt epilogue also reduces the bias gradient (``gemm(..., grad=True, use_bias=...)``),
no separate reduction as v2.x's — and 22 calls: the Function's backward (3, as ``plan.launch`` counts a Python
``Function``), the NVTX range's push and pop (2), ``ctx.saved_tensors`` (1), ``grad_output_preprocess``'s call,
``contiguous`` and ``view`` (3), each GEMM's Python wrapper (``cpp_extensions/gemm.py`` ``gemm``: the wrapper, the
``_empty_tensor()``, the output's ``torch.empty``, the bias gradient's ``torch.empty`` or the dtype lookups: 4,
twice), ``get_workspace()`` twice (2), ``clear_tensor_data`` twice (2) and the input gradient's ``view`` (1). The
tensor-parallel all-reduce of the data gradient is a collective call, charged as any (``plan.launch``). The local
linear's backward (its Function, the two GEMMs and the bias sum) is v2.x's count.

**The LayerNorm inside TE's LayerNormLinear, counted** (``layernorm_linear.py`` ``_LayerNormLinear`` @ 0004dbd):
forward, ``tex.layernorm_fwd``'s launch (through ``_apply_normalization``) and 6 calls beside the linear's — the
weight's ``numel``, the LayerNorm weight's and bias's ``cast_if_needed``, the output's ``torch.empty_like``,
``_apply_normalization``'s Python and ``get_fp8_te_dtype`` (called in bf16 too); backward, ``tex.layernorm_bwd``'s
launch and 2 calls: its gradient's ``view`` and the finalize kernel (the γ/β reduction) that TE launches from C++
(a launch without Python, autograd or ATen: counted as a call, as ``plan.moe_host`` counts TE's C++ launches). The
module's own call, ``prepare_forward`` and the Function are in the linear's count already; the LayerNorm's
``IdentityOp`` module that the layer still calls (``transformer_layer.py`` @ 1dcf12d: ``input_layernorm`` and
``post_self_attn_layernorm`` are ``IdentityOp`` s under TE) adds its module call: 7 calls forward.

**The layer's end** (both Megatron-Core frameworks): ``make_viewless_tensor(output, ..., keep_graph=True)`` on the
layer's output (``transformer_layer.py`` @ 1dcf12d; the legacy ``megatron/model/transformer.py``
``ParallelTransformerLayer`` ends with the same ``core.utils.make_viewless_tensor``): the helper,
``MakeViewlessTensor.apply`` (3), ``_kernel_make_viewless_tensor``, its ``torch.empty((1,))`` and the ``.data``
swap — 7 calls forward, the Function's backward (3). Charged with the attention op, which opens the segment the
layer's end falls in (after the MLP's all-reduce, before the next layer's projection's), as ``plan.launch``
charges the layer's own module call with a LayerNorm.

Left out (each makes the TE layer's host time longer, so the model is a lower bound there): the rest of a
Megatron-Core layer is charged v2.x's counts — ``TEDotProductAttention``'s backend selection and argument checks,
the 2023 attention's ``repeat_interleave`` of K and V (``attention.py`` @ 1dcf12d calls it even when every query
group has one head: with an int it is ``fill_``, the index kernels and an ``index_select`` copy, about four
launches each, forward, and their ``index_add`` backward: version-dependent, so not charged to the framework), the
``ModuleSpec``-built submodules' extra module calls; and the device side of the difference (TE's fused bias
gradient, its two-kernel LayerNorm backward: ``KERNELS`` stay v2.x's, ≈1 µs each).

**Attention kernel** (``attention_device``): the fused attention the framework runs, whose rates the device gives
(``Compute.flash_efficiency``). Megatron frameworks run Transformer Engine's ``DotProductAttention`` (or
flash-attn): the ``flash_*`` fields, cuDNN's fused attention on Hopper, FlashAttention-2 on Ampere. 'pytorch' and
'pytorch-compile' (torchtitan, Hugging Face) call ``F.scaled_dot_product_attention``, whose backend priority
puts FlashAttention-2 first (flash, efficient, math, cuDNN: pytorch/pytorch issue #138907; issue #141133 on why
cuDNN is not auto-selected; issue #142132, torch 2.6 nightly of December 2024: "native sdpa" 329 against cuDNN's
631 TFLOP/s on H100): ``Compute.sdpa_flash``, when the device gives that kernel's rates apart.

**Default** (``mapping.host_framework`` None): 'megatron-lm', v2.x's counts, whatever the run. Not read from the
era as ``pipeline_p2p`` and ``overlap_dgrad_comm`` are: the counts differ by up to 2x per layer, so a default that
followed the recompute setting would make a small job's host time jump when only its recompute changes (a
layer-by-layer recompute sweep would cross frameworks). A Megatron-Core run says which layers it runs: 'mcore'
(its local layers) or 'mcore-te' (Transformer Engine's, NVIDIA's Megatron-Core and NeMo recipes):
``benchmarks/calibrate_nemo_h100.py`` and the Megatron-LM CI rows of ``calibrate_public_megatron_logs.py`` set it.
Inference keeps v2.x's counts (a serving runtime's layers are neither framework's).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tilewright.engine.ir.hardware import Compute
from tilewright.engine.ir.mapping import HostFramework
from tilewright.engine.ir.ops import Op
from tilewright.engine.perf.device import DeviceModel, issues_kernels
from tilewright.engine.perf.eager_ops import eager_chain
from tilewright.engine.perf.op_cost import OpTime, shard
from tilewright.engine.plan.launch import extra_launches, host_launches
from tilewright.engine.plan.pass_records import PassContext


def host_framework(chosen: HostFramework | None, compute: Compute, train: bool) -> HostFramework:
    """``mapping.host_framework`` resolved (module docstring): the choice for GPU training, v2.x's counts
    ('megatron-lm') when unset, in inference and on devices no host framework drives kernel by kernel."""
    if chosen is None or not train or not issues_kernels(compute):
        return "megatron-lm"
    return chosen


# the frameworks whose attention is PyTorch's scaled_dot_product_attention (module docstring)
SDPA_FRAMEWORKS: frozenset[HostFramework] = frozenset({"pytorch", "pytorch-compile"})


def attention_device(dev: DeviceModel, framework: HostFramework) -> DeviceModel:
    """``dev`` as ``framework`` runs its fused attention (module docstring, ``DeviceModel.flash_parts``): with
    SDPA's default kernel for the plain-PyTorch frameworks, the device's own ``flash_*`` kernel otherwise. The one
    place that says which kernel a framework runs; ``framework`` is the resolved one (``host_framework``)."""
    return replace(dev, sdpa_attention=True) if framework in SDPA_FRAMEWORKS else dev


@dataclass(frozen=True, slots=True)
class EagerExtra:
    """What an op's eager kernel chain costs beyond what ``op_cost`` and ``launch.extra_launches`` charged it."""

    device_s: float  # device time of the chain over the charged pass's
    local_bytes: float  # bytes through device memory over the charged pass's
    launches: int  # kernel launches the host issues over ``launch.host_launches``


def eager_pointwise(op: Op, backward: bool, fused: tuple[bool, bool], c: PassContext, t: OpTime) -> EagerExtra | None:
    """The eager kernel chain of a pointwise op under 'pytorch' (``perf.eager_ops``), set against the one pass
    ``t`` that ``op_cost`` charged and the kernels ``launch.extra_launches`` added: each kernel a memory-bound pass
    through local DRAM at its achievable bandwidth with the ramp (``DeviceModel.stream_s``) plus the per-kernel
    floor (``Compute.fixed_op_s``), as the MoE dispatcher's kernels are (``plan.passes``), and a launch on the
    host beyond ``launch.host_launches``. None for other frameworks, an op fused with a neighbour
    (``mapping.fusion`` keeps it one pass), devices no host drives kernel by kernel, and ops eager PyTorch runs as
    one kernel."""
    dev = c.dev
    if c.host_framework != "pytorch" or any(fused) or dev.local_dram is None or not issues_kernels(dev.compute):
        return None
    chain = eager_chain(op, backward, c.elem_bytes)
    elems = op.out_elems * c.micro_batch / shard(op, c.tp, c.sequence_parallel)  # the output on this rank
    if chain is None or elems <= 0:
        return None
    seconds = sum(dev.stream_s(b * elems) + dev.compute.fixed_op_s for b in chain)
    charged = t.busy_s + extra_launches(op, backward, dev.compute)
    return EagerExtra(max(0.0, seconds - charged), max(0.0, sum(chain) * elems - t.local_bytes),
                      len(chain) - host_launches(op, backward, "pytorch"))
