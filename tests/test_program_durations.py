"""The measured duration of the small programs a Tenstorrent runtime adds around a model op
(``Compute.program_s_by_op``).

The op model costs an op's first program (its kernel plus ``fixed_op_s``); the reshapes, rotary, cache updates
and reshards tt-transformers runs around it have no kernel model, so each costs what Tenstorrent's own decode
profiles measure for such a program, launch to launch. These tests check that each further program pays exactly
its figure (and ``fixed_op_s`` where none is given), in one op and in a whole decode step in both engines, and
that the presets' figures are the published per-op durations they cite.
"""

from __future__ import annotations

import dataclasses

import pytest
from tilewright.engine.io.presets import load_project_preset, load_system
from tilewright.engine.ir.hardware import Component, Compute
from tilewright.engine.ir.project import Project
from tilewright.engine.perf.op_cost import extra_program_s, op_time, programs_fixed_s, runtime_programs
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads.transformer_inference import inference_graph

N150 = "wormhole-n150-llama2-7b-inference"
# Extra programs per op that carry their own duration in the presets (op → programs beyond the first).
SHAPED = ("attention", "qkv", "out_proj", "activation", "mlp_down")

# tenstorrent/tt-metal models/demos/llama3_subdevices/tests/test_decoder_device_perf.py @01020348, perf_targets:
# (kernel_duration, op_to_op) in ns of the decode programs tt-transformers also runs (Wormhole, per device).
CREATE_HEADS = (9503.777777777777, 845.6666666666666)
ROTARY = (5617.111111111111, 606.1111111111111)
PAGED_UPDATE = (6939.111111111112, 860.2222222222222)
CONCAT_HEADS = (7325.777777777777, 697.0)
RESHARD = (2003.7777777777776, 734.4444444444445)


def _walk(c: Component):
    yield c
    for child in c.children:
        yield from _walk(child)


def without_program_durations(project: Project) -> Project:
    """The same project with every extra program at ``fixed_op_s`` (the model before ``program_s_by_op``)."""
    p = project.model_copy(deep=True)
    for c in _walk(p.hardware):
        if c.compute is not None:
            c.compute.program_s_by_op = {}
    return p


def with_inference(project: Project, **inference) -> Project:
    inf = project.run.inference.model_copy(update=inference)
    return project.model_copy(update={"run": project.run.model_copy(update={"inference": inf})})


def n150_compute() -> Compute:
    compute = load_system("wormhole-n150").children[0].compute
    assert compute is not None
    return compute


def seconds(ns: tuple[float, float]) -> float:
    return sum(ns) * 1e-9


def test_wormhole_figures_are_the_published_kernel_plus_op_to_op_durations():
    """attention's seven extra programs are create heads, rotary of Q and of K, the cache update of K and of V, a
    to_memory_config (a reshard) and concat heads; the other ops' one extra program is a reshard."""
    compute = n150_compute()
    att = (seconds(CREATE_HEADS) + 2 * seconds(ROTARY) + 2 * seconds(PAGED_UPDATE) + seconds(RESHARD)
           + seconds(CONCAT_HEADS)) / 7
    assert compute.programs_by_op["attention"] == 8
    assert compute.program_s_by_op["attention"] == pytest.approx(att, abs=0.005e-6)  # quoted to 10 ns
    for name in ("qkv", "out_proj", "activation", "mlp_down"):
        assert compute.programs_by_op[name] == 2
        assert compute.program_s_by_op[name] == pytest.approx(seconds(RESHARD), abs=0.005e-6)
    # the op-to-op gap alone is well under fixed_op_s: the simplest program keeps fixed_op_s
    gaps = (gap for _, gap in (CREATE_HEADS, ROTARY, PAGED_UPDATE, CONCAT_HEADS, RESHARD))
    assert max(gaps) * 1e-9 < compute.fixed_op_s
    assert "sample_update" not in compute.program_s_by_op


@pytest.mark.parametrize("name", ["wormhole-n300", "wormhole-t3000", "wormhole-galaxy"])
def test_every_wormhole_board_carries_the_same_program_durations(name):
    chips = [c for c in _walk(load_system(name)) if c.compute is not None and c.compute.grid is not None]
    assert chips
    for c in chips:
        assert c.compute.program_s_by_op == n150_compute().program_s_by_op


@pytest.mark.parametrize("name", ["blackhole-p150", "blackhole-galaxy"])
def test_blackhole_figures_are_wormholes_cycles_at_its_clock(name):
    """No Blackhole per-op decode durations are published: Wormhole's, in cycles, at Blackhole's clock, as its
    fixed_op_s is scaled (quoted to 10 ns)."""
    wh = n150_compute()
    bh = next(c.compute for c in _walk(load_system(name)) if c.compute is not None and c.compute.grid is not None)
    ratio = wh.grid.clock_hz / bh.grid.clock_hz
    assert bh.fixed_op_s == pytest.approx(wh.fixed_op_s * ratio, rel=1e-9)
    assert bh.program_s_by_op.keys() == wh.program_s_by_op.keys()
    for op, s in wh.program_s_by_op.items():
        assert bh.program_s_by_op[op] == pytest.approx(s * ratio, abs=0.005e-6)


