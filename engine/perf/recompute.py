"""What selective recomputation re-runs and stops storing: Megatron-Core's ``recompute_modules``.

Megatron-Core (``megatron/core/transformer/transformer_config.py``, ``recompute_modules``; the checks in its
``__post_init__``; ``transformer_layer.py``, ``multi_latent_attention.py``, ``moe/experts.py``) names the parts
of a transformer layer that selective recomputation re-runs in the backward. Two kinds of checkpoint:

- normal checkpointing (``tensor_parallel.checkpoint``): the module keeps only its input and re-runs its whole
  forward, collectives included, before its backward — ``core_attn`` (the attention core, default),
  ``mlp`` (a dense layer's MLP; with Transformer Engine the pre-MLP norm is fused into its first linear,
  ``TELayerNormColumnParallelLinear``, so it is inside the module), ``moe`` (the whole MoE layer: router,
  dispatch, experts, combine, shared experts) and ``shared_experts``;
- output-discarding checkpointing (``CheckpointWithoutOutput``): the module's output, which the next op saved
  for its own backward, is freed after the forward and recomputed from the module's stored input just before
  that op's backward — ``layernorm`` (the input and pre-MLP norms that are modules of their own, i.e. not
  fused into the following linear: TE's spec makes those ``IdentityOp`` and Megatron-Core skips them),
  ``moe_act`` (the routed experts' activation: the experts' down projection's saved input goes) and
  ``mla_up_proj`` (MLA's query and key/value up projections with RoPE: the Q, K, V the core keeps).

One policy that is not Megatron-Core's: ``op_sac``, torchtitan's op-level selective activation checkpointing
(pytorch/torchtitan ``torchtitan/parallelisms/parallelize_llama.py`` @ 004b3148a92b565ef0ce7a7bcc61e0159c7ec930,
``_save_list`` and the ``_custom_policy`` of ``_apply_ac_to_transformer_block``: inside each block's checkpoint
the outputs of ``aten.mm`` are kept only for odd-numbered calls — ``mm_count % 2 == 0`` is recomputed — and flash
attention's output is kept; every other op re-runs in the backward). A Llama block calls wq, wk, wv, wo, w1, w3,
w2 in that order, so wk, wo and w3 re-run (``out_proj`` and ``mlp_up``, the up projection that multiplies the
gated one), with the pointwise ops their backward needs (the norms, the first residual add, the SwiGLU product).
Our ``qkv`` is one op, so wk's re-run is not counted (1/6 of qkv with Llama 3's 8 KV heads of 32, 1/3 without
GQA).

``MODULES`` maps each name to the ops of our transformer block (``workloads.transformer_block``) in this one
table; ``selection`` turns a layer's ops and a module list into what each op re-runs and drops, which
``perf.memory`` (stored activations), ``plan.passes`` (the R pass), ``plan.hardware_flops`` (HFU) and
``plan.checks`` read. ``None`` means Megatron-Core's default, ``["core_attn"]``: the ops flagged
``Op.selective``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from tilewright.engine.ir.ops import MoERole, Op, OpKind, TensorSplit

Drop = Literal["saved", "output", "input", "none"]  # what of an op's own stored elements goes


@dataclass(frozen=True)
class Part:
    """Ops of a module that ``match``: whether they re-run and what of their stored elements is dropped —
    ``saved`` all (and fixed bytes), ``output`` the op's output (``out_elems``), ``input`` its input (a
    consumer saving the discarded output of the module before it), ``none`` nothing."""

    match: Callable[[Op, list[Op]], bool]
    rerun: bool
    drop: Drop
    whole: bool  # re-run as the module's forward, with its tensor-parallel collectives (normal checkpoint)


@dataclass(frozen=True)
class OpRecompute:
    """One op under selective recomputation: re-run in the backward, and elements / fixed bytes no longer
    stored for it (``Op.saved_elems``, ``Op.saved_bytes_fixed``)."""

    rerun: bool
    whole: bool
    drop_elems: float
    drop_fixed: bool


def local_name(op: Op) -> str:
    return op.name.split(".", 1)[-1]


def named(*names: str) -> Callable[[Op, list[Op]], bool]:
    return lambda op, _ops: local_name(op) in names


def consumers(op: Op, ops: list[Op]) -> list[Op]:
    """Ops of the layer reading ``op``'s output (an op without ``inputs`` reads the op before it)."""
    out = []
    for prev, o in zip([None, *ops], ops, strict=False):
        if op.name in o.inputs or (not o.inputs and prev is op):
            out.append(o)
    return out


def fused_norm(op: Op, ops: list[Op]) -> bool:
    """A norm Transformer Engine fuses into the linear after it (``TELayerNormColumnParallelLinear``: every
    reader a dense column-parallel GEMM, as qkv or a dense MLP's up/gate), so no norm module of its own
    (``perf.memory``: under fp8 its output is saved quantized)."""
    readers = consumers(op, ops)
    return bool(readers) and all(
        r.kind is OpKind.matmul and r.split is TensorSplit.column and r.moe is None for r in readers
    )


BLOCK_NORMS = ("norm1", "norm2", "norm_mlp")  # a block's input and pre-MLP norms (``transformer_block``)
DENSE_MLP = ("mlp_up", "mlp_gate", "activation", "mlp_down")


def _own_norm(op: Op, ops: list[Op]) -> bool:
    return op.kind is OpKind.norm and local_name(op) in BLOCK_NORMS and not fused_norm(op, ops)


