"""The node-deduplicated expert exchange (DeepEP, ``Mapping.ep_dispatcher`` 'deepep'): each token crosses the
network once per destination node, then is forwarded over the node's NVLink to the GPUs of its experts;
DeepSeek-V3's node-limited routing caps the nodes a token reaches (``MoESpec.max_nodes_per_token``).

Expected values: the nodes a token reaches are counted by enumerating every top-k choice of experts (not the
closed form the engine uses); bytes per phase follow from those counts and the group's node layout."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.workload import MoESpec
from tilewright.engine.plan.experts import Routing, all_to_all, distinct_nodes, hierarchical_all_to_all
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import import_hf_config

HF = Path(__file__).parent / "data" / "hf"


def _enumerated_nodes(experts: int, top_k: int, nodes: int, limit: int | None = None) -> float:
    """Mean distinct nodes over every top-k set of experts (experts dealt to nodes in equal consecutive blocks);
    with a node limit, the sets that span more nodes count as the limit (the router keeps them within it)."""
    per = experts // nodes
    counts = [len({e // per for e in chosen}) for chosen in itertools.combinations(range(experts), top_k)]
    if limit is not None:
        counts = [min(c, limit) for c in counts]
    return sum(counts) / len(counts)


@pytest.mark.parametrize(("experts", "top_k", "nodes"), [(16, 4, 2), (16, 4, 4), (24, 3, 8), (12, 6, 3)])
def test_expected_nodes_per_token_match_the_enumeration(experts, top_k, nodes):
    assert distinct_nodes(Routing(experts, top_k), nodes) == pytest.approx(
        _enumerated_nodes(experts, top_k, nodes), rel=1e-12
    )


def test_the_node_limit_caps_the_nodes_a_token_reaches():
    """DeepSeek-V3's shape: 256 experts over 8 nodes, top-8: ~5.3 nodes at random, at most 4 when limited."""
    free = distinct_nodes(Routing(256, 8), 8)
    assert 5 < free < 6
    assert distinct_nodes(Routing(256, 8, 4), 8) == 4.0
    assert distinct_nodes(Routing(256, 8, 4), 1) == 1.0


def _hw(devices: int):
    return elaborate(load_system("dgx-h100"), devices_needed=devices)


def _node(hw, d: int) -> str:
    return hw.devices[d].node.rsplit("/", 1)[0]


def test_a_group_within_one_node_exchanges_as_the_flat_all_to_all():
    hw = _hw(8)
    group = list(range(8))
    flat, hier = all_to_all(hw, group, 1e6), hierarchical_all_to_all(hw, group, 1e6, Routing(16, 4))
    assert hier.phases == flat.phases


def test_two_nodes_send_each_token_once_per_other_node_then_forward_it_inside():
    """16 GPUs on 2 DGX nodes, 16 experts top-4: the network phase carries each token to the other node once
    when any of its experts is there (the share of top-4 sets that reach it), the same local index on both sides;
    the NVLink phase forwards every copy to the node's other 7 GPUs' share (7/8)."""
    hw = _hw(16)
    group = list(range(16))
    nbytes = 8e6  # a member's top_k copies
    r = Routing(16, 4)
    coll = hierarchical_all_to_all(hw, group, nbytes, r)
    assert len(coll.phases) == 2
    network, local = coll.phases
    # a token of node 0 reaches node 1 when any of its 4 experts is among experts 8..15
    sets = list(itertools.combinations(range(16), 4))
    other_node_visits = sum(any(e >= 8 for e in chosen) for chosen in sets) / len(sets)
    assert network.bytes_per_member == pytest.approx(nbytes / 4 * other_node_visits, rel=1e-12)
    assert local.bytes_per_member == pytest.approx(7 / 8 * nbytes, rel=1e-12)
    # network phase: only pairs of the same local index, across the nodes; forwarding: within each node only
    assert all(hw.links[lk].level != "dgx-h100" for lk in local.usage)  # never the network
    flat = all_to_all(hw, group, nbytes).phases[0]
    network_links = {lk for lk in network.usage if hw.links[lk].level == "dgx-h100"}
    assert network_links  # it does cross the network
    # the busiest network link carries fewer bytes than under the flat exchange (8 of a member's 15 routes
    # cross the network there, each with a top_k copy)
    assert network.bytes_per_member * max(network.usage[lk] for lk in network_links) < (
        15 / 16 * nbytes * max(flat.usage[lk] for lk in network_links)
    )


MOE = GPTSpec(name="moe", layers=2, hidden=2048, heads=16, seq_len=1024, vocab=32000,
              moe=MoESpec(experts=32, top_k=8, expert_ffn=1024, max_nodes_per_token=2))


def _project(dispatcher: str, engine: str) -> Project:
    return Project(name="moe", hardware=load_system("dgx-h100"), workload=MOE,
                   mapping=Mapping(tp=1, dp=32, ep=32, micro_batch=1, global_batch=64, ep_dispatcher=dispatcher),
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def _ep_seconds(plan) -> float:
    return sum(plan.tp_time(0, 0, s.comm[0], s.comm[1]) for (_c, _k), ps in plan.stages[0].passes.items()
               for s in ps.segments if s.comm and s.comm[0].startswith("ep:"))


def test_deepep_moves_less_over_the_network_and_both_engines_agree():
    """ep 32 over 4 nodes, top-8 of 32 experts limited to 2 nodes: the deduplicated exchange takes less time
    than the flat one, and the analytic and event engines time the same plan alike."""
    flat, deep = make_plan(_project("alltoall", "analytic")), make_plan(_project("deepep", "analytic"))
    assert _ep_seconds(deep) < _ep_seconds(flat)
    analytic = simulate(_project("deepep", "analytic")).iteration_time_s
    event = simulate(_project("deepep", "event")).iteration_time_s
    assert event == pytest.approx(analytic, rel=0.05)


def test_new_fields_stay_out_of_saved_files_at_their_default():
    assert "ep_dispatcher" not in Mapping().model_dump(mode="json")
    assert "max_nodes_per_token" not in MoESpec(experts=8, top_k=2, expert_ffn=64).model_dump(mode="json")
    assert Mapping(ep_dispatcher="deepep").model_dump(mode="json")["ep_dispatcher"] == "deepep"


def test_deepseek_v3_imports_its_node_limit():
    config = json.loads((HF / "deepseek-v3" / "config.json").read_text())
    spec = import_hf_config(HF / "deepseek-v3")
    assert spec.moe.max_nodes_per_token == config["topk_group"] == 4
    assert config["n_group"] == 8
