"""The expert all-to-all's per-call cost: NCCL's grouped send/recv timed by the fabric's protocols
(``plan.experts.exchange_latency``), against published nccl-tests ``alltoall_perf`` rows
(benchmarks/calibrate_nccl_alltoall.py keeps the rows and their sources).

Expected times are derived here from the preset file's own fields (link bandwidth × efficiency, the NCCL
protocols' fixed cost, step latency and payload fraction), not from the engine's functions."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.workload import MoESpec
from tilewright.engine.perf.collective_phase import route_latency
from tilewright.engine.plan.experts import all_to_all
from tilewright.engine.simulate import make_plan, simulate

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
from calibrate_nccl_alltoall import ROWS, TARGET_MEAN_ERROR, TARGET_ROW_ERROR, bus_factor, evaluate  # noqa: E402

PRESET = Path(__file__).parents[1] / "presets" / "systems" / "dgx-h100.json"
SIZES = [128, 4096, 65536, 1 << 20, 8 << 20, 64 << 20, 1 << 30]  # 128 B - 1 GiB


def _levels() -> tuple[dict, dict]:
    d = json.loads(PRESET.read_text())
    return d["children"][0]["interconnect"], d["interconnect"]  # NVSwitch, InfiniBand


def _protocols(level: dict) -> dict[str, dict]:
    return {pr["name"]: pr for pr in level["collective"]["protocols"]}


def _expected_one_node(p: int, nbytes: float) -> float:
    """p GPUs of one node: each GPU's NVSwitch uplink carries its (p − 1)/p share at bandwidth × efficiency;
    NCCL's send/recv runs LL or Simple (never LL128), whichever is faster: the share at the protocol's payload
    fraction, its fixed cost, one of its steps, and p − 1 rounds issued at the fabric's fastest step."""
    nvl, _ = _levels()
    rate = nvl["link_bandwidth_bytes_per_s"] * nvl["efficiency"]
    protos = _protocols(nvl)
    issue = (p - 1) * min(pr["step_s"] for pr in protos.values())
    return min(
        (p - 1) / p * nbytes / rate / protos[n]["payload_fraction"] + protos[n]["fixed_s"] + protos[n]["step_s"] + issue
        for n in ("LL", "Simple")
    )


@pytest.mark.parametrize("nbytes", SIZES)
@pytest.mark.parametrize("p", [2, 4, 8])
def test_one_node_all_to_all_is_nccl_protocols_over_the_uplink(p, nbytes):
    hw = elaborate(load_system("dgx-h100"), 8)
    assert all_to_all(hw, list(range(p)), nbytes).time(hw) == pytest.approx(_expected_one_node(p, nbytes), rel=1e-9)


def test_ll128_is_never_picked_for_the_exchange():
    """16 GPUs over two nodes at 1 MiB: the network share (8/16 of the buffer through the GPU's NIC) is where
    LL128 (0.92 of the rate, 14 + 4 µs) would beat LL (half the rate) and Simple (8.4 + 14 µs). NCCL's
    send/recv does not have LL128 (only LL below nChannels × 16 KiB a peer, else Simple): the exchange costs
    the faster of LL and Simple, more than LL128 would."""
    nvl, net = _levels()
    protos, inner = _protocols(net), _protocols(nvl)
    hw = elaborate(load_system("dgx-h100"), 16)
    nbytes = 1 << 20
    wire = nbytes * 8 / 16 / (net["link_bandwidth_bytes_per_s"] * net["efficiency"])
    issue = 8 * protos["LL"]["step_s"] + 7 * inner["LL"]["step_s"]

    def seconds(name: str) -> float:
        return wire / protos[name]["payload_fraction"] + protos[name]["fixed_s"] + protos[name]["step_s"] + issue

    assert seconds("LL128") < min(seconds("LL"), seconds("Simple"))  # the window exists
    t = all_to_all(hw, list(range(16)), nbytes).time(hw)
    assert t == pytest.approx(min(seconds("LL"), seconds("Simple")), rel=1e-9)


def test_two_nodes_pay_each_network_round_at_the_network_step():
    """16 GPUs on two nodes at 128 B (LL): fixed cost, one network step, 8 network rounds, 7 NVLink rounds."""
    nvl, net = _levels()
    ll_nvl, ll_net = _protocols(nvl)["LL"], _protocols(net)["LL"]
    hw = elaborate(load_system("dgx-h100"), 16)
    t = all_to_all(hw, list(range(16)), 128.0).time(hw)
    floor = max(ll_nvl["fixed_s"], ll_net["fixed_s"]) + ll_net["step_s"] + 8 * ll_net["step_s"] + 7 * ll_nvl["step_s"]
    assert t == pytest.approx(floor, rel=1e-3)  # + 128 B at LL's rate: well under 0.1 %


