"""Time of one GEMM laid on a grid of cores in one given way (the closed form the split choice minimises).

C[M×N] = A[M×K] · B[K×N], output-stationary: every core owns a ``per_m × per_n`` block of C (in tiles) and
accumulates it over K in K-blocks. A core's block of A arrives from the *sender* of its grid row — the core
that reads it from DRAM and multicasts it along the row (B likewise down the column), so each operand is read
from DRAM once and crosses each NoC link once (SUMMA; tt-metal's ``matmul_multicore_reuse_mcast``).

Per K-block the slowest of five things sets the pace: the core's arithmetic, the A sender chain (DRAM read
then multicast), the B sender chain, the device's DRAM bandwidth shared by every sender, and the core's L1.
Buffers are double-buffered, so a K-sweep costs the first block's delivery (fill), then one block per
pace, then the last block's arithmetic (drain); the output is written back after the sweep (a tail, not
overlapped), partial sums of a K-split are reduced over the NoC, and every op pays the device's fixed
dispatch cost. All in cycles of the grid clock until the end.

A weight DRAM-sharded over the banks of a chip that states them (``TileGrid.dram_banks``) under a 1-D split is
tt-metal's DRAM-sharded program (``matmul_multicore_reuse_mcast_dram_sharded_program_factory.cpp``): the line
is the bank workers (``readers_per_bank`` per bank, ``spatial_choice``), each reading its slice of B and
computing it on a width padded to whole sub-blocks, its reads pipelined with transaction ids so the DRAM
latency is paid once per op, not per K-block. That worker count is why Blackhole's one reader per bank is
compute-bound (55 % of the DRAM, tt-metal PR #54242) while its DRAM side reaches 90 %.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from tilewright.engine.perf.spatial_chip import GridChip, tile_mac_cycles
from tilewright.engine.perf.spatial_traffic import dram_bytes

SPLIT_KINDS = ("2d", "1d_in0", "1d_in1")


@dataclass(frozen=True, slots=True)
class GemmProblem:
    """One GEMM as the grid sees it: sizes in elements, operand formats, fidelity, where operands live."""

    m: int
    k: int
    n: int
    fmt_a: str  # activations
    fmt_b: str  # weights
    fmt_out: str
    fidelity: str
    a_in_dram: bool = True
    b_in_dram: bool = True
    out_in_dram: bool = True
    b_sharded: bool = False  # B width-sharded one slice per DRAM bank (tt-metal's DRAM-sharded matmul)
    # under a 1-D split, A's K-blocks handed from core to neighbouring core around a ring while each computes
    # (tt-metal's matmul_1d_ring, the prefetched decode matmuls) instead of multicast by one sender
    a_ring: bool = False

    def tiles(self, tile: int) -> tuple[int, int, int]:
        return (max(1, math.ceil(self.m / tile)), max(1, math.ceil(self.k / tile)), max(1, math.ceil(self.n / tile)))


@dataclass(frozen=True, slots=True)
class Split:
    """How a GEMM is laid on the grid. ``2d``: rows × cols cores, A multicast along rows, B along columns;
    ``1d_in0``: one line of cores, one sender multicasts all of A, every core owns columns of B (decode
    shapes); ``1d_in1``: the mirror. Sizes in tiles; ``k_split`` groups of cores each reduce a slice of K."""

    kind: str
    rows: int
    cols: int
    per_m: int
    per_n: int
    block_k: int
    out_h: int  # output block a core holds in L1 per sweep over K (≤ per_m × per_n)
    out_w: int
    sub_h: int  # sub-block of the destination register
    sub_w: int
    k_split: int = 1

    @property
    def cores(self) -> int:
        return self.rows * self.cols * self.k_split

    def describe(self) -> str:
        """E.g. "2-D 8×8, 16×16 tiles/core, K-block 4, A mcast rows, B mcast cols"."""
        return _describe(self)


@lru_cache(maxsize=4096)
def _describe(s: Split) -> str:
    """``Split.describe``, memoised: every forward GEMM's report line asks it (~10⁴ times a search) of the
    few splits ``choose`` keeps."""
    if s.kind == "2d":
        head = f"2-D {s.rows}×{s.cols}"
        moves = "A mcast rows, B mcast cols"
    else:
        head = f"1-D {s.rows * s.cols}"
        moves = "A mcast to all, B split" if s.kind == "1d_in0" else "B mcast to all, A split"
    parts = [head, f"{s.per_m}×{s.per_n} tiles/core", f"K-block {s.block_k}"]
    if (s.out_h, s.out_w) != (s.per_m, s.per_n):
        parts.append(f"L1 block {s.out_h}×{s.out_w}")
    if s.k_split > 1:
        parts.append(f"K-split {s.k_split}")
    return ", ".join([*parts, moves])


@dataclass(frozen=True, slots=True)
class GemmCost:
    """Seconds of one split and what they are made of (``compute_s`` and ``movement_s`` are the in-loop
    totals of the arithmetic and of the slowest delivery; ``seconds`` ≥ both, plus fill/drain/tail/fixed)."""

    seconds: float
    split: Split
    compute_s: float
    movement_s: float
    fixed_s: float
    dram_read_bytes: float
    dram_write_bytes: float
    flops: float  # tile-padded work the cores do
    bound: str


class GemmTerms:
    """What a split's cost needs of ``chip`` and ``p`` that no split changes: tile counts, tile bytes, the
    rates each sender and the shared DRAM move at. Built once per (chip, problem), so the split choice costs
    its ~200 candidates without re-deriving them (a tiled search costs ~10⁴–10⁵ splits); every figure is the
    same expression of the chip's fields as before, so times are unchanged to the last bit."""

    __slots__ = (
        "chip", "p", "mt", "kt", "nt", "ta", "tb", "to", "dram", "lat_a", "rate_a", "lat_b", "rate_b",
        "per_cycle", "dram_a", "dram_b", "dram_b_1d_in0", "out_total", "out_dram", "dram_write_cycle", "_macs",
        "ds",
    )  # fmt: skip

    def __init__(self, chip: GridChip, p: GemmProblem) -> None:
        self.chip, self.p = chip, p
        self.mt, self.kt, self.nt = p.tiles(chip.tile)
        self.ta, self.tb, self.to = chip.tile_bytes(p.fmt_a), chip.tile_bytes(p.fmt_b), chip.tile_bytes(p.fmt_out)
        self.dram = chip.has_dram
        # a sender's fetch of a block as (latency, bytes per cycle): see ``_fetch_terms``
        self.lat_a, self.rate_a = _fetch_terms(chip, p.a_in_dram)
        self.lat_b, self.rate_b = _fetch_terms(chip, p.b_in_dram)
        # Every sender reads at once from pages interleaved over all banks: the device's DRAM is shared. A
        # DRAM-sharded B under a 1-D split (each core's columns one bank's slice, read by a core next to it)
        # runs at the bank-adjacent efficiency instead (S3: 267 GB/s against 190-200 for arbitrary readers).
        self.per_cycle = chip.dram_read_Bps() / chip.clock_hz if self.dram else 0.0
        self.dram_a = self.dram and p.a_in_dram
        self.dram_b = self.dram and p.b_in_dram
        self.dram_b_1d_in0 = chip.dram_read_Bps(interleaved=not p.b_sharded) / chip.clock_hz if self.dram else 0.0
        self.out_total = self.mt * self.nt * self.to
        self.out_dram = p.out_in_dram and self.dram
        self.dram_write_cycle = chip.dram_write_Bps() / chip.clock_hz if self.out_dram else 0.0
        self._macs: dict[tuple[int, int], float] = {}
        # a 1-D split of a DRAM-sharded B is tt-metal's DRAM-sharded program (``dram_sharded``)
        self.ds = self.dram_b and p.b_sharded and chip.dram_banks > 0

    def mac(self, sub_h: int, sub_w: int) -> float:
        """``tile_mac_cycles`` of this problem's formats for one sub-block shape (a handful per problem)."""
        t = self._macs.get((sub_h, sub_w))
        if t is None:
            p = self.p
            t = self._macs[sub_h, sub_w] = tile_mac_cycles(self.chip, p.fmt_a, p.fmt_b, p.fidelity, sub_h, sub_w)
        return t


