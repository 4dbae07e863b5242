"""Full recomputation of only the first N transformer layers of each model chunk (``mapping.recompute_layers``,
Megatron's ``--recompute-method block --recompute-num-layers N``): the re-run pass, the stored activations and
the hardware FLOPs lie N/L of the way from no recomputation to full recomputation of a chunk's L identical
layers; the embedding and the head are never re-run (Megatron checkpoints its transformer layers only)."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.simulate import make_plan, simulate

LAYERS = 8
SPEC = GPTSpec(name="gpt-small", layers=LAYERS, hidden=1024, heads=16, seq_len=1024, vocab=8192)


def _project(recompute: Recompute, layers: int | None = None, pp: int = 1, interleave: int = 1) -> Project:
    mapping = Mapping(tp=2, pp=pp, dp=1, micro_batch=2, global_batch=8, interleave=interleave,
                      recompute=recompute, recompute_layers=layers)
    return Project(name="r", hardware=load_system("dgx-a100"), workload=SPEC, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine="analytic"))


def _between(none: float, full: float, n: int, of: int) -> float:
    return none + n / of * (full - none)


@pytest.mark.parametrize("n", [1, 3, LAYERS])
def test_part_of_the_chunk_is_recomputed(n: int):
    none, full, part = (make_plan(_project(r, k)) for r, k in
                        ((Recompute.none, None), (Recompute.full, None), (Recompute.full, n)))
    stage = part.stages[0]
    rerun = full.stages[0].passes[(0, "R")].busy_s
    assert stage.passes[(0, "R")].busy_s == pytest.approx(n / LAYERS * rerun, rel=0.02)
    assert stage.act_bytes[0] == pytest.approx(
        _between(none.stages[0].act_bytes[0], full.stages[0].act_bytes[0], n, LAYERS), rel=1e-9)
    assert part.hardware_flops == pytest.approx(_between(none.hardware_flops, full.hardware_flops, n, LAYERS),
                                                rel=1e-9)


def test_the_embedding_and_head_are_never_rerun():
    plan = make_plan(_project(Recompute.full))
    labels = {s.label for s in plan.stages[0].passes[(0, "R")].segments}
    assert labels and all(label.startswith("block") for label in labels)


def test_per_chunk_with_interleaving():
    """Two stages of two chunks of two layers: N = 1 re-runs one layer of every chunk."""
    full = make_plan(_project(Recompute.full, None, pp=2, interleave=2))
    part = make_plan(_project(Recompute.full, 1, pp=2, interleave=2))
    for st_full, st_part in zip(full.stages, part.stages, strict=True):
        for c in (0, 1):
            assert st_part.passes[(c, "R")].busy_s == pytest.approx(st_full.passes[(c, "R")].busy_s / 2, rel=0.02)


def test_iteration_time_lies_between_and_both_engines_agree():
    times = [simulate(_project(Recompute.none)).iteration_time_s,
             simulate(_project(Recompute.full, 3)).iteration_time_s,
             simulate(_project(Recompute.full)).iteration_time_s]
    assert times[0] < times[1] < times[2]
    event = _project(Recompute.full, 3)
    event = event.model_copy(update={"run": event.run.model_copy(update={"engine": "event", "contention": False})})
    assert simulate(event).iteration_time_s == pytest.approx(times[1], rel=0.01)


def test_recompute_layers_needs_full_recompute():
    with pytest.raises(ValueError, match="recompute_layers"):
        Mapping(recompute=Recompute.selective, recompute_layers=2)
