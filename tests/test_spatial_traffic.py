"""The per-op traffic of a GEMM split (perf.spatial_traffic): multicast trees on the core grid and DRAM bytes,
on Wormhole n150 (8 × 8) and Blackhole p150, for the splits the cost model can choose.

Expected numbers are derived here from the split's fields (blocks, K-blocks, L1 blocks) and the operand
sizes, not read back from the module: what ``gemm_cost`` charges a sender per K-block, the operands' bytes,
the geometry of a row, a column or a line of cores.
"""

from __future__ import annotations

import math

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir.common import dtype_bytes
from tilewright.engine.perf.spatial import gemm_on_grid
from tilewright.engine.perf.spatial_chip import GridChip, grid_chip
from tilewright.engine.perf.spatial_choice import full_grid_2d, one_d, runtime_default, two_d
from tilewright.engine.perf.spatial_cost import GemmProblem, Split, gemm_cost
from tilewright.engine.perf.spatial_traffic import gemm_traffic

SHAPES = [(512, 512, 512), (4096, 4096, 4096), (32, 8192, 8192), (8192, 1024, 256), (96, 4096, 11008),
          (4096, 4096, 32), (1, 4096, 4096)]
FORMATS = [("bf16", "HiFi2"), ("bfp8", "LoFi")]


def _chip(name: str) -> GridChip:
    c = load_system(name).children[0]
    return grid_chip(c.compute, c.memories[0])


CHIPS = {name: _chip(name) for name in ("wormhole-n150", "blackhole-p150")}


def _splits(ch: GridChip, p: GemmProblem):
    yield from two_d(ch, p)
    yield from one_d(ch, p, skinny_only=False)
    yield from full_grid_2d(ch, p)
    yield runtime_default(ch, p)


def _problems():
    for m, k, n in SHAPES:
        for fmt, fid in FORMATS:
            yield GemmProblem(m, k, n, "bf16", fmt, "bf16", fid)


def _charged_per_sender(ch: GridChip, p: GemmProblem, s: Split) -> tuple[float, float]:
    """Bytes ``gemm_cost`` charges one A sender and one B sender over the op: a block of A (``out_h`` ×
    K-block tiles) and of B per K-block, K-blocks per sweep, sweeps over the L1 blocks."""
    kt = math.ceil(p.k / ch.tile)
    kt_local = math.ceil(kt / s.k_split)
    bk = min(s.block_k, kt_local)
    oh, ow = min(s.out_h, s.per_m), min(s.out_w, s.per_n)
    per_sweep = math.ceil(kt_local / bk)
    sweeps = math.ceil(s.per_m / oh) * math.ceil(s.per_n / ow)
    a = oh * bk * ch.tile_bytes(p.fmt_a) * per_sweep * sweeps
    b = bk * ow * ch.tile_bytes(p.fmt_b) * per_sweep * sweeps
    return a, b


