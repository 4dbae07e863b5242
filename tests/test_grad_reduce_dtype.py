"""``mapping.grad_reduce_in_fp32`` False: a bf16 or fp8 run's gradient buffer in bf16, as Megatron-Bridge's
performance recipes set it (``cfg.ddp.grad_reduce_in_fp32 = False``).

Megatron-Core's ``DistributedDataParallel`` allocates each gradient buffer as ``torch.float if
grad_reduce_in_fp32 else param.dtype``; an fp8 parameter reports its nominal bf16 dtype. So the buffer holds 2 B
per parameter instead of 4, and the data-parallel reduction moves those 2 B. Expected numbers are derived here
from the parameter count.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # the studio control's test below

import pytest  # noqa: E402
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan.checks import check_project
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload

from tests.agreement import assert_engines_agree, assert_search_matches_engine

GPT = GPTSpec(name="gpt-grads", layers=4, hidden=1024, heads=16, seq_len=512, vocab=8192)
FIELD = "mapping.grad_reduce_in_fp32"


def _project(dtype: str = "bf16", engine: str = "analytic", mode: str = "train", **mapping) -> Project:
    m = {"tp": 1, "pp": 1, "dp": 1, "micro_batch": 1, "global_batch": 4} | mapping
    return Project(name="grads", hardware=load_system("dgx-h100"), workload=GPT, mapping=Mapping(**m),
                   run=RunSettings(dtype=dtype, mode=mode, engine=engine, contention=False))


def _params() -> float:
    return sum(op.params for op in build_workload(GPT).ops())


@pytest.mark.parametrize("dtype,extra", [("bf16", {}), ("fp8", {}), ("fp8", {"fp8_param_gather": True})])
def test_the_buffer_holds_two_bytes_per_parameter(dtype: str, extra: dict):
    """fp32 buffer: 4 B per parameter; bf16: 2 B, for bf16 and fp8 runs alike (an fp8 parameter's gradient is
    bf16); weights and optimizer state do not move."""
    case = {"dp": 4, "zero": 1, "global_batch": 16} | extra
    fp32 = make_plan(_project(dtype, **case)).stages[0]
    bf16 = make_plan(_project(dtype, grad_reduce_in_fp32=False, **case)).stages[0]
    assert fp32.state.gradients == pytest.approx(4.0 * _params(), rel=1e-9)
    assert bf16.state.gradients == pytest.approx(2.0 * _params(), rel=1e-9)
    assert (bf16.state.weights, bf16.state.optimizer) == (fp32.state.weights, fp32.state.optimizer)


def test_the_reduction_moves_the_bf16_buffer():
    """The data-parallel reduction's bytes are the buffer's: half of the fp32 buffer's, and it takes less time."""
    fp32 = make_plan(_project(dp=4, global_batch=16)).stages[0]
    bf16 = make_plan(_project(dp=4, global_batch=16, grad_reduce_in_fp32=False)).stages[0]
    assert sum(bf16.grad_bytes.values()) == pytest.approx(2.0 * _params(), rel=1e-9)
    assert sum(fp32.grad_bytes.values()) == pytest.approx(4.0 * _params(), rel=1e-9)
    on, off = simulate(_project(dp=4, global_batch=16, grad_reduce_in_fp32=False)), simulate(
        _project(dp=4, global_batch=16))
    assert on.time_breakdown_s["dp_comm"] < off.time_breakdown_s["dp_comm"]
    assert off.peak_memory_bytes - on.peak_memory_bytes == pytest.approx(2.0 * _params(), rel=1e-9)


@pytest.mark.parametrize("zero", [0, 1])
def test_both_engines_agree(zero: int):
    case = {"grad_reduce_in_fp32": False, "dp": 4, "global_batch": 16, "zero": zero}
    assert_engines_agree(simulate(_project(engine="analytic", **case)), simulate(_project(engine="event", **case)))


@pytest.mark.parametrize("zero", [0, 1])
def test_search_agrees_with_the_engine(zero: int):
    """The search's evaluator holds and reduces the buffer as the plan does (ZeRO 0/1, what its first stage
    walks; ZeRO-2/3 variants are planned)."""
    assert_search_matches_engine(_project(dp=4, global_batch=16), Candidate(1, 2, 4, 1, zero=zero),
                                 grad_reduce_in_fp32=False)