def gemm_cost(chip: GridChip, p: GemmProblem, s: Split) -> GemmCost:
    """Time of ``p`` laid as ``s`` on ``chip`` (see the module docstring for the pipeline)."""
    return split_cost(GemmTerms(chip, p), s)


def split_cost(g: GemmTerms, s: Split) -> GemmCost:
    """``gemm_cost`` from the problem's prepared terms: the pipeline's cycles and what bounds them."""
    chip = g.chip
    seconds, sweeps, nb, comp_blk, t_a, t_b, t_dram_blk, t_sram_blk, movement, t_out = pipeline(
        g, s.kind, s.rows, s.cols, s.per_m, s.per_n, s.block_k, s.out_h, s.out_w, s.sub_h, s.sub_w, s.k_split
    )
    cyc = 1.0 / chip.clock_hz
    dram = dram_bytes(g.p, s, (g.mt, g.kt, g.nt), (g.ta, g.tb, g.to))  # the bytes ``spatial_traffic`` reports
    bounds = {
        "compute": sweeps * nb * comp_blk,
        "A delivery": sweeps * nb * t_a,
        "B delivery": sweeps * nb * t_b,
        "DRAM bandwidth": sweeps * nb * t_dram_blk,
        "L1 bandwidth": sweeps * nb * t_sram_blk,
        "write-back": t_out,
        "fixed cost": chip.fixed_s * chip.clock_hz,
    }
    return GemmCost(
        seconds=seconds,
        split=s,
        compute_s=sweeps * nb * comp_blk * cyc,
        movement_s=sweeps * nb * movement * cyc,
        fixed_s=chip.fixed_s,
        dram_read_bytes=dram.read,
        dram_write_bytes=dram.write,
        flops=2.0 * g.mt * g.kt * g.nt * chip.tile**3,
        bound=max(bounds, key=bounds.__getitem__),
    )


