"""2-D tensor parallelism (``mapping.tp_axes``): on a Galaxy's 4 × 8 mesh each all-reduce spans one mesh axis
(4 or 8 chips) and carries the share of the output that axis implies; without it nothing changes."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import load_project_preset
from tilewright.engine.ir.project import Project
from tilewright.engine.perf.collectives import collective
from tilewright.engine.plan.checks import check_project
from tilewright.engine.plan.inference_phases import inference_phases
from tilewright.engine.plan.tensor_axes import COLUMN, ROW
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import make_plan, simulate

GALAXY = "wormhole-galaxy-llama3-70b-inference"  # 4 × 8 mesh, tp 32, ranks row-major over the chips


def galaxy(**mapping) -> Project:
    """The Galaxy project with tt-transformers' collectives (every partial sum all-reduced, in the activations'
    format), not the preset's llama3_70b_galaxy ones (tests/test_tiled_ccl_structure.py), unless ``mapping``
    says otherwise."""
    data = load_project_preset(GALAXY).model_dump(mode="json")
    data["mapping"]["tp_axes_collectives"] = "all-reduce"
    data["mapping"]["formats"]["collectives_by_op"] = {}
    data["mapping"].update(mapping)
    return Project.model_validate(data)


def decode_comms(project: Project) -> Counter:
    """{(kind, bytes per token): count} of every collective of a decode step (one token per sequence)."""
    plan = make_plan(project)
    ph = inference_phases(plan)
    ps = ph.samples[min(ph.samples)][0]
    return Counter((s.comm[0], s.comm[1] / (ph.micro_batch * plan.elem_bytes)) for s in ps.segments if s.comm)


def test_each_weighted_op_reduces_its_share_along_one_axis():
    """Per decode token: QKV, FF1 and FF3 all-reduce 1/8 of their output along a column of 4 chips, WO and FF2
    1/4 of theirs along a row of 8 — and nothing else moves in the layer; after the head, the sampling tail
    gathers the vocabulary-split logits along a row (``compute.runtime_sampling``)."""
    project = galaxy(tp_axes=[4, 8])
    w = project.workload
    kv = w.kv_heads * w.hidden // w.heads
    assert decode_comms(project) == {
        (COLUMN + "all-reduce", (w.hidden + 2 * kv) / 8): w.layers,  # QKV
        (COLUMN + "all-reduce", w.ffn / 8): 2 * w.layers,  # FF1, FF3
        (ROW + "all-reduce", w.hidden / 4): 2 * w.layers,  # WO, FF2
        ("all-reduce", w.hidden): 1,  # the vocabulary-parallel embedding, over all 32 as in 1-D
        (ROW + "all-gather", w.vocab): 1,  # the logits, whole on every chip for the argmax
    }


def test_an_axis_collective_runs_every_line_of_the_axis_at_once():
    """The 8 columns (4 chips each) reduce at once on disjoint links: the time of one column, the link usage of
    all of them; the 4 rows likewise. Columns use only links inside a column, rows only links inside a row."""
    project = galaxy(tp_axes=[4, 8])
    plan = make_plan(project)
    hw, group = plan.hw, plan.stages[0].groups[0]
    coord = {d: hw.devices[d].coord for d in group}
    columns, rows = [group[j::8] for j in range(8)], [group[i * 8 : i * 8 + 8] for i in range(4)]
    for prefix, lines in ((COLUMN, columns), (ROW, rows)):
        nbytes = 256 * 1024.0
        whole = plan.tp_collective(0, 0, prefix + "all-reduce", nbytes)
        ones = [collective(hw, "all-reduce", line, nbytes) for line in lines]
        assert whole.time(hw) == pytest.approx(ones[0].time(hw), rel=1e-12)
        for i, ph in enumerate(whole.phases):
            total = Counter()
            for one in ones:
                total.update(one.phases[i].usage)
            assert ph.usage == pytest.approx(dict(total))
        axis = 1 if prefix == COLUMN else 0  # a column varies the row coordinate only
        for line in lines:
            assert len({coord[d][axis] for d in line}) == 1


def test_without_tp_axes_the_collectives_are_megatrons():
    project = galaxy(tp_axes=None)
    assert "tp_axes" not in project.mapping.model_dump(mode="json")
    w = project.workload
    assert decode_comms(project) == {("all-reduce", w.hidden): 2 * w.layers + 1,  # after WO, FF2; embedding
                                     ("all-gather", w.vocab): 1}  # the sampling tail's logits
    assert not any(n.startswith("2-D tensor parallelism") for n in make_plan(project).notes)


def test_engines_agree_and_the_notes_say_what_each_collective_spans():
    project = galaxy(tp_axes=[4, 8])
    event, analytic = (simulate(on_engine(project, e)) for e in ("event", "analytic"))
    assert analytic.tpot_s == pytest.approx(event.tpot_s, rel=1e-6)
    note = next(n for n in event.notes if n.startswith("2-D tensor parallelism 4 × 8"))
    assert "qkv, mlp_up, mlp_gate all-reduce along each of 8 columns of 4 devices, 1/8 of the output" in note
    assert "out_proj, mlp_down all-reduce along each of 4 rows of 8 devices, 1/4 of the output" in note


def test_tp_axes_must_multiply_to_tp_and_serve_inference(tmp_path, capsys):
    data = galaxy().model_dump(mode="json")
    data["mapping"]["tp_axes"] = [4, 4]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "mapping.tp_axes" in err and "Traceback" not in err
    data = galaxy(tp_axes=[4, 8]).model_dump(mode="json")
    data["run"]["mode"] = "train"
    train = Project.model_validate(data)
    assert "mapping.tp_axes" in [p.path for p in check_project(train, allow_large=True)]


def on_engine(project: Project, engine: str) -> Project:
    data = project.model_dump(mode="json")
    data["run"]["engine"] = engine
    return Project.model_validate(data)


def test_a_mapping_derived_with_another_tp_keeps_the_layout_only_while_it_fits(capsys):
    base = galaxy(tp_axes=[4, 8]).mapping
    assert Candidate(tp=32, pp=1, dp=1, micro_batch=1).mapping(1, base).tp_axes == (4, 8)
    assert Candidate(tp=16, pp=1, dp=2, micro_batch=1).mapping(2, base).tp_axes is None  # 1-D, not an error
    assert main(["run", GALAXY, "--tp", "16", "--engine", "analytic"]) == 0
    assert "2-D tensor parallelism" not in capsys.readouterr().out
