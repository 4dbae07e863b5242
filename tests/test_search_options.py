"""The parallelism search honours the mapping options the plan honours: CUDA graphs (``mapping.cuda_graph_scope``,
``plan.cuda_graphs``: captured ops' host work, and under 'full_iteration' the passes' host syncs, gone), fp8
GEMMs saving their inputs in fp8 (``perf.memory.fp8_saved``), ZeRO over dp · cp with context parallelism
(``plan.sharding``), and selective recomputation of Megatron-Core's module lists (``extended``'s recipes).

Each expectation is the engine's own answer for the same mapping (``make_plan`` + the analytic engine), never a
stored number: the search exists to rank mappings as the engine would time them.
"""

from __future__ import annotations

import pytest
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Project, RunSettings
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.workload import MoESpec
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.search.parallel.estimate import Estimator
from tilewright.engine.workloads import build_workload

from tests.agreement import engine_result, search_estimate

GPT = GPTSpec(name="gpt-test", layers=4, hidden=512, heads=8, seq_len=256, vocab=4096)
MOE = GPTSpec(
    name="moe-test", layers=4, hidden=512, heads=8, seq_len=256, vocab=4096,
    moe=MoESpec(experts=8, top_k=2, expert_ffn=1024, first_dense_layers=1),
)
BATCH = 16


def _dropping(workload: GPTSpec) -> GPTSpec:
    """The MoE with drop-and-pad routing (a capacity factor): no host sync on the token counts."""
    return workload.model_copy(update={"moe": workload.moe.model_copy(update={"capacity_factor": 1.25})})


def _project(system: str, workload: GPTSpec, c: Candidate, dtype: str = "bf16", **mapping) -> Project:
    p = Project(name="t", hardware=load_system(system), workload=workload, run=RunSettings(dtype=dtype))
    return p.model_copy(update={"mapping": c.mapping(BATCH).model_copy(update=mapping)})


SCOPES = [["attn", "mlp"], ["full_iteration"]]