def pipeline(
    g: GemmTerms,
    kind: str,
    rows: int,
    cols: int,
    per_m: int,
    per_n: int,
    block_k: int,
    out_h: int,
    out_w: int,
    sub_h: int,
    sub_w: int,
    k_split: int,
) -> tuple[float, int, int, float, float, float, float, float, float, float]:
    """The one formula of a split's time (``Split``'s fields, in their order): seconds, then the cycles
    ``split_cost`` reports — sweeps, K-blocks per sweep, and per K-block the arithmetic, the A and B sender
    chains, the DRAM and L1 pace, the slowest delivery; then the write-back tail."""
    chip = g.chip
    ks = max(1, k_split)
    kt_local = math.ceil(g.kt / ks)
    bk = max(1, min(block_k, kt_local))
    nb = math.ceil(kt_local / bk)  # K-blocks per sweep
    oh, ow = min(out_h, per_m), min(out_w, per_n)
    sweeps = math.ceil(per_m / oh) * math.ceil(per_n / ow)
    t_mac = g.mac(sub_h, sub_w)

    math_blk = oh * ow * bk * t_mac
    pack_blk = oh * ow * g.to / chip.pack if nb > 1 else 0.0  # partials accumulated in L1 by the packers
    comp_blk = max(math_blk, pack_blk)

    a_blk, b_blk = oh * bk * g.ta, bk * ow * g.tb
    once = 0.0  # DRAM latency the op pays once rather than per K-block (the DRAM-sharded program)
    t_a = g.lat_a + a_blk / g.rate_a  # the senders' fetches (``_fetch_terms``)
    t_b = g.lat_b + b_blk / g.rate_b
    per_cycle_b = g.per_cycle
    if kind == "2d":
        if cols > 1:
            t_a += _mcast(chip, a_blk, cols - 1, cols - 1)
        if rows > 1:
            t_b += _mcast(chip, b_blk, rows - 1, rows - 1)
        senders_a, senders_b = rows, cols
    elif kind == "1d_in0":
        line = rows * cols
        if line > 1:
            t_a += _ring_pass(chip, a_blk) if g.p.a_ring else _mcast(chip, a_blk, line - 1, chip.rows + chip.cols)
        senders_a, senders_b = 1, line
        per_cycle_b = g.dram_b_1d_in0
        if g.ds:  # reads pipelined (latency once per op, below), arithmetic on the sub-block-padded width
            t_b, once = b_blk / g.rate_b, g.lat_b
            comp_blk = max(oh * dram_sharded_width(ow, sub_w) * bk * t_mac, pack_blk)
    elif kind == "1d_in1":
        line = rows * cols
        if line > 1:
            t_b += _mcast(chip, b_blk, line - 1, chip.rows + chip.cols)
        senders_a, senders_b = line, 1
    else:
        raise ValueError(f"split kind {kind!r}: one of {SPLIT_KINDS}")

    t_dram_blk = 0.0
    if g.dram_a:
        t_dram_blk += a_blk * senders_a * ks / g.per_cycle
    if g.dram_b:
        t_dram_blk += b_blk * senders_b * ks / per_cycle_b
    t_sram_blk = 2 * (a_blk + b_blk) / chip.l1_bytes_per_cycle  # written by the NoC, read by the unpackers

    movement = max(t_a, t_b, t_dram_blk, t_sram_blk)
    t_blk = max(comp_blk, movement)
    t_loop = sweeps * (movement + (nb - 1) * t_blk + comp_blk) + once

    t_ksplit = 0.0
    if ks > 1:  # partial sums (bf16 tiles) sent to a neighbour and added, log2(ks) rounds
        part = per_m * per_n
        add_cycles = chip.tile * chip.tile / chip.vector_flops_per_cycle
        t_ksplit = math.ceil(math.log2(ks)) * (
            chip.noc_latency + part * chip.tile_bytes("bf16") / chip.unicast + part * add_cycles
        )

    t_out = 0.0
    if g.out_dram:
        t_out = max(chip.dram_latency + per_m * per_n * g.to / chip.dram_write, g.out_total / g.dram_write_cycle)

    seconds = chip.fixed_s + (t_loop + t_ksplit + t_out) * (1.0 / chip.clock_hz)
    return seconds, sweeps, nb, comp_blk, t_a, t_b, t_dram_blk, t_sram_blk, movement, t_out