@pytest.mark.parametrize("name", sorted(CHIPS))
def test_multicast_link_bytes_match_what_the_cost_model_charges(name):
    """Summed over the links, a split's multicast bytes are what ``gemm_cost`` charges its senders times
    the links each tree crosses — exactly when blocks and K-blocks tile the operands, never more else."""
    ch = CHIPS[name]
    exact = 0
    for p in _problems():
        mt, kt, nt = p.tiles(ch.tile)
        for s in _splits(ch, p):
            t = gemm_traffic(ch, p, s)
            a, b = _charged_per_sender(ch, p, s)
            charged = sum((a if tr.operand == "A" else b) * len(tr.edges) for tr in t.trees)
            whole = (
                mt % s.per_m == 0 and nt % s.per_n == 0 and kt % s.k_split == 0
                and (kt // s.k_split) % min(s.block_k, kt // s.k_split) == 0
            )
            if whole and s.kind == "2d" and mt == s.rows * s.per_m and nt == s.cols * s.per_n:
                assert t.multicast_link_bytes() == pytest.approx(charged), s
                exact += 1
            assert t.multicast_link_bytes() <= charged * (1 + 1e-12), s
    assert exact >= 10  # the equality was checked on many splits, not vacuously


@pytest.mark.parametrize("name", sorted(CHIPS))
def test_each_tree_carries_its_operand_once_per_link(name):
    ch = CHIPS[name]
    for p in _problems():
        for s in _splits(ch, p):
            t = gemm_traffic(ch, p, s)
            for tr in t.trees:
                assert len(set(tr.edges)) == len(tr.edges), s  # no link twice in one tree
                for (r0, c0), (r1, c1) in tr.edges:  # neighbours on the grid
                    assert abs(r0 - r1) + abs(c0 - c1) == 1 and 0 <= min(r0, r1, c0, c1)
                    assert max(r0, r1) < ch.rows and max(c0, c1) < ch.cols
            if s.kind == "2d" and not t.overlapping:
                a = [tr for tr in t.trees if tr.operand == "A"]
                b = [tr for tr in t.trees if tr.operand == "B"]
                assert all(len(tr.edges) == tr.depth == s.cols - 1 for tr in a), s  # along a row
                assert all(len(tr.edges) == tr.depth == s.rows - 1 for tr in b), s  # down a column
                assert all(len({r for e in tr.edges for r, _ in e}) == 1 for tr in a)
                assert all(len({c for e in tr.edges for _, c in e}) == 1 for tr in b)
                # trees of one operand never share a link: every link's load is one tree's bytes
                for op in ("A", "B"):
                    assert sorted(t.link_loads(op).values()) == pytest.approx(
                        sorted(tr.nbytes for tr in t.trees if tr.operand == op for _ in tr.edges))
            elif s.kind != "2d":
                (tree,) = t.trees or (None,)
                used = s.rows * s.cols
                if used > 1:  # one tree spanning the line of cores: a link per core it reaches
                    assert len(tree.edges) == used - 1 and tree.operand == ("A" if s.kind == "1d_in0" else "B")
                    assert tree.depth <= ch.rows + ch.cols


@pytest.mark.parametrize("name", sorted(CHIPS))
def test_dram_bytes_never_below_operands_read_once_and_output_written_once(name):
    ch = CHIPS[name]
    for m, k, n in SHAPES:
        for fmt, fid in FORMATS:
            p = GemmProblem(m, k, n, "bf16", fmt, "bf16", fid)
            for s in _splits(ch, p):
                t = gemm_traffic(ch, p, s)
                assert t.dram.read_a >= m * k * dtype_bytes("bf16"), s
                assert t.dram.read_b >= k * n * dtype_bytes(fmt), s
                assert t.dram.write >= m * n * dtype_bytes("bf16"), s
                cost = gemm_cost(ch, p, s)  # the cost model charges the same bytes
                assert (cost.dram_read_bytes, cost.dram_write_bytes) == (t.dram.read, t.dram.write)


@pytest.mark.parametrize("name", sorted(CHIPS))
def test_every_byte_a_sender_reads_it_multicasts(name):
    """A tree's bytes are what its sender read from DRAM for it: an operand's trees add up to its reads."""
    ch = CHIPS[name]
    for p in _problems():
        for s in _splits(ch, p):
            t = gemm_traffic(ch, p, s)
            for op, read in (("A", t.dram.read_a), ("B", t.dram.read_b)):
                trees = [tr for tr in t.trees if tr.operand == op]
                multicast = (s.kind == "2d" and ((s.cols > 1) if op == "A" else (s.rows > 1))) or (
                    s.kind == ("1d_in0" if op == "A" else "1d_in1") and s.rows * s.cols > 1)
                if multicast:
                    assert sum(tr.nbytes for tr in trees) == pytest.approx(read), (s, op)
                else:
                    assert not trees


def test_operands_in_l1_still_multicast_but_read_no_dram():
    ch = CHIPS["wormhole-n150"]
    p = GemmProblem(4096, 4096, 4096, "bf16", "bf16", "bf16", "HiFi2")
    in_l1 = GemmProblem(4096, 4096, 4096, "bf16", "bf16", "bf16", "HiFi2", a_in_dram=False, out_in_dram=False)
    s = gemm_on_grid(ch, 4096, 4096, 4096, "bf16", "bf16", "bf16", "HiFi2").split
    t, t_l1 = gemm_traffic(ch, p, s), gemm_traffic(ch, in_l1, s)
    assert t_l1.dram.read_a == 0 and t_l1.dram.write == 0 and t_l1.dram.read_b == t.dram.read_b
    assert t_l1.multicast_link_bytes() == t.multicast_link_bytes() > 0


def test_k_split_groups_sit_side_by_side_each_with_its_k_slice():
    ch = CHIPS["wormhole-n150"]
    p = GemmProblem(32, 8192, 256, "bf16", "bfp8", "bf16", "LoFi")  # 1 × 8 output tiles: K-split pays
    s = Split("2d", 1, 4, 1, 2, 4, 1, 2, 1, 2, k_split=4)
    t = gemm_traffic(ch, p, s)
    assert not t.overlapping
    a_srcs = sorted(tr.src for tr in t.trees if tr.operand == "A")
    assert a_srcs == [(0, 0), (0, 4), (1, 0), (1, 4)]  # two groups per row band of 8 columns, then the next
    kt = 8192 // 32
    panel = 1 * (kt // 4) * ch.tile_bytes("bf16")  # one row of A tiles, a quarter of K
    assert all(tr.nbytes == panel for tr in t.trees if tr.operand == "A")
    summary = t.summary()
    assert summary["busiest_link_bytes"] == max(t.link_loads().values())
    assert summary["multicast_link_bytes"] == pytest.approx(sum(t.link_loads().values()))
    assert summary["busiest_port_share"] == 1.0 and summary["dram_ports"] == 1
