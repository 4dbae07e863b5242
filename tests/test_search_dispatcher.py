"""The search's MoE dispatcher dimension (``mapping.ep_dispatcher``): the node-by-node exchange (DeepEP) is
tried beside the flat all-to-all for expert-parallel variants whose group spans nodes, and the CLI can
narrow it."""

from __future__ import annotations

import json

from tilewright.engine.cli.dispatch import main
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Project, RunSettings
from tilewright.engine.ir.workload import MoESpec
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.search.parallel.extended import Extensions, default_extensions, node_devices, variants
from tilewright.engine.simulate import simulate

SPEC = GPTSpec(name="moe-small", layers=4, hidden=2048, heads=16, seq_len=1024, vocab=32000,
               moe=MoESpec(experts=16, top_k=4, expert_ffn=1024))
DENSE = SPEC.model_copy(update={"moe": None})


def _ext(**kw) -> Extensions:
    base = dict(eps=[1, 2, 4, 8, 16], cps=[1], zeros=[0, 1], fsdp=False, offload=None, overlap=False,
                dispatchers=["alltoall", "deepep"], node_devices=8)
    return Extensions(**(base | kw))


def test_dgx_nodes_hold_eight_gpus():
    hw = elaborate(load_system("dgx-h100"), devices_needed=32)
    assert node_devices(hw) == 8


def test_deepep_variants_only_where_an_ep_group_spans_nodes():
    """With tp 2, ep 4 is 8 consecutive ranks (one node): no variant; ep 8 and 16 span 2 and 4 nodes."""
    seed = Candidate(tp=2, pp=1, dp=16, micro_batch=1)
    out = variants(seed, _ext(), SPEC, fits=True)
    deep = sorted(c.ep for c in out if c.dispatcher == "deepep")
    assert deep == [8, 16]
    assert all(c.tp * c.ep > 8 for c in out if c.dispatcher == "deepep")
    for ext, spec in ((_ext(dispatchers=["alltoall"]), SPEC), (_ext(node_devices=0), SPEC), (_ext(), DENSE)):
        assert not [c for c in variants(seed, ext, spec, fits=True) if c.dispatcher != "alltoall"]


def test_deepep_candidate_maps_to_the_mapping_and_is_allowed_only_when_chosen():
    c = Candidate(tp=2, pp=1, dp=16, micro_batch=1, ep=8, dispatcher="deepep")
    assert c.extended and "deepep" in c.label() and c.as_json()["ep_dispatcher"] == "deepep"
    assert c.mapping(64).ep_dispatcher == "deepep"
    assert _ext().allows(c) and not _ext(dispatchers=["alltoall"]).allows(c)


def test_default_space_tries_both_dispatchers_for_moe_only():
    system = load_system("dgx-h100")
    hw = elaborate(system, devices_needed=32)
    moe = Project(name="m", hardware=system, workload=SPEC, run=RunSettings(dtype="bf16"))
    from tilewright.engine.perf.device import device_model
    gpu = system.children[0].children[0]
    dev = device_model(gpu.compute, gpu.memories, None, "bf16")
    assert default_extensions(moe, hw, dev).dispatchers == ["alltoall", "deepep"]
    dense = moe.model_copy(update={"workload": DENSE})
    assert default_extensions(dense, hw, dev).dispatchers == ["alltoall"]


def test_deepep_changes_the_time_of_a_cross_node_exchange():
    """The variant is worth timing: the node-by-node exchange of a group over 2 nodes takes a different time
    from the flat one (here fewer bytes cross the network: top-4 of 16 experts on 2 nodes)."""
    from tilewright.engine.ir import Mapping

    m = Mapping(tp=2, pp=1, dp=16, ep=8, micro_batch=1, global_batch=32)
    base = Project(name="m", hardware=load_system("dgx-h100"), workload=SPEC, mapping=m,
                   run=RunSettings(dtype="bf16", engine="analytic", contention=False))
    flat = simulate(base)
    deep = simulate(base.model_copy(update={"mapping": m.model_copy(update={"ep_dispatcher": "deepep"})}))
    assert deep.time_breakdown_s["ep_comm"] < flat.time_breakdown_s["ep_comm"]


def test_cli_narrows_and_refuses_the_dispatcher(capsys):
    args = ["search", "--system", "dgx-h100", "--model", "gpt", "--layers", "2", "--hidden", "1024",
            "--heads", "8", "--seq-len", "512", "--vocab", "8000", "--devices", "16", "--global-batch", "16",
            "--moe-experts", "8", "--moe-top-k", "2", "--no-simulate", "--quiet", "--json",
            "--ep-dispatcher", "deepep,alltoall", "--ep", "8", "--zero", "0,1", "--no-overlap", "--list", "50"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["candidates"] if "candidates" in out else out["ranked"]
    assert any(r["ep_dispatcher"] == "deepep" for r in rows)
    assert main(args[:-9] + ["--ep-dispatcher", "nccl"]) == 2
    assert "--ep-dispatcher" in capsys.readouterr().err
