"""``run``: flags the assembled project would silently ignore are refused, naming the flag (exit 2).

A flag whose field the simulation never reads for this project — a load imbalance without experts, a
parameter gather without sharded parameters, data-parallel replicas of an inference run (which simulates
one tensor group) — used to run as if it had not been given, so a user comparing two runs saw no
difference and no reason. Checked before the project's own checks (``plan.checks``), which name fields and
refuse the fields that can only be idle however they were given (``plan.idle_fields``), so a typed flag is
named as typed; what only the flag check refuses (training fields in an inference run) stays open to a
project file or a search (a degree change alone never makes a mapping invalid, as ``ir.mapping`` keeps it).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from tilewright.engine.cli.common import COMMAND_LINE
from tilewright.engine.errors import InputError, Problem

if TYPE_CHECKING:
    from tilewright.engine.ir.project import Project

# flags that only mean something where the model has mixture-of-experts layers → what they act on
_MOE_FLAGS = {
    "expert_imbalance": "weighs the busiest expert rank's routed tokens",
    "overlap_ep_comm": "hides the expert all-to-all",
    "delay_wgrad_compute": "hides the backward's expert all-to-all",
    "ep_dispatcher": "picks how tokens reach their experts",
}
# training flags an inference run does not read (each shown idle there: the same time and memory), and the
# values that ask for something (``--zero 0`` or ``--recompute none`` ask for nothing)
_TRAINING_ONLY = {
    "zero": lambda v: v > 0,
    "fsdp": bool,
    "fsdp_copies": bool,
    "recompute": lambda v: v != "none",
    "recompute_layers": lambda v: True,
    "recompute_modules": lambda v: True,
    "schedule": lambda v: True,
    "interleave": lambda v: v > 1,
    "overlap_ep_comm": bool,
    "delay_wgrad_compute": bool,
    "expert_imbalance": lambda v: True,
    # an inference run splits the experts only over data-parallel ranks (plan.served_experts: refuse_idle_run_flags)
    "ep": lambda v: v > 1,
    "ep_dispatcher": lambda v: True,
    "overlap_grad_reduce": bool,
    "expert_tp": lambda v: True,
    "pipeline_p2p": lambda v: True,
    "overlap_dgrad_comm": lambda v: True,  # a served pass has no backward (plan.dgrad_overlap)
    "global_batch": lambda v: True,  # an inference run serves run.inference.batch (--batch)
    "micro_batch": lambda v: True,  # its micro-batches are the batch over pp (plan.inference_phases)
    "gradient_accumulation_fusion": lambda v: v is False,  # --no-gradient-accumulation-fusion (plan.grad_hooks)
    "grad_reduce_dtype": lambda v: True,
    "fused_cross_entropy": bool,  # a served pass computes no loss
    "moe_router_fusion": bool,  # a serving runtime's router carries no Megatron host work (plan.moe_host)
    "log_params_norm": bool,  # the training loop's logging and checks (plan.train_logging)
    "log_num_zeros_in_grad": bool,
    "timing_log_level": lambda v: True,
    "check_for_nan_in_loss_and_grad": bool,
    "offload_layers": lambda v: True,  # activation offload is a training run's (plan.activation_offload)
    "host_framework": lambda v: True,  # a serving runtime's layers are neither framework's (plan.framework_host)
}


# fields whose flag is not their name's (a store_false flag turns the field off)
_FLAG_OF = {"gradient_accumulation_fusion": "--no-gradient-accumulation-fusion"}


# what an inference run reads instead, where it has its own setting
_HINT = {name: " (an inference run serves --batch sequences)" for name in ("global_batch", "micro_batch")}


def _flag(name: str) -> str:
    return _FLAG_OF.get(name, "--" + name.replace("_", "-"))


def _shown(value: object) -> str:
    return "on" if isinstance(value, bool) else str(value)  # a bool is only ever a flag that was typed


# model flags that ask for MoE blocks, named in the order the refusal prefers
_MOE_MODEL_FLAGS = ("moe_first_dense", "moe_experts")


def refuse_idle_run_flags(args: argparse.Namespace, project: Project) -> None:
    """Exit 2 (``InputError``) for a flag the simulation of ``project`` would not read."""
    from tilewright.engine.ir.project import Mode
    from tilewright.engine.plan.served_experts import served_ep

    m, train = project.mapping, project.run.mode is Mode.train
    if not train:  # every idle training flag at once, so that one edit of the command line mends them all
        idle_flags = [Problem(_flag(name), f"{_shown(value)}: training only; an inference run "
                              "simulates without it (no backward pass, optimizer step, pipeline schedule or expert "
                              f"split to change): add --mode train, or leave it out{_HINT.get(name, '')}")
                      for name, idle in _TRAINING_ONLY.items()
                      if (value := getattr(args, name, None)) is not None and idle(value)
                      and not (name == "ep" and served_ep(m) > 1)]  # expert ranks of data-parallel attention
        if idle_flags:
            raise InputError(COMMAND_LINE, idle_flags)
        if getattr(args, "dp", None) is not None and args.dp > 1 and served_ep(m) == 1:  # ep ranks: dp counts
            raise InputError(COMMAND_LINE, Problem("--dp", f"{args.dp}: an inference run simulates one tensor "
                                                   f"group (tp × pp = {m.tp * m.pp} devices); its replicas would "
                                                   "change nothing (tilewright serve spreads requests)"))
        if getattr(args, "devices", None) is not None and m.dp > 1:
            raise InputError(COMMAND_LINE, Problem("--devices", f"{args.devices}: an inference run uses tp × pp = "
                                                   f"{m.tp * m.pp} of them (one tensor group); set --tp/--pp to "
                                                   "use more"))
    if train and getattr(args, "pipeline_p2p", None) is not None and m.pp == 1:
        raise InputError(COMMAND_LINE, Problem("--pipeline-p2p", f"{args.pipeline_p2p}: how pipeline sends run, and "
                                               "pp is 1 (no pipeline, no sends); set --pp ≥ 2 or leave it out"))
    if train and getattr(args, "overlap_dgrad_comm", None) is not None and m.tp == 1:
        raise InputError(COMMAND_LINE, Problem("--overlap-dgrad-comm", f"{args.overlap_dgrad_comm}: how a column-"
                                               "parallel linear's input-gradient all-reduce runs, and tp is 1 (no "
                                               "tensor group, no all-reduce); set --tp ≥ 2 or leave it out"))
    if train and getattr(args, "offload_layers", None) is not None:
        _refuse_offload_layers_without_host(args.offload_layers, project)
    if train:
        _refuse_gpu_loop_flags_without_kernels(args, project)
    if getattr(args, "fsdp", None) and getattr(args, "zero", None) == 0:  # stages 1-2 the mapping refuses itself
        raise InputError(COMMAND_LINE, Problem("--zero", "0 contradicts --fsdp, which shards like ZeRO stage 3 "
                                               "(the run was ZeRO-3 whatever --zero said)"))
    zero = getattr(args, "zero", None) or 0
    sharding = "--fsdp" if getattr(args, "fsdp", None) else "--zero" if zero >= 1 else None
    if train and sharding is not None and m.dp * m.cp == 1:
        what = "FSDP" if sharding == "--fsdp" else f"ZeRO stage {zero}"
        raise InputError(COMMAND_LINE, Problem(sharding, f"{what} shards model state over the data-parallel ranks "
                                               "(dp × cp), and there is one: nothing is sharded or gathered; set "
                                               "--dp ≥ 2 or leave it out"))
    if train and getattr(args, "fsdp_copies", None) and m.zero < 3:
        raise InputError(COMMAND_LINE, Problem("--fsdp-copies", f"prices PyTorch FSDP2's copies around each layer's "
                                               f"weight all-gather and gradient reduce-scatter, and ZeRO stage "
                                               f"{m.zero} gathers no weights per layer; add --fsdp (or --zero 3), or "
                                               "leave it out"))
    if getattr(args, "overlap_param_gather", None) and not getattr(args, "fsdp", None):
        why = ("an inference run gathers no updated parameters" if not train else
               "needs sharded parameters: the distributed optimizer (--zero ≥ 1) or --fsdp; at ZeRO 0 every rank "
               "holds all its weights and gathers nothing (Megatron-LM asserts it too)" if m.zero < 1 else None)
        if why is not None:
            raise InputError(COMMAND_LINE, Problem("--overlap-param-gather", why))
    if getattr(args, "tp", None) is not None and args.tp > 1 and not m.layer_parallelism:
        _refuse_tp_without_splits(args.tp, project)
    given = [name for name in _MOE_FLAGS if getattr(args, name, None) is not None]
    model_flags = [name for name in _MOE_MODEL_FLAGS if getattr(args, name, None) is not None]
    if not given and not model_flags:
        return
    from tilewright.engine.workloads import build_workload

    if any(op.moe is not None for op in build_workload(project.workload).ops()):
        return
    if model_flags:  # the MoE model the flags describe has no MoE block left
        w = project.workload
        moe = getattr(w, "moe", None)
        which = (f" (first_dense_layers {moe.first_dense_layers}, layer_freq {moe.layer_freq})" if moe is not None
                 else "")
        name = model_flags[0]
        raise InputError(COMMAND_LINE, Problem(
            "--" + name.replace("_", "-"), f"{getattr(args, name)}: none of the model's "
            f"{getattr(w, 'layers', '?')} blocks is a mixture-of-experts block{which}"))
    name = given[0]
    raise InputError(COMMAND_LINE, Problem(
        "--" + name.replace("_", "-"), f"{_MOE_FLAGS[name]}, and the model has no mixture-of-experts layers"))


def _refuse_offload_layers_without_host(count: int, project: Project) -> None:
    """``--offload-layers N`` counts the layers whose activations go to host memory; with the activations on the
    device (``mapping.memory_levels.activations`` neither a host memory nor ``auto``) none go, and the run
    would be the same without the flag. The field's own refusal (``plan.idle_fields``) names the field; this
    names the flag typed."""
    from tilewright.engine.plan.checks import host_memories

    level = project.mapping.memory_levels.get("activations")
    hosts = sorted(host_memories(project))
    if level == "auto" or level in hosts:
        return
    where = f"'{level}' is not host memory" if level else "the activations stay on the device"
    # the names the system has, to type as they are (a memory's name is matched exactly: 'HOST' is not 'host')
    fix = (f"add --set mapping.memory_levels.activations={hosts[0]} (the system's host memory) or leave it out"
           if len(hosts) == 1 else
           f"add --set mapping.memory_levels.activations=NAME with NAME one of its host memories ({', '.join(hosts)}) "
           "or leave it out" if hosts else "the system has no host memory: leave it out")
    raise InputError(COMMAND_LINE, Problem("--offload-layers", f"{count}: counts the transformer layers whose "
                                           f"activations are copied to host memory, and {where}; {fix}"))


# GPU training-loop flags read only where a host framework issues each kernel (``perf.device.issues_kernels``:
# plan.framework_host, plan.train_logging, plan.cuda_graphs, plan.grad_hooks, plan.moe_host) → the values that ask
# for something; a TPU, a grid or a wafer runs each op as one program and ran as if none had been given
_KERNEL_FLAGS = {
    "host_framework": lambda v: True,
    "log_params_norm": bool,
    "log_num_zeros_in_grad": bool,
    "timing_log_level": lambda v: True,
    "check_for_nan_in_loss_and_grad": bool,
    "cuda_graph_scope": lambda v: True,
    "gradient_accumulation_fusion": lambda v: v is False,
    "moe_router_fusion": bool,
}


def _refuse_gpu_loop_flags_without_kernels(args: argparse.Namespace, project: Project) -> None:
    """``--host-framework``, Megatron's logging and NaN checks, ``--cuda-graph-scope``,
    ``--no-gradient-accumulation-fusion`` and ``--moe-router-fusion`` model what a GPU framework's Python and
    launches cost the host (``plan.framework_host``, ``plan.train_logging``, ``plan.cuda_graphs``, ``plan.grad_hooks``,
    ``plan.moe_host``); a device that runs each op as one program (a TPU, a grid, a wafer:
    ``perf.device.issues_kernels`` false) has no such host work, and the run would be the same without the flag."""
    from tilewright.engine.perf.device import issues_kernels

    given = [(name, value) for name, idle in _KERNEL_FLAGS.items()
             if (value := getattr(args, name, None)) is not None and idle(value)]
    if not given or any(c.compute is not None and issues_kernels(c.compute) for _path, c in project.hardware.walk()):
        return
    raise InputError(COMMAND_LINE, [Problem(_flag(name), f"{_shown(value)}: a GPU framework's host work (kernels "
                                            "issued one by one), and this hardware's devices run each op as one "
                                            "program (no host framework launches their kernels); leave it out")
                                    for name, value in given])


def _refuse_tp_without_splits(tp: int, project: Project) -> None:
    """``--tp N`` on a workload none of whose ops tensor parallelism can split (an ONNX import, a CNN: their
    ops carry split none, ``onnx_import``) ran every op whole on each of the N ranks — the same weights and
    memory per device, N times the devices, a little slower — without a word. HyPar's layer-wise choices
    (``mapping.layer_parallelism``) are what splits such layers; without them the flag is refused."""
    from tilewright.engine.ir.ops import TensorSplit
    from tilewright.engine.workloads import build_workload

    splittable = (TensorSplit.column, TensorSplit.row, TensorSplit.heads, TensorSplit.vocab)
    if not any(op.split in splittable for op in build_workload(project.workload).ops()):
        raise InputError(COMMAND_LINE, Problem("--tp", f"{tp}: no op of this {project.workload.kind} workload has a "
                                               "tensor-parallel split, so every rank would run the whole model "
                                               "(use --dp, --pp, or HyPar's mapping.layer_parallelism)"))


def refuse_idle_search_flags(args: argparse.Namespace, project: Project, devices: int) -> None:
    """``search``: a second-stage list naming what the model cannot use — expert parallelism or a token
    dispatcher without experts, an expert-parallel size that does not divide the routed experts or exceeds the
    devices, a context-parallel size that does not divide the sequence or exceeds the devices, a recomputed
    module the model lacks — used to be dropped from the space without a word, so the
    table looked as if those options had been tried and lost. The same refusals ``run`` makes, by flag."""
    from tilewright.engine.perf.recompute import present
    from tilewright.engine.search.parallel.narrowing import int_list, module_lists
    from tilewright.engine.workloads import build_workload

    eps = int_list("--ep", getattr(args, "ep", None), COMMAND_LINE) or []
    cps = int_list("--cp", getattr(args, "cp", None), COMMAND_LINE) or []
    lists = module_lists("--recompute-modules", getattr(args, "recompute_modules", None), COMMAND_LINE) or []
    seq = getattr(project.workload, "seq_len", None)
    for cp in cps:
        if cp > devices:
            raise InputError(COMMAND_LINE, Problem("--cp", f"{cp} exceeds the {devices} devices available"))
        if cp > 1 and seq is not None and seq % (2 * cp):  # as run refuses mapping.cp (plan.checks)
            raise InputError(COMMAND_LINE, Problem("--cp", f"{cp}: the ring splits each sequence into 2 × cp = "
                                                   f"{2 * cp} chunks (two per rank, for load balance), and that "
                                                   f"does not divide seq_len ({seq})"))
    moe = getattr(project.workload, "moe", None)
    for ep in eps:  # as run refuses mapping.ep (plan.checks): a size that cannot split the experts was dropped
        if ep > 1 and moe is not None and moe.experts % ep:
            raise InputError(COMMAND_LINE, Problem("--ep", f"{ep} does not divide the routed experts ({moe.experts})"))
        if ep > devices:
            raise InputError(COMMAND_LINE, Problem("--ep", f"{ep} exceeds the {devices} devices available"))
    wants_experts = [f for f, given in (("--ep", any(e > 1 for e in eps)),
                                        ("--ep-dispatcher", getattr(args, "ep_dispatcher", None) is not None)) if given]
    if not wants_experts and not lists:
        return
    graph = build_workload(project.workload)
    if wants_experts and not any(op.moe is not None for op in graph.ops()):
        raise InputError(COMMAND_LINE, Problem(wants_experts[0], "the model has no mixture-of-experts layers to "
                                                                 "split or exchange tokens between"))
    blocks = [graph.layer_ops(i) for i in graph.block_layers]
    for mods in lists:
        for name in mods:
            if not any(present(ops, name) for ops in blocks):
                raise InputError(COMMAND_LINE, Problem("--recompute-modules", f"'{name}': the model has nothing it "
                                                                              "recomputes"))
