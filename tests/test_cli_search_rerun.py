"""What ``tilewright search`` ranks, ``tilewright run`` reproduces from flags alone: each re-simulated
candidate, its every mapping choice given as the run's flag (``--overlap-grad-reduce`` and ``--ep-dispatcher``
included, which the search's 'ovl-grad' and 'deepep' name and which only ``--set`` could reach before), runs to
the time the search reported for it on the same event engine."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.cli import main

JOB = ["--system", "dgx-a100", "--model", "gpt", "--layers", "2", "--hidden", "512", "--heads", "8",
       "--seq-len", "512", "--vocab", "4096", "--moe-experts", "8", "--moe-top-k", "2", "--global-batch", "16"]


def _flags(c: dict) -> list[str]:
    """The run flags of one search candidate (``result_json``'s fields)."""
    out = ["--devices", str(c["devices"])]
    for key in ("tp", "pp", "dp", "cp", "micro_batch", "interleave", "ep", "zero"):
        out += [f"--{key.replace('_', '-')}", str(c[key])]
    out += ["--recompute", c["recompute"], "--ep-dispatcher", c["ep_dispatcher"]]
    if c["expert_tp"] is not None:
        out += ["--expert-tp", str(c["expert_tp"])]
    for key in ("sequence_parallel", "fsdp", "overlap_grad_reduce", "overlap_ep_comm", "delay_wgrad_compute",
                "overlap_tp_comm"):
        if c[key]:
            out.append(f"--{key.replace('_', '-')}")
    if c["recompute_modules"]:
        out += ["--recompute-modules", ",".join(c["recompute_modules"])]
    if c["offload_optimizer"]:
        out += ["--set", f"mapping.memory_levels.optimizer={c['offload_optimizer']}"]
    return [*out, "--set", f"mapping.rank_order={c['rank_order']}", "--set", f"mapping.placement={c['placement']}"]


def test_the_searchs_best_mappings_rerun_to_the_same_time(capsys):
    assert main(["search", *JOB, "--devices", "16", "--ep", "1,8", "--zero", "0,1,3", "--top", "3",
                 "--quiet", "--json"]) == 0
    candidates = json.loads(capsys.readouterr().out)["candidates"]
    ranked = [c for c in candidates if c.get("event_iteration_time_s")]
    assert len(ranked) == 3
    for c in ranked:
        assert main(["run", *JOB, *_flags(c), "--json", "--quiet"]) == 0
        run = json.loads(capsys.readouterr().out)
        assert run["iteration_time_s"] == pytest.approx(c["event_iteration_time_s"], rel=1e-9), c
        assert run["peak_memory_bytes"] == pytest.approx(c["event_peak_memory_bytes"], rel=1e-9)
    # the two flags the run lacked: the best candidate setting one reruns (analytic) to the search's own time
    other = next(c for c in candidates if c["overlap_grad_reduce"] or c["ep_dispatcher"] != "alltoall")
    assert main(["run", *JOB, *_flags(other), "--engine", "analytic", "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["iteration_time_s"] == pytest.approx(other["iteration_time_s"],
                                                                                    rel=1e-9), other