@pytest.mark.parametrize("scope", SCOPES, ids=["+".join(s) for s in SCOPES])
@pytest.mark.parametrize(("system", "workload"), [("dgx-a100", GPT), ("dgx-h100", MOE)], ids=["gpt-a100", "moe-h100"])
@pytest.mark.parametrize("tp", [1, 2])
def test_search_times_cuda_graphs_as_theengine_result(scope: list[str], system: str, workload: GPTSpec, tp: int):
    """Host-bound toy layers: CUDA graphs change the iteration by far more than 1e-6 (checked), so an estimator
    that ignored the scope, or kept the per-pass syncs under 'full_iteration', would miss. pp 1 has no
    closed-form approximation; dp > 1 brings the data-parallel reduction's drain, which 'full_iteration' drops."""
    c = Candidate(tp, 1, 8 // tp, 1)
    if workload.moe is not None and "full_iteration" in scope:  # a captured iteration cannot wait for the
        workload = _dropping(workload)  # dropless dispatcher's token counts (``plan.cuda_graphs``)
    p = _project(system, workload, c, cuda_graph_scope=scope)
    eager = engine_result(_project(system, workload, c)).iteration_time_s
    want = engine_result(p).iteration_time_s
    assert abs(want - eager) > 1e-3 * eager  # the option matters here
    fast, exact, _ = search_estimate(p, c)
    assert fast == pytest.approx(want, rel=1e-6)
    assert exact == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("scope", [*SCOPES, None], ids=[*("+".join(s) for s in SCOPES), "eager"])
@pytest.mark.parametrize(("tp", "workload"), [(2, GPT), (1, MOE)], ids=["gpt-tp2", "moe-tp1"])
def test_search_recurrence_times_cuda_graphs_with_a_pipeline(scope: list[str] | None, tp: int, workload: GPTSpec):
    """With pipeline stages each pass's syncs include the sends' (``train_step.pass_drains``): the recurrence
    the search refines its kept candidates with follows the plan there too. The dropless MoE at tp 1 has host
    waits inside its layers and no collective: its chunks' passes are folded layer by layer
    (``layer_table.fold``), captured attention making some stretches device-bound beside host-bound ones."""
    c = Candidate(tp, 2, 4 // tp, 1)
    if workload.moe is not None and scope is not None and "full_iteration" in scope:
        workload = _dropping(workload)
    p = _project("dgx-a100", workload, c, cuda_graph_scope=scope)
    _, exact, _ = search_estimate(p, c)
    assert exact == pytest.approx(engine_result(p).iteration_time_s, rel=1e-6)


@pytest.mark.parametrize(("system", "workload"), [("dgx-h100", GPT), ("dgx-h100", MOE)], ids=["gpt", "moe"])
@pytest.mark.parametrize("recompute", [Recompute.none, Recompute.selective])
def test_search_memory_of_an_fp8_project_is_the_engines(system: str, workload: GPTSpec, recompute: Recompute):
    """fp8 GEMMs save their inputs in fp8: the search's stored activations are the plan's, which differ from
    the same mapping in bf16 (checked) — the evaluator counts with the run's formats."""
    c = Candidate(2, 2, 2, 2, recompute=recompute)
    p = _project(system, workload, c, dtype="fp8")
    _, _, mem = search_estimate(p, c)
    want = engine_result(p).peak_memory_bytes
    assert mem == pytest.approx(want, rel=1e-6)
    hw = elaborate(p.hardware, devices_needed=c.devices)
    est = Estimator(p, hw, build_workload(p.workload))
    table, _ = est.layer_table(c)
    bf16 = _project(system, workload, c)
    est16 = Estimator(bf16, hw, build_workload(workload))
    table16, _ = est16.layer_table(c)
    assert table.act.sum() < table16.act.sum()  # fp8 saved inputs: fewer bytes than bf16's


@pytest.mark.parametrize("zero", [0, 1])
@pytest.mark.parametrize("micro_batch", [1, 2])
def test_search_memory_with_context_parallelism_is_the_engines(zero: int, micro_batch: int):
    """cp 2: a device runs micro_batch / cp samples' worth of tokens and ZeRO shards over dp · cp; the search's
    memory is the plan's peak (with ZeRO-1 it is below the same mapping sharded over dp alone)."""
    c = Candidate(2, 2, 1, micro_batch, zero=zero, cp=2)
    p = _project("dgx-a100", GPT.model_copy(update={"seq_len": 512}), c)
    _, _, mem = search_estimate(p, c)
    assert mem == pytest.approx(engine_result(p).peak_memory_bytes, rel=1e-6)


# Routed experts whose activations dominate a layer's stored bytes (top-8 of 16, expert FFN 16 × hidden), deep
# enough that on one DGX H100 nothing without recomputation at tp 2 fits and selective recomputation of the
# attention core alone does not either, while the experts' activation function (moe_act) re-runs cheaply
TIGHT = GPTSpec(
    name="moe-tight", layers=40, hidden=1024, heads=16, seq_len=4096, vocab=32000,
    moe=MoESpec(experts=16, top_k=8, expert_ffn=16384, first_dense_layers=1),
)


@pytest.fixture(scope="module")
def tight_search():
    from tilewright.engine.search.parallel.extended import Extensions
    from tilewright.engine.search.parallel.search import search

    p = Project(name="t", hardware=load_system("dgx-h100"), workload=TIGHT, run=RunSettings(dtype="bf16"))
    ext = Extensions(eps=[1], cps=[1], zeros=[0, 1], fsdp=False, offload=None, overlap=False)
    return p, search(p, 8, 64, resimulate=False, extensions=ext)


def test_memory_tight_moe_search_proposes_a_recompute_modules_list_that_fits(tight_search):
    """The search plans the recompute-module lists of NVIDIA's MoE recipes where the default selective
    recomputation misses memory; the plan (not the search) decides that the proposal fits, that without its
    list the same mapping does not, and that it beats the same mapping with full recomputation."""
    from dataclasses import replace

    from tilewright.engine.search.parallel.report import search_text

    p, result = tight_search
    proposed = [r for r in result.ranked if r.candidate.recompute_modules is not None]
    assert proposed
    c = proposed[0].candidate
    assert "moe_act" in c.recompute_modules and c.recompute is Recompute.selective
    mapping = c.mapping(64, p.mapping)
    assert mapping.recompute_modules == list(c.recompute_modules)
    run = engine_result(p.model_copy(update={"mapping": mapping}))
    assert run.oom is None
    assert run.iteration_time_s == pytest.approx(proposed[0].iteration_time_s, rel=1e-9)
    default = engine_result(p.model_copy(update={"mapping": replace(c, recompute_modules=None).mapping(64, p.mapping)}))
    assert default.oom is not None  # the list is what makes it fit
    full = engine_result(p.model_copy(update={"mapping": replace(c, recompute=Recompute.full,
                                                           recompute_modules=None).mapping(64, p.mapping)}))
    assert run.iteration_time_s < full.iteration_time_s  # it re-runs less than the whole layer
    assert "rc:" + "+".join(c.recompute_modules) in search_text(result)


def test_recompute_modules_narrowing():
    """One parser for the CLI and the studio: lists separated by ';', Megatron-Core's names, 'none' for no
    list; a bad name is an input error naming the flag."""
    from tilewright.engine.errors import InputError
    from tilewright.engine.search.parallel.extended import Extensions
    from tilewright.engine.search.parallel.narrowing import narrowing

    got = narrowing("cli", recompute_modules="core_attn, mlp; mla_up_proj,layernorm,moe_act")
    assert got == {"recipes": [("core_attn", "mlp"), ("mla_up_proj", "layernorm", "moe_act")]}
    assert narrowing("cli", recompute_modules="none") == {"recipes": []}
    assert narrowing("cli") == {}
    with pytest.raises(InputError, match="--recompute-modules"):
        narrowing("cli", recompute_modules="core_attn,attention")
    ext = Extensions(recipes=[("core_attn", "mlp")])
    c = Candidate(1, 1, 8, 1, recompute=Recompute.selective)
    assert ext.allows(replace_modules(c, ("core_attn", "mlp")))
    assert not ext.allows(replace_modules(c, ("core_attn", "layernorm", "moe_act")))


def replace_modules(c: Candidate, modules: tuple[str, ...]) -> Candidate:
    from dataclasses import replace

    return replace(c, recompute_modules=modules)


def test_the_search_cli_narrows_the_recompute_module_lists(capsys):
    """``search --recompute-modules``: 'none' leaves every candidate without a module list; a bad name exits 2
    naming the flag (the narrowing's parser, shared with the studio)."""
    import json

    from tilewright.engine.cli import main

    base = ["search", "--system", "dgx-h100", "--model", "gpt", "--layers", "4", "--hidden", "2048", "--heads",
            "16", "--moe-experts", "8", "--moe-top-k", "2", "--devices", "8", "--global-batch", "16",
            "--no-simulate", "--json", "--quiet"]
    assert main([*base, "--recompute-modules", "none"]) == 0
    candidates = json.loads(capsys.readouterr().out)["candidates"]
    assert candidates and all(not c.get("recompute_modules") for c in candidates)
    assert main([*base, "--recompute-modules", "core_attn,bogus"]) == 2
    assert "--recompute-modules" in capsys.readouterr().err