def test_true_is_the_default_and_is_not_saved():
    p = _project()
    assert "grad_reduce_in_fp32" not in p.mapping.model_dump(mode="json")
    assert "grad_reduce_in_fp32" in _project(grad_reduce_in_fp32=False).mapping.model_dump(mode="json")
    again = Mapping.model_validate(p.mapping.model_dump(mode="json"))
    assert again.grad_reduce_in_fp32 and simulate(p).peak_memory_bytes == simulate(
        p.model_copy(update={"mapping": again})).peak_memory_bytes


@pytest.mark.parametrize(("project", "says"), [
    (_project("fp16", grad_reduce_in_fp32=False), "fp16"),
    (_project("fp32", grad_reduce_in_fp32=False), "fp32"),
    (_project(mode="infer", global_batch=1, grad_reduce_in_fp32=False), "training only"),
], ids=["fp16", "fp32", "infer"])
def test_refused_outside_bf16_or_fp8_training(project: Project, says: str):
    problems = [p for p in check_project(project) if p.path == FIELD]
    assert problems and any(says in p.reason for p in problems)


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_accepted_with_bf16_and_fp8_training(dtype: str):
    assert check_project(_project(dtype, grad_reduce_in_fp32=False)) == []


CLI = ["run", "--system", "dgx-h100", "--model", "gpt", "--layers", "4", "--hidden", "1024", "--heads", "16",
       "--seq-len", "512", "--vocab", "8192", "--tp", "1", "--pp", "1", "--dp", "8", "--global-batch", "16",
       "--engine", "analytic", "--json", "--quiet"]


def test_cli_flag_reaches_the_mapping(capsys):
    """``--grad-reduce-dtype bf16`` is the field set False: the peak memory drops by 2 B per parameter."""
    import json

    from tilewright.engine.cli import main

    assert main([*CLI, "--dtype", "bf16"]) == 0
    fp32 = json.loads(capsys.readouterr().out)
    assert main([*CLI, "--dtype", "bf16", "--grad-reduce-dtype", "bf16"]) == 0
    bf16 = json.loads(capsys.readouterr().out)
    saved = fp32["peak_memory_bytes"] - bf16["peak_memory_bytes"]
    assert saved == pytest.approx(2.0 * _params(), rel=1e-9)


def test_cli_refuses_it_for_fp16_naming_the_field(capsys):
    from tilewright.engine.cli import main

    assert main([*CLI, "--dtype", "fp16", "--grad-reduce-dtype", "bf16"]) == 2
    assert FIELD in capsys.readouterr().err


def test_studio_option_is_one_undo_step_and_off_for_fp16(make_window):
    """The check box (on: fp32, the default) sets the field at once as one undo step; an fp16 run cannot use it."""
    w = make_window(_project("bf16", dp=8, global_batch=16))
    box, doc = w.workload.options.grad_fp32, w.doc
    assert box.isEnabled() and box.box.isChecked() and "grad_reduce_in_fp32" in box.toolTip()
    box.box.click()
    assert doc.project.mapping.grad_reduce_in_fp32 is False and doc.undo_stack.undoText() == "Gradients in bf16"
    assert doc.undo_stack.count() == 1
    doc.undo_stack.undo()
    assert doc.project.mapping.grad_reduce_in_fp32 and box.box.isChecked()
    fp16 = make_window(_project("fp16", dp=8, global_batch=16)).workload.options.grad_fp32
    assert not fp16.isEnabled() and "fp16" in fp16.toolTip()


def test_search_keeps_the_projects_number_formats(tmp_path):
    """`search` on a project keeps its recipe's formats (the gradient buffer's, Adam's moments'), which the
    parallelism does not decide: candidates are ranked with the buffer the run would hold."""
    import json

    from tilewright.engine.cli.dispatch import build_parser
    from tilewright.engine.cli.search import search_template
    from tilewright.engine.io.project_file import project_to_data

    p = _project(dp=4, global_batch=16, grad_reduce_in_fp32=False, optimizer_moments="bf16")
    path = tmp_path / "bf16-grads.json"
    path.write_text(json.dumps(project_to_data(p)))
    template, devices, batch = search_template(build_parser().parse_args(["search", str(path)]))
    assert (devices, batch) == (4, 16)
    assert template.mapping.grad_reduce_in_fp32 is False and template.mapping.optimizer_moments == "bf16"