def test_the_tiny_all_to_all_is_not_the_route_latency_any_more():
    """What the engine charged before: the slowest route's link latencies (1.5 µs on one node), about 7× less
    than every measured 8-GPU NVSwitch all-to-all at 128 B-4 KiB (10.5-11.1 µs)."""
    hw = elaborate(load_system("dgx-h100"), 8)
    group = list(range(8))
    route = max(route_latency(hw, hw.device_route(a, b)) for a in group for b in group if a != b)
    measured = [r.time_us * 1e-6 for r in ROWS if r.gpus == 8 and r.size_bytes <= 4096]
    assert route < 0.2 * min(measured)
    assert all_to_all(hw, group, 128.0).time(hw) > 0.8 * max(measured)


def test_a_fabric_without_protocols_keeps_the_route_latency():
    """A fabric that names no collective library's protocols (Tenstorrent's Ethernet mesh) is timed as
    before: one phase whose latency is its slowest route's."""
    hw = elaborate(load_system("wormhole-t3000"), 4)
    group = [d.index for d in hw.devices][:4]
    coll = all_to_all(hw, group, 1 << 20)
    route = max(route_latency(hw, hw.device_route(a, b)) for a in group for b in group if a != b)
    assert len(coll.phases) == 1 and coll.phases[0].latency_s == pytest.approx(route, rel=1e-12)
    assert coll.payload_fraction == 1.0


def test_rows_agree_with_their_printed_bus_bandwidth():
    """nccl-tests prints busbw = size / time × (n − 1)/n (issue #130): a transcription error in size or time
    shows (printed to 0.01 GB/s from a time of 4 significant digits)."""
    for r in ROWS:
        busbw = r.size_bytes / (r.time_us * 1e-6) * bus_factor(r.gpus) / 1e9
        assert busbw == pytest.approx(r.busbw_gbs, rel=3e-3, abs=0.006), r


def test_the_preset_meets_the_measured_rows():
    """Target rows: 8-GPU NVSwitch latency (H20), two-node latency over CX-7 (B200 nodes), 4- and 8-GPU
    bandwidth at 256 MiB-1 GiB (H100), each within the measurements' own scatter."""
    results = [x for x in evaluate() if x["row"].target]
    assert {x["row"].gpus for x in results} == {4, 8, 16}
    assert min(x["row"].size_bytes for x in results) == 128 and max(x["row"].size_bytes for x in results) == 1 << 30
    for x in results:
        assert x["err"] <= TARGET_ROW_ERROR, x
    assert statistics.fmean(x["err"] for x in results) <= TARGET_MEAN_ERROR


MOE = GPTSpec(name="moe", layers=2, hidden=1024, heads=8, seq_len=512, vocab=32000,
              moe=MoESpec(experts=8, top_k=2, expert_ffn=512))


def _project(engine: str) -> Project:
    return Project(name="moe", hardware=load_system("dgx-h100"), workload=MOE,
                   mapping=Mapping(tp=1, dp=8, ep=8, micro_batch=1, global_batch=16),
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def test_the_plan_charges_every_exchange_its_floor_and_both_engines_agree():
    """A small MoE model, ep 8 on one node: every expert all-to-all segment of the plan costs at least NCCL's
    one-node floor (LL at 0 bytes), and the analytic and event engines time the plan alike."""
    plan = make_plan(_project("analytic"))
    nvl, _ = _levels()
    ll = _protocols(nvl)["LL"]
    floor = ll["fixed_s"] + ll["step_s"] + 7 * min(pr["step_s"] for pr in _protocols(nvl).values())
    seconds = [plan.tp_time(0, 0, s.comm[0], s.comm[1]) for ps in plan.stages[0].passes.values()
               for s in ps.segments if s.comm and s.comm[0].startswith("ep:")]
    assert seconds and min(seconds) >= floor
    analytic = simulate(_project("analytic"))
    event = simulate(_project("event"))
    assert analytic.time_breakdown_s["ep_comm"] >= len(seconds) * floor * 0.99
    assert event.iteration_time_s == pytest.approx(analytic.iteration_time_s, rel=0.05)
