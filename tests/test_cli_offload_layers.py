"""``tilewright run --offload-layers N``: the transformer layers per model chunk whose stored activations an
activation offload copies to host memory (``mapping.offload_layers``). Where it acts it changes the run as the
field does; where it cannot (the activations on the device, an inference run) it is refused by name with exit
2, as a count below zero (argparse) and one the frameworks refuse (every layer of the chunk) are."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.cli import main

LAYERS = 4
DENSE = ["run", "--system", "dgx-a100", "--model", "gpt", "--layers", str(LAYERS), "--hidden", "1024", "--heads",
         "16", "--seq-len", "1024", "--vocab", "32000", "--engine", "analytic", "--json", "--quiet",
         "--devices", "8", "--dp", "8", "--global-batch", "16", "--micro-batch", "2"]
HOST = ["--set", "mapping.memory_levels.activations=host"]  # dgx-a100's node memory behind the PCIe host link


def _metrics(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


def _refused(capsys: pytest.CaptureFixture[str], name: str, *args: str) -> str:
    assert main(list(args)) == 2
    err = capsys.readouterr().err
    assert f"{name}:" in err and "Traceback" not in err
    return err


def _offload_note(metrics: dict) -> str:
    return next(n for n in metrics["notes"] if n.startswith("activation offload"))


def test_the_flag_sets_the_layers_offloaded(capsys):
    default = _metrics(capsys, *DENSE, *HOST)
    assert f"{LAYERS - 1} of {LAYERS} transformer layers" in _offload_note(default)  # all but the last
    one = _metrics(capsys, *DENSE, *HOST, "--offload-layers", "1")
    assert f"1 of {LAYERS} transformer layers" in _offload_note(one) and "mapping.offload_layers" in _offload_note(one)
    # the same as the field set through --set
    same = _metrics(capsys, *DENSE, *HOST, "--set", "mapping.offload_layers=1")
    assert same["iteration_time_s"] == one["iteration_time_s"] and same["notes"] == one["notes"]
    # fewer layers' activations on the host: more of them stay on the device
    assert one["peak_memory_bytes"] > default["peak_memory_bytes"]
    assert one["host_peak_memory_bytes"] < default["host_peak_memory_bytes"]


def test_zero_layers_is_a_count_not_the_default(capsys):
    none = _metrics(capsys, *DENSE, *HOST, "--offload-layers", "0")
    default = _metrics(capsys, *DENSE, *HOST)
    assert none["peak_memory_bytes"] > default["peak_memory_bytes"]


def test_refused_with_the_activations_on_the_device(capsys):
    err = _refused(capsys, "--offload-layers", *DENSE, "--offload-layers", "2")
    assert "stay on the device" in err and "memory_levels.activations" in err
    # the field, set without the flag, is refused by its own name (plan.idle_fields)
    _refused(capsys, "mapping.offload_layers", *DENSE, "--set", "mapping.offload_layers=2")


def test_the_refusal_names_the_host_memory_to_type(capsys):
    """The help's example name was a placeholder ('HOST'), and memory names are matched as spelt: a refusal that
    says only "<the node's host memory>" leaves the user guessing. It names the system's own host memory."""
    from tilewright.engine.io.presets import load_project_preset
    from tilewright.engine.plan.checks import host_memories

    hosts = host_memories(load_project_preset("gpt3-dgx-a100"))  # a project on DENSE's system
    assert len(hosts) == 1
    fix = f"mapping.memory_levels.activations={next(iter(hosts))} "
    misspelt = _refused(capsys, "--offload-layers", *DENSE, "--set", "mapping.memory_levels.activations=HOST",
                        "--offload-layers", "2")
    assert "'HOST' is not host memory" in misspelt and fix in misspelt
    assert fix in _refused(capsys, "--offload-layers", *DENSE, "--offload-layers", "2")
    grid = ["run", "--system", "chiplet-mesh", "--model", "gpt", "--layers", "4", "--hidden", "256", "--heads", "4",
            "--seq-len", "256", "--vocab", "1000", "--engine", "analytic", "--quiet", "--offload-layers", "2"]
    assert "no host memory" in _refused(capsys, "--offload-layers", *grid)


def test_refused_in_inference(capsys):
    args = ["run", "--system", "dgx-a100", "--model", "gpt", "--layers", "4", "--hidden", "1024", "--heads", "16",
            "--seq-len", "1024", "--vocab", "32000", "--engine", "analytic", "--json", "--quiet", "--mode", "infer"]
    assert "training only" in _refused(capsys, "--offload-layers", *args, "--offload-layers", "2")


def test_refused_when_invalid(capsys):
    with pytest.raises(SystemExit) as exit_info:  # argparse: exit 2 naming the flag
        main([*DENSE, *HOST, "--offload-layers", "-1"])
    assert exit_info.value.code == 2
    assert "--offload-layers" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*DENSE, *HOST, "--offload-layers", "two"])
    assert "not a whole number" in capsys.readouterr().err
    # every layer of the chunk: Megatron-Core refuses it, and so does the engine, naming the field
    err = _refused(capsys, "mapping.offload_layers", *DENSE, *HOST, "--offload-layers", str(LAYERS))
    assert f"offloads at most {LAYERS - 1}" in err
