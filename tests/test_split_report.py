"""The splits a run reports carry their NoC and DRAM traffic (engine.results.split_traffic): ``--json`` per split
row, the CLI's split lines with units, read back from the split's own description."""

from __future__ import annotations

import json
import math

import pytest
from tilewright.engine.cli.dispatch import main
from tilewright.engine.io.presets import load_project_preset, load_system
from tilewright.engine.perf.spatial_chip import grid_chip
from tilewright.engine.perf.spatial_choice import full_grid_2d, one_d, runtime_default, two_d
from tilewright.engine.perf.spatial_cost import GemmProblem
from tilewright.engine.perf.spatial_traffic import gemm_traffic
from tilewright.engine.results.split_traffic import SplitReader, parse_split
from tilewright.engine.simulate import simulate

PROJECT = "wormhole-n150-llama2-7b-inference"


@pytest.fixture(scope="module")
def n150():
    project = load_project_preset(PROJECT)
    return project, simulate(project)


@pytest.mark.parametrize("system", ["wormhole-n150", "blackhole-p150"])
def test_parse_split_inverts_describe_for_every_split_the_model_makes(system):
    c = load_system(system).children[0]
    chip = grid_chip(c.compute, c.memories[0])
    for m, k, n in [(4096, 4096, 4096), (32, 8192, 8192), (8192, 1024, 256), (96, 4096, 11008)]:
        p = GemmProblem(m, k, n, "bf16", "bfp8", "bf16", "LoFi")
        splits = [*two_d(chip, p), *one_d(chip, p, skinny_only=False), *full_grid_2d(chip, p)]
        for s in [*splits, runtime_default(chip, p)]:
            back, sharded = parse_split(s.describe())
            assert not sharded and back.describe() == s.describe()
            fields = ("kind", "rows", "cols", "per_m", "per_n", "block_k", "out_h", "out_w", "k_split")
            assert all(getattr(back, f) == getattr(s, f) for f in fields), s
            # the traffic does not depend on the destination sub-block the text leaves out
            assert gemm_traffic(chip, p, back) == gemm_traffic(chip, p, s)


def test_every_gemm_row_carries_its_traffic(n150):
    project, result = n150
    reader = SplitReader(project)
    rows = [r for r in result.spatial_splits if parse_split(str(r["split"])) is not None]
    assert len(rows) >= 10
    for row in rows:
        t = row["traffic"]
        rec = reader.record(str(row["op"]), str(row["split"]))
        loads = rec.traffic.link_loads()
        assert t["busiest_link_bytes"] == max(loads.values()) > 0
        assert t["multicast_link_bytes"] == pytest.approx(sum(loads.values()))
        assert t["multicast_links"] == len(loads)
        mt, kt, nt = rec.problem.tiles(rec.chip.tile)
        # DRAM: never less than the operands read once and the output written once (in their formats)
        assert t["dram_read_bytes"]["A"] >= mt * kt * rec.chip.tile_bytes(rec.problem.fmt_a)
        assert t["dram_read_bytes"]["B"] >= kt * nt * rec.chip.tile_bytes(rec.problem.fmt_b)
        assert t["dram_write_bytes"] == mt * nt * rec.chip.tile_bytes(rec.problem.fmt_out)
        assert t["dram_bytes"] == pytest.approx(sum(t["dram_read_bytes"].values()) + t["dram_write_bytes"])
        assert 0 < t["busiest_port_share"] <= 1
        # K and N are the workload's (llama2-7b, tp 1): qkv's N is 3 × 4096, mlp_up's K 4096
        if row["op"] == "qkv":
            assert nt == math.ceil(3 * 4096 / rec.chip.tile) and kt == 4096 // rec.chip.tile
        s = rec.split
        if s.kind == "1d_in0":  # a 1-D split of A holds all of M per core: the token count is exact
            assert mt == s.per_m


def test_cli_json_and_notes_carry_the_traffic(n150, capsys):
    project, result = n150
    assert main(["run", PROJECT, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["spatial_splits"] == json.loads(json.dumps(result.spatial_splits))
    assert main(["run", PROJECT]) == 0
    text = capsys.readouterr().out
    lines = [ln for ln in text.splitlines() if ln.strip().startswith("split") and "mcast" in ln]
    assert lines and all("busiest NoC link " in ln for ln in lines)
    row = next(r for r in result.spatial_splits if r["op"] == "mlp_up" and "prefill" in str(r["where"]))
    mb = row["traffic"]["busiest_link_bytes"] / 1e6
    line = next(ln for ln in lines if "prefill: 32 × mlp_up" in ln)
    assert f"busiest NoC link {mb:.3g} MB" in line and "DRAM " in line and "B per op" in line
