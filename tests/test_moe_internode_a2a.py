"""The flat expert all-to-all (Megatron-Core's all-to-all dispatcher over NCCL) across DGX-H100 nodes, against
what NCCL's inter-node all-to-all is measured to reach on ConnectX-7.

What the measurements say, for the sizes Megatron-Bridge's Qwen3-235B-A22B H100 recipe moves (ep 32 over 4
nodes, about 134 MB per rank per exchange, 4 MB per peer: the bandwidth regime):

- NCCL's all-to-all cannot aggregate several NICs: a GPU's inter-node share goes through its own rail, so the
  rate to expect is one NIC's (S. Jeaugey, NVIDIA/nccl-tests issue #267), and a CX-7 at NDR reaches up to
  48-49 GB/s (D. Addison, same issue). nccl-tests' all-to-all bus bandwidth is algbw × (n − 1)/n over every
  peer, NVLink ones included, so on N nodes it reads N/(N − 1) × the per-GPU network rate (S. Jeaugey,
  NVIDIA/nccl-tests issue #130).
- Node-deduplicated kernels on the same NIC measure 43-58 GB/s of RDMA per GPU at 16-64 ranks (DeepEP V1
  normal kernels, H800 + CX7: deepseek-ai/DeepEP docs/legacy.md) and HybridEP on H100 47-58 GB/s at 32 ranks
  (BF16 dispatch and combine, torch API and kernel only; DeepEP hybrid-ep branch, Hybrid-EP README).

So at these sizes an inter-node all-to-all on the dgx-h100 preset must not move a GPU's network share faster
than one NIC can (≤ 49 GB/s), and the NIC is what binds it (the NVLink share is 7/31 of the bytes at ~8× the
rate). Expected times are derived here from the preset's own link fields, not from the engine; the fixed part
from its NCCL protocols (``_nccl_latency``: NCCL's send/recv runs LL or Simple, the fixed cost once, one
protocol step of the network, and each round's issue at the fastest step of the fabric reaching its peer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.plan.experts import Routing, all_to_all, hierarchical_all_to_all
from tilewright.engine.plan.group_comm import ep_group_collective

PRESET = Path(__file__).parents[1] / "presets" / "systems" / "dgx-h100.json"
NIC_ACHIEVABLE = 49e9  # B/s: CX-7 at NDR, NCCL's best per NIC (NVIDIA/nccl-tests issue #267)


def _rates() -> tuple[float, float, float]:
    """(network rate per GPU per direction: bandwidth × efficiency, network link latency, NVLink rate), from
    the preset's fields."""
    d = json.loads(PRESET.read_text())
    net, nvl = d["interconnect"], d["children"][0]["interconnect"]
    return (net["link_bandwidth_bytes_per_s"] * net["efficiency"], net["link_latency_s"],
            nvl["link_bandwidth_bytes_per_s"] * nvl["efficiency"])


def _hw(devices: int):
    return elaborate(load_system("dgx-h100"), devices_needed=devices)


def _protocols(level: dict) -> dict[str, dict]:
    return {pr["name"]: pr for pr in level["collective"]["protocols"]}


def _nccl_seconds(p: int, per_node: int, wire_s: float) -> float:
    """A flat all-to-all of p GPUs, ``per_node`` per node, whose binding network share takes ``wire_s`` at
    the full payload rate: the faster of LL (payload fraction × that rate) and Simple, with the protocol's
    fixed cost, one network step, and p − per_node rounds at the network's fastest step plus per_node − 1 at
    NVLink's."""
    d = json.loads(PRESET.read_text())
    net, nvl = _protocols(d["interconnect"]), _protocols(d["children"][0]["interconnect"])
    issue = (p - per_node) * min(pr["step_s"] for pr in net.values()) + (per_node - 1) * min(
        pr["step_s"] for pr in nvl.values())
    return min(
        wire_s / net[name]["payload_fraction"] + max(net[name]["fixed_s"], nvl[name]["fixed_s"])
        + net[name]["step_s"] + issue
        for name in ("LL", "Simple")
    )


@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_an_ep_group_over_nodes_moves_its_network_share_at_one_nic(nodes):
    """ep = 8 · nodes GPUs, each sending nbytes / p to every peer: (p − 8) of the p shares leave the node
    through the GPU's own NIC, which binds; the time is that share over the NIC's rate plus NCCL's fixed
    part (``_nccl_seconds``)."""
    p = 8 * nodes
    hw = _hw(p)
    nbytes = 134.2e6  # Qwen3-235B: 2048 tokens per tensor rank × top-8 × hidden 4096 × 2 B
    coll = all_to_all(hw, list(range(p)), nbytes)
    net, _, nvl = _rates()
    remote = nbytes * (p - 8) / p
    assert coll.time(hw) == pytest.approx(_nccl_seconds(p, 8, remote / net), rel=1e-6)
    # the NVLink share is not what binds
    assert nbytes * 7 / p / nvl < remote / net


@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_the_network_share_is_never_faster_than_a_nic_achieves(nodes):
    """The rate the model gives a GPU's inter-node bytes is at most what NCCL reaches per CX-7 (48-49 GB/s),
    and nccl-tests' bus bandwidth it implies is at most N/(N − 1) × that (nccl-tests issue #130)."""
    p = 8 * nodes
    hw = _hw(p)
    nbytes = 134.2e6
    t = all_to_all(hw, list(range(p)), nbytes).time(hw)
    network_rate = nbytes * (p - 8) / p / t
    assert network_rate <= NIC_ACHIEVABLE
    busbw = nbytes / t * (p - 1) / p
    assert busbw <= nodes / (nodes - 1) * NIC_ACHIEVABLE


def test_the_folded_ep32_group_of_the_qwen3_235b_layout_spans_four_nodes():
    """tp 2, etp 1, ep 32 on a 32-GPU stage (Megatron-Core's expert rank generator, ``folded_groups``): one ep
    group of every GPU of the stage, so 24 of each GPU's 31 peers are across the network and the exchange
    takes the flat all-to-all's time over the 32 GPUs."""
    hw = _hw(32)
    groups = [[2 * d, 2 * d + 1] for d in range(16)]  # 16 replicas of tp 2
    nbytes = 134.2e6
    coll = ep_group_collective(hw, groups, 32, nbytes, etp=1)
    net, _, _ = _rates()
    assert coll.time(hw) == pytest.approx(_nccl_seconds(32, 8, nbytes * 24 / 32 / net), rel=1e-6)


def test_the_node_deduplicated_dispatcher_keeps_its_own_exchange():
    """DeepSeek-V3's recipe (HybridEP, ``ep_dispatcher`` 'deepep') sends a token once per destination node: its
    network phase carries less than the flat all-to-all's network share, and it stays a two-phase exchange."""
    hw = _hw(64)
    nbytes = 8 * 7168 * 4096 * 2.0
    flat = all_to_all(hw, list(range(64)), nbytes)
    hier = hierarchical_all_to_all(hw, list(range(64)), nbytes, Routing(256, 8, 4))
    assert len(hier.phases) == 2
    net, _, _ = _rates()
    assert hier.phases[0].time(hw) < flat.time(hw)
    # at most four nodes per token (node-limited routing): 4 of the 8 top-8 copies, 7/8 of them to other nodes
    network = hier.phases[0]
    assert network.bytes_per_member == pytest.approx(nbytes / 8 * 4 * 7 / 8, rel=1e-12)
    # every byte of that phase leaves through the member's own NIC
    assert network.time(hw) >= network.bytes_per_member / net
