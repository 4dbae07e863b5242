"""A column-parallel linear's input-gradient collective run beside its own weight-gradient GEMM.

In a column-parallel linear's backward the input gradient (dgrad, ``grad_output @ W``) is a partial sum over the
tensor group and must be all-reduced (reduce-scattered with sequence parallelism) before the op below can use
it; the weight gradient (wgrad, ``grad_outputᵀ @ input``) needs no collective. Frameworks launch the collective
asynchronously right after the dgrad GEMM and run the wgrad GEMM beside it, waiting for the handle after it:

- Megatron-LM ``ColumnParallelLinearWithAsyncAllreduce.backward`` (``megatron/mpu/layers.py``, e.g. commit
  02bb1f5c86fc8c36d4a96a2b7ebcf63d53219369): ``grad_input = grad_output.matmul(weight)``;
  ``handle = torch.distributed.all_reduce(grad_input, ..., async_op=True)``; a 3 µs delay "to have all-reduce
  scheduled first"; ``grad_weight = grad_output.t().matmul(input)``; ``handle.wait()``. Its sequence-parallel
  sibling (``ColumnParallelLinearWithSequenceParallelism``) does the same with ``_reduce_scatter_base``. On by
  default from its introduction: the flag is ``--no-async-tensor-model-parallel-allreduce`` (``store_false``,
  ``dest='async_tensor_model_parallel_allreduce'``; ``megatron/arguments.py`` @
  00129014dc4bf02c16a9271544265b3146ae5164, where ``--checkpoint-activations`` is already deprecated). It came
  in late 2021: NVIDIA/apex ported Megatron's tensor-parallel layers on 2021-10-02 (PR #1181) and made
  ``ColumnParallelLinearWithAsyncAllreduce`` autocast-safe right after (PR #1183). Megatron-Core keeps it as
  ``LinearWithGradAccumulationAndAsyncCommunication`` (``megatron/core/tensor_parallel/layers.py`` @
  000c4ac24f61159c138b0975def722c65245983c: with ``allreduce_dgrad`` the dgrad's ``all_reduce(...,
  async_op=True)``, with sequence parallelism its ``dist_reduce_scatter_func(..., async_op=True)``, then the
  wgrad GEMM, then ``handle.wait()``). It needs ``CUDA_DEVICE_MAX_CONNECTIONS=1`` so that the collective's
  kernel reaches the GPU before the GEMM (the function's docstring; Megatron-LM issue #533).
- Transformer Engine's ``_Linear.backward`` (``transformer_engine/pytorch/module/linear.py`` @
  3ec878759cc601d088dfa5c0a4772acf4317b190, "Overlap dgrad-RS/AR with wgrad": ``reduce_scatter_along_first_dim``
  or ``allreduce`` of the dgrad with ``async_op=True``, the WGRAD GEMM, then ``handle.wait()``) and
  ``_LayerNormLinear.backward`` without userbuffers do the same.
- Under userbuffers (``mapping.overlap_tp_comm``) that reduce-scatter is Transformer Engine's bulk overlap with
  the same GEMM, which ``plan.tp_overlap`` already charges: nothing more here.

The model: the collective takes T seconds on the tensor group and hides behind the run's wgrad GEMMs, W seconds
(one collective serves a run of consecutive column-parallel ops, SwiGLU's gate and up as Megatron's fused fc1,
their wgrads all beside it); ``max(0, T − W)`` shows as tensor-parallel communication, charged as the bytes
of the same collective that take that long (``plan.exposed.bytes_for``). A wgrad has the forward's FLOPs, as the
dgrad has, so its share of the op's backward time is flops / backward_flops (``sp_regather.dgrad_seconds``).
The NCCL call's host time stays. Not for a routed expert (its tensor-parallel collectives are the token
dispatcher's, not its linear's), nor with ``delay_wgrad_compute`` (the wgrads run later, beside the all-to-all),
nor under 2-D tensor parallelism. The NCCL kernel holds SMs the wgrad GEMMs lose while it runs: their cover
is stretched by them and the time they lose charged to the run's segment (``perf.comm_sm``, ``pass_comms.PassComms.
_sm_cover``); a caller that times the collective itself (``Segment.deferred_cover_s``) gets the bare cover.

**Default by era** (``mapping.overlap_dgrad_comm`` None): off where ``plan.pipeline_p2p`` reads the run as
Megatron-LM's ``--checkpoint-activations`` era (GPU training with full recompute: SC'21 Table 1's runs, measured
in early 2021 with a Megatron-LM that ran ``copy_to_tensor_model_parallel_region``, whose backward all-reduce
blocks), on for every other GPU run (Megatron-Core, NeMo, Transformer Engine). Off on devices no GPU framework
drives (TPUs, grids, wafers: ``perf.device.issues_kernels``): their compilers may well schedule the independent
GEMM beside the collective, but no source says so, and the option stays for a user who knows. Late v2.x
builds (autumn 2021 to the flag's deprecation in 2022) had it on with ``--checkpoint-activations``: a run of
those sets it true.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from weakref import WeakKeyDictionary

from tilewright.engine.ir.hardware import Compute
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.ops import MoERole, Op
from tilewright.engine.perf.device import issues_kernels
from tilewright.engine.perf.op_cost import OpTime
from tilewright.engine.plan.exposed import bytes_for
from tilewright.engine.plan.pipeline_p2p import p2p_mode
from tilewright.engine.plan.sp_regather import dgrad_seconds


def overlaps(chosen: bool | None, recompute: Recompute, compute: Compute, train: bool) -> bool:
    """``mapping.overlap_dgrad_comm`` resolved (module docstring): the choice; unset, on for a GPU framework
    outside the era ``plan.pipeline_p2p`` calls 'megatron-lm' (the one place that era is read), off in that era
    and on devices no GPU framework drives (``issues_kernels``: no source says their runtimes overlap it)."""
    if chosen is not None:
        return chosen
    return issues_kernels(compute) and p2p_mode(None, recompute, compute, train) != "megatron-lm"


def active(chosen: bool | None, recompute: Recompute, compute: Compute, train: bool, tp: int,
           two_d: bool, userbuffers: bool) -> bool:
    """Whether a training backward's column-parallel collectives hide behind their wgrads here: tp > 1, 1-D,
    not already under userbuffers (``plan.tp_overlap``)."""
    return train and tp > 1 and not two_d and not userbuffers and overlaps(chosen, recompute, compute, train)


def covers(op: Op) -> bool:
    """An op whose wgrad GEMM runs beside its input gradient's collective: not a routed expert's."""
    return op.moe is None or op.moe.role is not MoERole.expert


def wgrad_seconds(op: Op, t: OpTime) -> float:
    """The weight-gradient GEMM's share of an op's backward time: equal FLOPs to the data gradient's."""
    return dgrad_seconds(op, t)


