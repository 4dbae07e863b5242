"""The parallelism search's hot paths against plain, layer-by-layer sums: the walk's fast ``Candidate`` maker, and
the stage sums (``stage_sums.Chunks``) whose per-split index arrays and per-table gathers are kept between calls."""

from __future__ import annotations

import dataclasses
from itertools import pairwise

import pytest
from tilewright.engine.hardware import elaborate
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.search.parallel.candidate import Candidate, dense
from tilewright.engine.search.parallel.estimate import Estimator
from tilewright.engine.workloads import build_workload

from tests.factories import cluster

GPT = GPTSpec(name="gpt-test", layers=12, hidden=512, heads=8, seq_len=256, vocab=4096)


def _estimator(offload_layers: int | None = None) -> Estimator:
    p = Project(name="t", hardware=cluster(nodes=2), workload=GPT, mapping=Mapping(offload_layers=offload_layers),
                run=RunSettings(dtype="bf16"))
    return Estimator(p, elaborate(p.hardware, devices_needed=16), build_workload(p.workload))


def _virtual_stages(est: Estimator, pp: int, v: int) -> list[list[int]]:
    """Layer indices of each virtual stage in plan order, split as the plan does: the earlier stages one block
    larger, the layers before the blocks on the first, those after them on the last."""
    blocks = [int(b) for b in est.blocks]
    base, extra = divmod(len(blocks), pp * v)
    out, at = [], 0
    for vs in range(pp * v):
        n = base + (vs < extra)
        out.append(blocks[at:at + n])
        at += n
    out[0] = [int(i) for i in est.first_extra] + out[0]
    out[-1] = out[-1] + [int(i) for i in est.last_extra]
    return out


@pytest.mark.parametrize("args", [(8, 4, 16, 1, 2, Recompute.full, True, 0), (1, 1, 1, 3, 1, Recompute.none, False, 1)])
def test_dense_makes_the_candidate_the_constructor_makes(args):
    fast, slow = dense(*args), Candidate(*args)
    assert fast == slow and hash(fast) == hash(slow)
    assert dataclasses.astuple(fast) == dataclasses.astuple(slow)
    assert dataclasses.replace(fast, zero=3).zero == 3 and fast.zero == args[-1]  # still frozen, still a dataclass
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.tp = 2  # type: ignore[misc]


@pytest.mark.parametrize("asked", [None, 1])
@pytest.mark.parametrize("pp, v", [(1, 1), (2, 1), (2, 3), (4, 3), (3, 2), (12, 1)])
def test_stage_sums_match_layer_by_layer_sums(asked, pp, v):
    est = _estimator(asked)
    for rc in (Recompute.none, Recompute.full):
        c = Candidate(2, pp, 1, 1, v, rc)
        table, key = est.layer_table(c)
        ch = est.chunks(table, key, pp, v)
        stages = _virtual_stages(est, pp, v)
        for vs, layers in enumerate(stages):
            chunk, r = divmod(vs, pp)
            assert ch.act[chunk, r] == pytest.approx(sum(table.act[i] for i in layers))
        for r in range(pp):
            mine = [stages[chunk * pp + r] for chunk in range(v)]
            assert ch.transient[r] == max(table.transient[i] for layers in mine for i in layers)
            assert ch.workspace[r] == max(table.workspace[i] for layers in mine for i in layers)
            offloaded = 0.0
            for layers in mine:  # the first k transformer layers of each chunk, never its last
                blocks = [i for i in layers if i in set(est.blocks.tolist())]
                k = len(blocks) - 1 if asked is None else min(asked, len(blocks) - 1)
                offloaded += sum(table.act[i] for i in blocks[:max(k, 0)])
            assert ch.offloaded[r] == pytest.approx(offloaded, abs=1e-9)


@pytest.mark.parametrize("pp, v", [(1, 1), (2, 3), (4, 3), (12, 1)])
def test_passes_add_the_joins_of_consecutive_layers(pp, v):
    """Each virtual stage's forward: its layers' forwards, every consecutive pair's join and the last pair's end;
    its backward: the backwards, the joins, the first pair's end (backward runs it last) and the last pair's
    recompute end (``LayerTable.joins`` / ``ends``)."""
    est = _estimator()
    klass = est.costs.klass
    for rc in (Recompute.none, Recompute.selective, Recompute.full):
        c = Candidate(2, pp, 1, 1, v, rc, True)
        table, key = est.layer_table(c)
        ch = est.chunks(table, key, pp, v)
        for vs, layers in enumerate(_virtual_stages(est, pp, v)):
            chunk, r = divmod(vs, pp)
            pairs = [(int(klass[a]), int(klass[b])) for a, b in pairwise(layers)]
            fwd = sum(table.fwd[i] for i in layers) + sum(table.joins[p][0] for p in pairs)
            bwd = sum(table.bwd[i] for i in layers) + sum(table.joins[p][1] for p in pairs)
            if pairs:
                fwd += table.ends.get(pairs[-1], (0.0, 0.0, 0.0))[0]
                bwd += table.ends.get(pairs[0], (0.0, 0.0, 0.0))[1] + table.ends.get(pairs[-1], (0.0, 0.0, 0.0))[2]
            assert ch.fwd[chunk, r] == pytest.approx(fwd, rel=1e-12)
            assert ch.bwd[chunk, r] == pytest.approx(bwd, rel=1e-12)
