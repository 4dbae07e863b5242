"""Two command-line spellings of one mapping field, and a method flag without the overlap it picks the method
of: the run either takes what the user wrote or exits 2 naming the flag, never silently drops a flag.

``--optimizer-moments`` is the short form of Megatron's ``--exp-avg-dtype``/``--exp-avg-sq-dtype`` pair, and
``--grad-reduce-dtype`` of ``--main-grads-dtype``; ``--tp-overlap-rs`` picks how overlapped reduce-scatters
hide (``mapping.tp_overlap_reduce_scatter``), which changes nothing unless ``--overlap-tp-comm`` is on;
``--use-precision-aware-optimizer`` with every dtype fp32 sets no field, so the flag itself is checked.
Expected memory is derived from the held bytes per parameter (moments 4 + 4 B in fp32, 2 + 2 B in bf16; the
master 2 B as bf16 parameters + remainders, Megatron-Core's default for a bf16 run under the precision-aware
optimizer), not from a previous run's output.
"""

from __future__ import annotations

import json

import pytest
from tilewright.engine.cli import main

SMALL = ["run", "--system", "dgx-h100", "--model", "gpt", "--layers", "4", "--hidden", "1024", "--heads", "16",
         "--seq-len", "512", "--vocab", "8192", "--dp", "2", "--global-batch", "4", "--zero", "1",
         "--engine", "analytic", "--json", "--quiet"]
AWARE = "--use-precision-aware-optimizer"


def _optimizer_bytes(capsys, *flags: str) -> float:
    assert main([*SMALL, *flags]) == 0
    return json.loads(capsys.readouterr().out)["memory_breakdown_bytes"]["optimizer"]


def test_the_short_form_of_the_moments_survives_the_precision_aware_flag(capsys):
    """``--optimizer-moments bf16 --use-precision-aware-optimizer`` keeps bf16 moments (2 + 2 B) beside the
    remainders' master (2 B): 6 B of optimizer state per parameter where the fp32 default holds 4 + 4 + 4."""
    fp32 = _optimizer_bytes(capsys)
    short = _optimizer_bytes(capsys, "--optimizer-moments", "bf16", AWARE)
    megatron = _optimizer_bytes(capsys, AWARE, "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16")
    assert short == pytest.approx(fp32 * (2 + 2 + 2) / (4 + 4 + 4), rel=1e-9)
    assert short == pytest.approx(megatron, rel=1e-12)
    # the precision-aware flag alone: fp32 moments, the remainders' master (Megatron-Core's default)
    assert _optimizer_bytes(capsys, AWARE) == pytest.approx(fp32 * (4 + 4 + 2) / (4 + 4 + 4), rel=1e-9)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--optimizer-moments", "fp16", AWARE, "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"],
         "--optimizer-moments"),
        (["--grad-reduce-dtype", "fp32", AWARE, "--main-grads-dtype", "bf16"], "--grad-reduce-dtype"),
        (["--tp", "1", "--tp-overlap-rs", "ring_exchange"], "--tp-overlap-rs"),
        # every dtype left fp32 (no field differs from its default): the flag itself is named
        ([AWARE, "--no-store-param-remainders", "--zero", "0"], AWARE),
        # the base command's data-parallel and ZeRO flags put back to what inference reads (each refused first)
        # (and lengths within the model's 512-token context)
        ([AWARE, "--no-store-param-remainders", "--mode", "infer", "--dp", "1", "--zero", "0", "--prompt-tokens",
          "448", "--output-tokens", "64"], AWARE),
        ([AWARE, "--no-store-param-remainders", "--set", "run.optimizer=sgd"], AWARE),
    ],
    ids=["moments-two-spellings", "grads-two-spellings", "rs-method-without-overlap", "aware-without-zero",
         "aware-in-inference", "aware-with-sgd"],
)
def test_contradicting_or_idle_flags_exit_2_naming_the_flag(capsys, flags: list[str], named: str):
    base = list(SMALL)
    if "infer" in flags:  # the base's global batch is a training flag too, refused first in inference
        at = base.index("--global-batch")
        del base[at:at + 2]
    assert main([*base, *flags]) == 2
    err = capsys.readouterr().err
    assert f"command line: {named}:" in err
    assert "Traceback" not in err


def test_the_reduce_scatter_method_runs_with_the_overlap_it_picks_for(capsys):
    """With ``--overlap-tp-comm`` the same flag is taken (and the project's default, pipelined, differs)."""
    tp = ["--tp", "2", "--dp", "1", "--zero", "0", "--sequence-parallel", "--overlap-tp-comm"]
    assert main([*SMALL, *tp]) == 0
    pipelined = json.loads(capsys.readouterr().out)["iteration_time_s"]
    assert main([*SMALL, *tp, "--tp-overlap-rs", "ring_exchange"]) == 0
    ring = json.loads(capsys.readouterr().out)["iteration_time_s"]
    assert ring != pipelined
    assert main([*SMALL, "--tp", "2", "--dp", "1", "--zero", "0", "--sequence-parallel", "--tp-overlap-rs",
                 "pipeline"]) == 2
    assert "--overlap-tp-comm" in capsys.readouterr().err
