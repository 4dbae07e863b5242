"""Megatron-Core's optimizer flags on ``run`` and ``search``, under Megatron's own names.

A recipe's ``--use-precision-aware-optimizer --main-params-dtype … --main-grads-dtype … --exp-avg-dtype …
--exp-avg-sq-dtype …`` and ``--overlap-param-gather-with-optimizer-step`` are copied onto the mapping's fields
(``mapping.optimizer_moments``, ``optimizer_master``, ``grad_reduce_in_fp32``,
``overlap_param_gather_with_optimizer_step``: ``run`` only, the search choosing no param-gather overlap), so a user
transcribes a recipe flag for flag. Megatron's own
refusals of the flags among themselves are this module's (``optimizer_config.py``: a dtype other than fp32 without
the precision-aware optimizer); what depends on the rest of the project (Adam, ZeRO, the weights' format) is
``plan.checks``', which names the mapping's field — except the bare flag with every dtype left fp32, which sets
no field for those checks to see (``refuse_idle_precision_flag``). Megatron-Core stores the master copy as bf16
parameters plus 16-bit remainders by default under the precision-aware optimizer
(``OptimizerConfig.store_param_remainders`` True, Transformer Engine ≥ 2.1) when Transformer Engine holds the
master of bf16 parameters: a bf16 run with fp32 main parameters; ``--no-store-param-remainders`` keeps the fp32
master. Neither Megatron dtype flag given keeps the mapping's moments (``--optimizer-moments``, the short form, or
the project's); the two spellings of one field disagreeing exit 2.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from tilewright.engine.cli.common import COMMAND_LINE
from tilewright.engine.errors import InputError, Problem
from tilewright.engine.ir.common import DType

if TYPE_CHECKING:
    from tilewright.engine.ir.project import Project

DTYPE_FLAGS = {  # flag → (argparse dest, Megatron's choices)
    "--main-params-dtype": ("main_params_dtype", ("fp32", "fp16")),
    "--main-grads-dtype": ("main_grads_dtype", ("fp32", "bf16")),
    "--exp-avg-dtype": ("exp_avg_dtype", ("fp32", "fp16", "bf16", "fp8")),
    "--exp-avg-sq-dtype": ("exp_avg_sq_dtype", ("fp32", "fp16", "bf16", "fp8")),
}


def add_optimizer_arguments(p: argparse.ArgumentParser, gather: bool = True) -> None:
    """The flags, on ``run`` and ``search`` alike; ``gather`` False (``search``, which does not choose
    ``overlap_param_gather``, what the gather flag needs) leaves out ``--overlap-param-gather-with-optimizer-step``."""
    g = p.add_argument_group("Megatron-Core optimizer (mapping.optimizer_moments, optimizer_master, "
                             "overlap_param_gather_with_optimizer_step)")
    g.add_argument("--use-precision-aware-optimizer", action="store_true", default=None,
                   help="Adam's state in the dtypes below, held by Transformer Engine's FusedAdam; needs the "
                   "distributed optimizer (--zero ≥ 1). A bf16 run with fp32 main parameters then keeps its master "
                   "as bf16 parameters + 16-bit remainders (2 B per parameter), Megatron-Core's default")
    for flag, (dest, choices) in DTYPE_FLAGS.items():
        g.add_argument(flag, dest=dest, choices=choices, default=None,
                       help=f"with --use-precision-aware-optimizer ({', '.join(choices)}; default fp32)")
    g.add_argument("--store-param-remainders", dest="store_param_remainders", action="store_true", default=None,
                   help="with --use-precision-aware-optimizer: the master as bf16 parameters + 16-bit remainders "
                   "(the default there for a bf16 run)")
    g.add_argument("--no-store-param-remainders", dest="store_param_remainders", action="store_false",
                   help="with --use-precision-aware-optimizer: keep the whole fp32 master (4 B per parameter)")
    if not gather:
        return
    g.add_argument("--overlap-param-gather-with-optimizer-step", action="store_true", default=None,
                   help="with --overlap-param-gather, ZeRO-1/2 and interleaved 1F1B: gather the first model chunk's "
                   "weights while the other chunks' are stepped")


def apply_optimizer_flags(args: argparse.Namespace, mapping: dict[str, Any], run: dict[str, Any]) -> None:
    """Set the mapping's fields the flags give (``mapping``, ``run``: the project's data, changed in place);
    ``InputError`` naming the flag for what Megatron refuses among the flags themselves."""
    if getattr(args, "overlap_param_gather_with_optimizer_step", None):
        mapping["overlap_param_gather_with_optimizer_step"] = True
    given = {flag: getattr(args, dest, None) for flag, (dest, _) in DTYPE_FLAGS.items()}
    remainders = getattr(args, "store_param_remainders", None)
    aware = getattr(args, "use_precision_aware_optimizer", None)
    if not aware:
        lower = [f"{flag} {value}" for flag, value in given.items() if value not in (None, "fp32")]
        if remainders is not None:
            lower.append("--store-param-remainders" if remainders else "--no-store-param-remainders")
        if lower:  # OptimizerConfig: "main_params_dtype can only be fp32 when not using precision-aware optimizer"
            raise InputError(COMMAND_LINE, Problem(lower[0].split()[0], f"'{lower[0]}' needs "
                                                   "--use-precision-aware-optimizer, as in Megatron-Core"))
        return
    if given["--exp-avg-dtype"] is None and given["--exp-avg-sq-dtype"] is None:
        # neither dtype given: the moments the mapping already has (``--optimizer-moments``, the short form, or
        # the project's), fp32 by default as in Megatron-Core, so the short form is not silently undone
        mapping["optimizer_moments"] = mapping.get("optimizer_moments") or "fp32"
    else:
        avg, avg_sq = given["--exp-avg-dtype"] or "fp32", given["--exp-avg-sq-dtype"] or "fp32"
        if avg != avg_sq:
            raise InputError(COMMAND_LINE, Problem("--exp-avg-sq-dtype", f"{avg_sq} differs from --exp-avg-dtype "
                                                   f"{avg}: mapping.optimizer_moments holds one dtype for both "
                                                   "moments (give both flags the same dtype)"))
        short = getattr(args, "optimizer_moments", None)
        if short is not None and short != avg:
            raise InputError(COMMAND_LINE, Problem("--optimizer-moments", f"{short} differs from --exp-avg-dtype "
                                                   f"{avg}: both set mapping.optimizer_moments"))
        mapping["optimizer_moments"] = avg
    if given["--main-grads-dtype"] is not None:  # Megatron-LM: a bf16 main gradient keeps the bf16 buffer
        short = getattr(args, "grad_reduce_dtype", None)
        if short is not None and short != given["--main-grads-dtype"]:
            raise InputError(COMMAND_LINE, Problem("--grad-reduce-dtype", f"{short} differs from --main-grads-dtype "
                                                   f"{given['--main-grads-dtype']}: both set "
                                                   "mapping.grad_reduce_in_fp32"))
        mapping["grad_reduce_in_fp32"] = given["--main-grads-dtype"] == "fp32"
    if given["--main-params-dtype"] == "fp16":
        if remainders:
            raise InputError(COMMAND_LINE, Problem("--store-param-remainders", "remainders complete an fp32 master; "
                                                   "--main-params-dtype is fp16"))
        mapping["optimizer_master"] = "fp16"
    elif remainders or (remainders is None and _bf16_parameters(mapping, run)):
        mapping["optimizer_master"] = "remainders"
    else:
        mapping["optimizer_master"] = "fp32"


def _bf16_parameters(mapping: dict[str, Any], run: dict[str, Any]) -> bool:
    """Whether Transformer Engine steps bf16 parameters it holds the master of, where Megatron-Core's default
    stores remainders: a bf16 run whose weights are bf16 (an fp8 run's master stays Megatron-Core's own unless its
    recipe is delayed scaling: ``--store-param-remainders`` says so there)."""
    formats = mapping.get("formats") or {}
    weights = formats.get("weights") if isinstance(formats, dict) else None
    return run.get("dtype", DType.bf16.value) == DType.bf16.value and weights in (None, DType.bf16.value)


def refuse_idle_precision_flag(args: argparse.Namespace, project: Project) -> None:
    """``run``: ``--use-precision-aware-optimizer`` where it cannot apply, named even when every dtype stays fp32
    (then no mapping field differs from its default and ``plan.checks`` has nothing to name): Megatron-Core runs
    the precision-aware optimizer only for Adam under the distributed optimizer (``optimizer_config.py``), and an
    inference run steps no optimizer. Called after the project's own checks, which name the field first."""
    from tilewright.engine.ir.project import Mode, Optimizer

    if not getattr(args, "use_precision_aware_optimizer", None):
        return
    run, zero = project.run, project.mapping.zero
    why = ("an inference run (run.mode infer) steps no optimizer" if run.mode is not Mode.train else
           f"is Adam's; run.optimizer is {run.optimizer.value}" if run.optimizer is not Optimizer.adam else
           f"needs the distributed optimizer (--zero ≥ 1; mapping.zero is {zero}), as in Megatron-Core" if zero < 1
           else None)
    if why is not None:
        raise InputError(COMMAND_LINE, Problem("--use-precision-aware-optimizer", why))