def floor_seconds(g: GemmTerms, kind: str, rows: int, cols: int, per_m: int, per_n: int, k_split: int) -> float:
    """A lower bound on ``pipeline``'s seconds for any split of this layout (kind, grid, per-core block,
    K-split), whatever its block and sub-block sizes: the loop runs ``sweeps × nb`` K-blocks at the pace of
    the slowest of its terms, and ``sweeps × out_h ≥ per_m``, ``nb × block_k ≥ K per core`` — so over the loop
    a core does at least ``per_m × per_n × K`` tile MACs, moves at least its A and B panels through L1, its
    senders fetch (and multicast) at least those panels, and the device's DRAM serves every sender's panel.
    The split choice skips a layout whose bound already exceeds the best time found (``choose``)."""
    chip = g.chip
    ks = max(1, k_split)
    kt_local = math.ceil(g.kt / ks)
    a_panel, b_panel = per_m * kt_local * g.ta, per_n * kt_local * g.tb
    line = rows * cols
    if kind == "2d":
        mcast_a, mcast_b, senders_a, senders_b, per_cycle_b = cols > 1, rows > 1, rows, cols, g.per_cycle
    elif kind == "1d_in0":
        mcast_a, mcast_b, senders_a, senders_b, per_cycle_b = line > 1, False, 1, line, g.dram_b_1d_in0
    else:
        mcast_a, mcast_b, senders_a, senders_b, per_cycle_b = False, line > 1, line, 1, g.per_cycle
    mcast_rate = min(chip.multicast, chip.noc_link)
    if kind == "1d_in0" and g.p.a_ring:  # A handed on by unicast to the neighbour (``_ring_pass``)
        mcast_rate = min(chip.unicast, chip.noc_link)
    dram = 0.0
    if g.dram_a:
        dram += a_panel * senders_a * ks / g.per_cycle
    if g.dram_b:
        dram += b_panel * senders_b * ks / per_cycle_b
    loop = max(
        per_m * per_n * kt_local * mac_floor(chip, g.p.fmt_a, g.p.fmt_b, g.p.fidelity),
        a_panel / g.rate_a + (a_panel / mcast_rate if mcast_a else 0.0),
        b_panel / g.rate_b + (b_panel / mcast_rate if mcast_b else 0.0),
        dram,
        2 * (a_panel + b_panel) / chip.l1_bytes_per_cycle,
    )
    t_out = 0.0
    if g.out_dram:
        t_out = max(chip.dram_latency + per_m * per_n * g.to / chip.dram_write, g.out_total / g.dram_write_cycle)
    return chip.fixed_s + (loop + t_out) / chip.clock_hz