def _mlp_norm(op: Op, ops: list[Op]) -> bool:
    """The pre-MLP norm fused into a dense MLP's first linear: part of the checkpointed MLP module."""
    return (op.kind is OpKind.norm and local_name(op) in BLOCK_NORMS and fused_norm(op, ops)
            and any(local_name(r) in DENSE_MLP for r in consumers(op, ops)))


def with_role(*roles: MoERole) -> Callable[[Op, list[Op]], bool]:
    return lambda op, _ops: op.moe is not None and op.moe.role in roles


MODULES: dict[str, tuple[Part, ...]] = {
    "core_attn": (Part(lambda op, _ops: op.selective, True, "saved", True),),
    "moe_act": (Part(named("experts_activation"), True, "none", False),
                Part(named("experts_down"), False, "input", False)),
    "layernorm": (Part(_own_norm, True, "output", False),),
    "mla_up_proj": (Part(named("q_up", "q_proj", "kv_up"), True, "output", False),),
    "mlp": (Part(lambda op, _ops: op.moe is None and local_name(op) in DENSE_MLP, True, "saved", True),
            Part(_mlp_norm, True, "output", True)),
    "moe": (Part(lambda op, _ops: op.moe is not None, True, "saved", True),),
    "shared_experts": (Part(with_role(MoERole.shared), True, "saved", True),),
    "op_sac": (Part(named("out_proj", "mlp_up", "residual1"), True, "none", False),
               Part(named("norm1", "norm2"), True, "output", False),
               Part(named("activation"), True, "none", False),
               Part(named("mlp_down"), False, "input", False)),
}
DEFAULT_MODULES = ("core_attn",)  # Megatron-Core's default (recompute_modules None)


def unknown_modules(modules: Sequence[str]) -> list[str]:
    return [m for m in modules if m not in MODULES]


def selection(ops: list[Op], modules: Sequence[str] | None) -> dict[str, OpRecompute]:
    """Per op name of one layer, what selective recomputation of ``modules`` (None: ``DEFAULT_MODULES``)
    does to it; ops it leaves alone are absent. Parts of several modules on one op add up (a checkpointed
    MLP whose input norm also discards its output) and never drop more than the op stores."""
    out: dict[str, OpRecompute] = {}
    for name in dict.fromkeys(DEFAULT_MODULES if modules is None else modules):
        for part in MODULES[name]:
            for op in ops:
                if not part.match(op, ops):
                    continue
                prev = out.get(op.name, OpRecompute(False, False, 0.0, False))
                drop = {"saved": op.saved_elems, "output": op.out_elems, "input": op.in_elems, "none": 0.0}[part.drop]
                out[op.name] = OpRecompute(
                    rerun=prev.rerun or part.rerun,
                    whole=prev.whole or (part.rerun and part.whole),
                    drop_elems=min(op.saved_elems, prev.drop_elems + drop),
                    drop_fixed=prev.drop_fixed or part.drop == "saved",
                )
    return out


def present(ops: Sequence[Op], module: str) -> bool:
    """Whether a layer's ops hold anything ``module`` recomputes (``plan.checks`` refuses modules the
    workload does not have)."""
    ops = list(ops)
    return any(part.match(op, ops) for part in MODULES[module] for op in ops)


# Megatron-Core checkpoints ``core_attention`` whatever its backend (``megatron/core/transformer/attention.py``:
# ``if self.checkpoint_core_attention and self.training: core_attn_out = self._checkpointed_attention_forward(...)``,
# a ``tensor_parallel.checkpoint`` of the core, its flag set by ``recompute_granularity == 'selective'`` and later
# by ``"core_attn" in recompute_modules``): with Transformer Engine's or the local flash kernel the backward re-runs
# that kernel's forward for no memory saved. Megatron-LM's legacy transformer (``megatron-lm``, and the
# Megatron-DeepSpeed fork) bypasses the checkpoint on its flash path; torchtitan's selective AC saves the flash
# op's outputs (its ``_save_list``).
FLASH_RERUN_FRAMEWORKS = frozenset({"mcore", "mcore-te"})


def reruns_flash(framework: str | None) -> bool:
    """Whether selective recomputation under ``framework`` (``mapping.host_framework``; None: 'megatron-lm')
    re-runs a fused attention kernel's forward in the backward (``FLASH_RERUN_FRAMEWORKS``)."""
    return framework in FLASH_RERUN_FRAMEWORKS


def changes_nothing(
    layers: Sequence[list[Op]], fused: frozenset[tuple[str, str]], modules: Sequence[str] | None
) -> bool:
    """Whether selective recomputation of ``modules`` (None: the attention core) re-runs and drops nothing on
    these layers: every op it would touch runs inside a fused attention kernel (``op_cost.flash_ops``: a flash
    kernel stores none of its s² tensors and recomputes them inside its own backward), so the run is the one
    without recomputation — the same passes (``plan.passes``), memory (``perf.memory``) and HFU
    (``plan.hardware_flops``), which each skip those ops alike.

    This follows Megatron-LM's legacy transformer, whose flash-attention path bypasses the core's checkpoint.
    Megatron-Core checkpoints ``core_attention`` whatever its backend (``reruns_flash``), so there the flash
    kernel's forward runs once more in the backward for no memory saved (the plan charges it): selective is then
    slower, never better; either way the search need not try it beside ``none``."""
    from tilewright.engine.perf.op_cost import flash_ops

    for ops in layers:
        flash = flash_ops(ops, fused) if fused else frozenset()
        chosen = selection(ops, modules)
        for op in ops:
            how = chosen.get(op.name) if op.name not in flash else None
            if how is not None and (how.rerun or how.drop_elems > 0 or (how.drop_fixed and op.saved_bytes_fixed)):
                return False
    return True
