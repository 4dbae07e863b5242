"""``tilewright run --host-framework {megatron-lm,mcore,mcore-te}``: whose Python issues a GPU layer's kernels
(``mapping.host_framework``, ``plan.framework_host``). Where it acts it changes the run exactly as the field set
through ``--set`` does, and a heavier framework costs a host-bound job host time; where it cannot (an inference
run, a device no host framework drives kernel by kernel) it is refused by name with exit 2, as an unknown
framework is (argparse)."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.cli import main
from tilewright.engine.errors import EXIT_OUT_OF_MEMORY

MODEL = ["--model", "gpt", "--layers", "2", "--hidden", "512", "--heads", "8", "--seq-len", "256", "--vocab",
         "8000", "--engine", "analytic", "--json", "--quiet"]
# a small job on one DGX A100: the host issues kernels faster than nothing, so its time per op shows
SMALL = ["run", "--system", "dgx-a100", *MODEL, "--devices", "8", "--dp", "8", "--global-batch", "8",
         "--micro-batch", "1"]


def _metrics(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


def _refused(capsys: pytest.CaptureFixture[str], name: str, *args: str) -> str:
    assert main(list(args)) == 2
    err = capsys.readouterr().err
    assert f"{name}:" in err and "Traceback" not in err
    return err


def test_the_flag_sets_the_field(capsys):
    for framework in ("megatron-lm", "mcore", "mcore-te"):
        flag = _metrics(capsys, *SMALL, "--host-framework", framework)
        field = _metrics(capsys, *SMALL, "--set", f"mapping.host_framework={framework}")
        assert flag["iteration_time_s"] == field["iteration_time_s"], framework


def test_the_default_is_megatron_lm_and_later_frameworks_cost_host_time(capsys):
    """None reads v2.x's counts (the module's default); Megatron-Core's layers run heavier Python per linear, and
    Transformer Engine's heavier still (TransformerEngine PR #1191's CPU times), which a host-bound job pays."""
    default = _metrics(capsys, *SMALL)["iteration_time_s"]
    v2 = _metrics(capsys, *SMALL, "--host-framework", "megatron-lm")["iteration_time_s"]
    mcore = _metrics(capsys, *SMALL, "--host-framework", "mcore")["iteration_time_s"]
    te = _metrics(capsys, *SMALL, "--host-framework", "mcore-te")["iteration_time_s"]
    assert default == v2
    assert v2 < mcore < te


def test_refused_in_inference(capsys):
    args = ["run", "--system", "dgx-a100", *MODEL, "--mode", "infer", "--prompt-tokens", "192", "--output-tokens",
            "64"]  # within the model's 256-token context
    err = _refused(capsys, "--host-framework", *args, "--host-framework", "mcore-te")
    assert "training only" in err
    _metrics(capsys, *args)  # the same run without the flag is fine


def test_refused_on_a_device_no_framework_drives(capsys):
    args = ["run", "--system", "wafer-64x64", *MODEL, "--devices", "1", "--global-batch", "2", "--micro-batch", "1"]
    err = _refused(capsys, "--host-framework", *args, "--host-framework", "mcore")
    assert "one program" in err
    assert main(args) in (0, EXIT_OUT_OF_MEMORY)  # without the flag it runs (one tile's memory may overflow)


def test_refused_when_invalid(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*SMALL, "--host-framework", "deepspeed"])
    assert exit_info.value.code == 2
    assert "--host-framework" in capsys.readouterr().err