def test_each_extra_program_pays_its_own_figure_first_glob_wins_fixed_op_s_otherwise():
    compute = Compute.model_construct(  # the lookups alone (a real device with these fields has a grid)
        peak_flops={"bf16": 1e15}, fixed_op_s=2e-6,
        programs_by_op={"attention": 8, "qkv": 2, "norm*": 3, "softmax": 0},
        program_s_by_op={"att*": 7e-6, "attention": 1.0, "qkv": 3e-6},
    )
    workload = load_project_preset(N150).workload
    unfused = inference_graph(workload, 1, 2, 1, False)  # carries the softmax a flash kernel would hold
    ops = {op.name.split(".", 1)[-1]: op for op in unfused.layer_ops(1)}
    assert extra_program_s(ops["attention"], compute) == 7e-6  # the first matching pattern, not the exact name
    assert programs_fixed_s(ops["attention"], compute) == pytest.approx(2e-6 + 7 * 7e-6, rel=1e-12)
    assert programs_fixed_s(ops["qkv"], compute) == pytest.approx(2e-6 + 3e-6, rel=1e-12)
    assert programs_fixed_s(ops["norm1"], compute) == pytest.approx(3 * 2e-6, rel=1e-12)  # no figure: fixed_op_s
    assert programs_fixed_s(ops["residual1"], compute) == pytest.approx(2e-6, rel=1e-12)  # one program
    assert programs_fixed_s(ops["softmax"], compute) == 0.0  # inside another program


def test_an_ops_time_grows_by_its_extra_programs_figures_over_fixed_op_s():
    project = load_project_preset(N150)
    plan = make_plan(project)
    dev = plan.stages[0].dev
    bare_dev = dataclasses.replace(dev, compute=dev.compute.model_copy(update={"program_s_by_op": {}}))
    graph = inference_graph(project.workload, 1, 130, 1, True)
    m = project.mapping
    for op in graph.layer_ops(1):
        name = op.name.split(".", 1)[-1]
        args = (1, m.tp, False, False, plan.elem_bytes, False, False, plan.formats, m.spatial, None)
        with_figures, without = op_time(op, dev, *args), op_time(op, bare_dev, *args)
        figure = dev.compute.program_s_by_op.get(name)
        extra = (runtime_programs(op, dev.compute) - 1) * (figure - dev.compute.fixed_op_s) if figure else 0.0
        assert with_figures.busy_s - without.busy_s == pytest.approx(extra, abs=1e-12), name
        assert with_figures.compute_s == without.compute_s and with_figures.memory_s == without.memory_s


@pytest.mark.parametrize("engine", ["event", "analytic"])
def test_a_decode_step_and_a_prefill_pay_every_layers_extra_programs_in_both_engines(engine):
    """n150, one device: each layer's extra programs add (their figure - fixed_op_s) each to the decode step and
    to the batch-1 prefill; the sampling tail's programs carry no figure and are unchanged."""
    project = with_inference(load_project_preset(N150), batch=1, prompt_tokens=64, output_tokens=4)
    project.run.engine = engine
    compute = project.hardware.children[0].compute
    assert compute is not None
    per_layer = sum((compute.programs_by_op[op] - 1) * (compute.program_s_by_op[op] - compute.fixed_op_s)
                    for op in SHAPED)
    assert per_layer > 0
    layers = project.workload.layers
    base = simulate(without_program_durations(project), series=False)
    now = simulate(project, series=False)
    assert now.tpot_s - base.tpot_s == pytest.approx(layers * per_layer, rel=1e-6)
    assert now.ttft_s - base.ttft_s == pytest.approx(layers * per_layer, rel=1e-6)


def test_a_compute_without_figures_saves_as_before():
    """``program_s_by_op`` is quiet: a device without figures writes no such key (old projects save back
    unchanged); one with figures writes them."""
    compute = Compute(peak_flops={"bf16": 1e15})
    assert "program_s_by_op" not in compute.model_dump(mode="json")
    assert n150_compute().model_dump(mode="json")["program_s_by_op"]["attention"] > 0


def test_a_device_without_a_grid_refuses_program_counts():
    """GPUs launch kernels; per-op device programs are a grid runtime's: set on a GPU they would change nothing,
    so the field is refused by name."""
    import pytest as _pytest
    from pydantic import ValidationError
    from tilewright.engine.io.presets import load_system

    gpu = load_system("dgx-a100").children[0].children[0].compute
    for field, value in (("programs_by_op", {"qkv": 2}), ("program_s_by_op", {"qkv": 1e-6})):
        with _pytest.raises(ValidationError, match=field):
            type(gpu).model_validate({**gpu.model_dump(), field: value})
