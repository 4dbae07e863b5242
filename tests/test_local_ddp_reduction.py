"""Without ``overlap_grad_reduce`` (Megatron-LM's local DDP, Megatron-Core's DDP with the option off) an interleaved
stage reduces its model chunks' gradients after its whole schedule, one blocking collective per chunk after the
other (``plan.replica_sync.gradients_reduced``): Megatron's ``train_step`` loops ``allreduce_gradients`` over the
chunks once ``forward_backward_func`` returns. The engines once started each chunk's reduction at that chunk's last
backward and let the chunks' reductions run at once. Derived here from the plan's collectives and the Gantt's
pipeline slices, and checked alike on the analytic engine, the event engine and the search's recurrence."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.project import EngineKind
from tilewright.engine.results.timeline import CATEGORY_INDEX
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import make_plan, simulate

from tests.agreement import assert_engines_agree, assert_search_matches_engine
from tests.engine_cases import dgx

INTERLEAVED = {"tp": 1, "pp": 2, "dp": 4, "schedule": "interleaved-1f1b", "interleave": 2}
PIPELINE = ("compute", "recompute", "pp_comm", "tp_comm")  # the slices of a stage's schedule


def _on(project: Project, engine: str, contention: bool = False) -> Project:
    run = project.run.model_copy(update={"engine": EngineKind(engine), "contention": contention})
    return project.model_copy(update={"run": run})


def _stage_slices(result, r: int) -> tuple[float, float, float]:
    """(end of stage ``r``'s last pipeline slice, start and seconds of its "gradient reduction" slice)."""
    tl = result.timeline
    a = tl.arrays()
    lane = next(i for i, ln in enumerate(tl.lanes) if ln.name.startswith(f"stage {r}"))
    mine = a["lane"] == lane
    pipeline = [CATEGORY_INDEX[c] for c in PIPELINE]
    ends = [s + d for s, d, c, lab in zip(a["start"][mine], a["dur"][mine], a["category"][mine], a["label"][mine],
                                          strict=True)
            if c in pipeline and tl.labels[lab] != "gradient reduction"]
    label = tl.labels.index("gradient reduction")
    reduction = mine & (a["label"] == label)
    assert reduction.sum() == 1
    return max(ends), float(a["start"][reduction][0]), float(a["dur"][reduction][0])


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_the_chunks_reduce_one_after_the_other_after_the_schedule(engine: str):
    """A 2-stage, 2-chunk run over 4 replicas: on each stage the reduction starts when its last pipeline step
    ends and lasts the sum of its chunks' all-reduces (each chunk's alone, ``Plan.dp_collective``); the iteration
    ends at the later stage's + the tied embedding's all-reduce + the optimizer step (no ZeRO gather). Reducing
    each chunk from its own last backward, at once, would end by max(chunk) after the schedule: less than the sum."""
    project = dgx(**INTERLEAVED)
    plan = make_plan(project)
    assert not project.mapping.overlap_grad_reduce and plan.tied_ranks() == (0, 1)
    result = simulate(_on(project, engine))
    reduced = []
    for r, st in enumerate(plan.stages):
        chunk_s = [plan.dp_collective(r, c).time(plan.hw) for c in st.chunk_layers]
        assert len(chunk_s) == 2 and min(chunk_s) > 0
        pipeline_end, start, seconds = _stage_slices(result, r)
        assert start == pytest.approx(pipeline_end, rel=1e-12)
        assert seconds == pytest.approx(sum(chunk_s), rel=1e-9)
        assert seconds > max(chunk_s) * (1 + 1e-3)
        reduced.append(pipeline_end + sum(chunk_s))
    tied = plan.tied_collective().time(plan.hw)
    step = max(st.optimizer_s for st in plan.stages)
    assert result.iteration_time_s == pytest.approx(max(reduced) + tied + step, rel=1e-9)


@pytest.mark.parametrize("mapping", [
    INTERLEAVED,
    {**INTERLEAVED, "zero": 1},
    {"tp": 1, "pp": 2, "dp": 2, "schedule": "interleaved-1f1b", "interleave": 2, "recompute": "full"},
    {"tp": 2, "pp": 2, "dp": 2},
], ids=["vp2", "vp2-zero1", "vp2-recompute", "no-vp"])
def test_both_engines_agree(mapping: dict):
    """The event engine (contention off) times the sequential reductions as the analytic engine: the iteration
    and every category of the breakdown."""
    project = dgx(**mapping)
    assert_engines_agree(simulate(_on(project, "analytic")), simulate(_on(project, "event")))


def test_the_contended_event_engine_runs_the_chunks_apart():
    """With contention the chunks' reductions still run one after the other, each at most as fast as alone
    (``Plan.dp_collective``): a stage's reduction lasts at least its chunks' sum (stage 1's last gradient send to
    stage 0 may still share its links), and the iteration is no shorter than without contention."""
    project = dgx(**INTERLEAVED)
    plan = make_plan(project)
    contended = simulate(_on(project, "event", contention=True))
    assert contended.iteration_time_s >= simulate(_on(project, "event")).iteration_time_s * (1 - 1e-12)
    for r, st in enumerate(plan.stages):
        pipeline_end, start, seconds = _stage_slices(contended, r)
        assert start == pytest.approx(pipeline_end, rel=1e-12)
        assert seconds >= sum(plan.dp_collective(r, c).time(plan.hw) for c in st.chunk_layers) * (1 - 1e-9)


def test_overlap_still_starts_the_buckets_in_the_backward():
    """With ``overlap_grad_reduce`` the rule is the bucketed one (unchanged): each chunk's early bucket runs beside
    its last backward, so what shows after the schedule is less than the chunks' sum."""
    project = dgx(overlap_grad_reduce=True, **INTERLEAVED)
    plan = make_plan(project)
    result = simulate(_on(project, "analytic"))
    for r, st in enumerate(plan.stages):
        _, _, seconds = _stage_slices(result, r)
        assert seconds < 0.9 * sum(plan.dp_collective(r, c).time(plan.hw) for c in st.chunk_layers)


GPT = GPTSpec(name="g", layers=8, hidden=2048, heads=16, seq_len=1024, vocab=8192)


@pytest.mark.parametrize("c", [Candidate(1, 2, 4, 1, interleave=2), Candidate(1, 2, 4, 1, interleave=2, zero=1),
                               Candidate(2, 2, 4, 1, interleave=2), Candidate(1, 2, 4, 1)],
                         ids=lambda c: c.label())
def test_the_search_reduces_as_the_engine(c: Candidate):
    """The search's recurrence (``exact_time`` through ``tail._reduced``) times the sequential reductions as the
    analytic engine does, on a DGX H100 without ``overlap_grad_reduce``."""
    base = Project(name="s", hardware=load_system("dgx-h100"), workload=GPT, mapping=Mapping(global_batch=32),
                   run=RunSettings(dtype="bf16"))
    p = assert_search_matches_engine(base, c, keep_base=True)
    assert not p.mapping.overlap_grad_reduce