_TIMED: WeakKeyDictionary[Callable[[str, float], float], dict[str, Callable[[float], float]]] = WeakKeyDictionary()


def timed(seconds: Callable[[str, float], float], kind: str) -> Callable[[float], float]:
    """``seconds`` for one kind of collective, the same function each time (``plan.exposed`` caches by it); it
    holds ``seconds`` weakly, so that the cache entry goes with the plan that made ``seconds``."""
    per_kind = _TIMED.setdefault(seconds, {})
    fn = per_kind.get(kind)
    if fn is None:
        ref = weakref.ref(seconds)
        fn = per_kind[kind] = lambda nbytes: ref()(kind, nbytes)  # type: ignore[misc]
    return fn


def exposed(seconds: Callable[[float], float], nbytes: float, cover_s: float) -> float:
    """Bytes of the collective (``seconds``: its time for that many bytes) left showing beside ``cover_s`` of
    wgrad GEMMs: those that take the uncovered ``T − cover_s`` (``plan.exposed``)."""
    if nbytes <= 0:
        return 0.0
    total = seconds(nbytes)
    if total <= cover_s:
        return 0.0
    return bytes_for(seconds, nbytes, total - cover_s)


def notes(chosen: bool | None, on: bool, train: bool, tp: int, two_d: bool, userbuffers: bool,
          kernels: bool = True) -> list[str]:
    """The result's word when the default (not the user) left the collectives blocking: the era guess on a GPU
    framework's device (``kernels``), the missing source elsewhere (a TPU, a grid or a wafer, whose notes
    used to blame full recompute on GPUs)."""
    if chosen is not None or on or not train or tp <= 1 or two_d or userbuffers:
        return []
    why = ("Megatron-LM v2.x, read from full recompute on GPUs" if kernels else
           "no GPU framework drives this device and no source says its runtime overlaps them")
    return [f"column-parallel input-gradient all-reduces block their weight-gradient GEMM ({why}); "
            "mapping.overlap_dgrad_comm true for --async-tensor-model-parallel-allreduce (Megatron-LM from late "
            "2021, Megatron-Core, Transformer Engine)"]