def dram_sharded_width(per_n: int, sub_w: int) -> int:
    """Output columns (tiles) a DRAM-sharded worker computes: its ``per_n`` columns padded up to whole
    sub-blocks of ``sub_w`` (tt-metal pads ``per_core_N_compute`` rather than run narrow sub-blocks; the
    reader still fetches only ``per_n``)."""
    return math.ceil(per_n / sub_w) * sub_w


def dram_sharded_sub_w(per_n: int, max_w: int) -> int:
    """Sub-block width of a DRAM-sharded worker with a one-row sub-block, as
    ``matmul_multicore_reuse_mcast_dram_sharded_program_factory.cpp`` sets it: the widest divisor of ``per_n``
    the destination register holds; if narrower than ``max_w``, each wider width up to ``max_w`` that needs
    fewer sub-blocks (⌈per_n / w⌉) replaces it — the compute width is then padded
    (``dram_sharded_width``). E.g. 11 columns, max 8: divisor 1 (11 sub-blocks) → width 6, 2 sub-blocks,
    12 columns computed."""
    w = max(d for d in range(1, min(per_n, max_w) + 1) if per_n % d == 0)
    if w < max_w:
        blocks, best = per_n // w, w
        for nw in range(w + 1, max_w + 1):
            if math.ceil(per_n / nw) < blocks:
                blocks, best = math.ceil(per_n / nw), nw
        w = best
    return w


@lru_cache(maxsize=4096)
def mac_floor(chip: GridChip, fmt_a: str, fmt_b: str, fidelity: str) -> float:
    """The fewest cycles a tile MAC takes in any sub-block the destination register holds (``sub_block``
    picks among them): the bound ``floor_seconds`` charges per tile MAC."""
    dst = max(1, chip.dst_tiles)
    return min(
        tile_mac_cycles(chip, fmt_a, fmt_b, fidelity, h, w) for h in range(1, dst + 1) for w in range(1, dst // h + 1)
    )


def _fetch_terms(chip: GridChip, in_dram: bool) -> tuple[float, float]:
    """A sender's fetch of a block as (latency, bytes per cycle): one DRAM transaction's latency plus the
    bytes at what one core reads per cycle — or, for an operand already in the sender's L1, the L1 read
    (no latency: adding 0.0 leaves the time exactly the L1 read's)."""
    if in_dram and chip.has_dram:
        return chip.dram_latency, chip.dram_read
    return 0.0, chip.l1_bytes_per_cycle


def _ring_pass(chip: GridChip, nbytes: float) -> float:
    """Cycles to hand a block to the next core of a ring: every core sends the block it holds to its
    neighbour at once (each link carries one block per step), one unicast and one hop; the write's latency is
    pipelined behind the previous block's arithmetic as the buffers are double-buffered."""
    return nbytes / min(chip.unicast, chip.noc_link) + chip.hop_cycles


def _mcast(chip: GridChip, nbytes: float, receivers: int, depth: int) -> float:
    """Cycles to multicast a block to ``receivers`` cores: charged once (a row/column tree carries the bytes
    once per link) at the sender's injection rate, which is below the link rate, plus the tree's depth."""
    if receivers <= 0:
        return 0.0
    return chip.noc_latency + nbytes / min(chip.multicast, chip.noc_link) + depth * chip.hop_cycles
