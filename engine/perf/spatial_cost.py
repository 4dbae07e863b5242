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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
        if self.kind == "2d":
            head = f"2-D {self.rows}×{self.cols}"
            moves = "A mcast rows, B mcast cols"
        else:
            head = f"1-D {self.rows * self.cols}"
            moves = "A mcast to all, B split" if self.kind == "1d_in0" else "B mcast to all, A split"
        parts = [head, f"{self.per_m}×{self.per_n} tiles/core", f"K-block {self.block_k}"]
        if (self.out_h, self.out_w) != (self.per_m, self.per_n):
            parts.append(f"L1 block {self.out_h}×{self.out_w}")
        if self.k_split > 1:
            parts.append(f"K-split {self.k_split}")
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


def gemm_cost(chip: GridChip, p: GemmProblem, s: Split) -> GemmCost:
    """Time of ``p`` laid as ``s`` on ``chip`` (see the module docstring for the pipeline)."""
    mt, kt, nt = p.tiles(chip.tile)
    ta, tb, to = chip.tile_bytes(p.fmt_a), chip.tile_bytes(p.fmt_b), chip.tile_bytes(p.fmt_out)
    ks = max(1, s.k_split)
    kt_local = math.ceil(kt / ks)
    bk = max(1, min(s.block_k, kt_local))
    nb = math.ceil(kt_local / bk)  # K-blocks per sweep
    oh, ow = min(s.out_h, s.per_m), min(s.out_w, s.per_n)
    sweeps = math.ceil(s.per_m / oh) * math.ceil(s.per_n / ow)
    t_mac = tile_mac_cycles(chip, p.fmt_a, p.fmt_b, p.fidelity, s.sub_h, s.sub_w)

    math_blk = oh * ow * bk * t_mac
    pack_blk = oh * ow * to / chip.pack if nb > 1 else 0.0  # partials accumulated in L1 by the packers
    comp_blk = max(math_blk, pack_blk)

    a_blk, b_blk = oh * bk * ta, bk * ow * tb
    if s.kind == "2d":
        t_a = _fetch(chip, a_blk, p.a_in_dram) + _mcast(chip, a_blk, s.cols - 1, s.cols - 1)
        t_b = _fetch(chip, b_blk, p.b_in_dram) + _mcast(chip, b_blk, s.rows - 1, s.rows - 1)
        senders_a, senders_b = s.rows, s.cols
    elif s.kind == "1d_in0":
        t_a = _fetch(chip, a_blk, p.a_in_dram) + _mcast(chip, a_blk, s.rows * s.cols - 1, chip.rows + chip.cols)
        t_b = _fetch(chip, b_blk, p.b_in_dram)
        senders_a, senders_b = 1, s.rows * s.cols
    elif s.kind == "1d_in1":
        t_a = _fetch(chip, a_blk, p.a_in_dram)
        t_b = _fetch(chip, b_blk, p.b_in_dram) + _mcast(chip, b_blk, s.rows * s.cols - 1, chip.rows + chip.cols)
        senders_a, senders_b = s.rows * s.cols, 1
    else:
        raise ValueError(f"split kind {s.kind!r}: one of {SPLIT_KINDS}")

    # Every sender reads at once from pages interleaved over all banks: the device's DRAM is shared. A
    # DRAM-sharded B under a 1-D split (each core's columns one bank's slice, read by a core next to it)
    # runs at the bank-adjacent efficiency instead (S3: 267 GB/s against 190-200 for arbitrary readers).
    t_dram_blk = 0.0
    if chip.has_dram:
        per_cycle = chip.dram_read_Bps() / chip.clock_hz
        per_cycle_b = chip.dram_read_Bps(interleaved=not (p.b_sharded and s.kind == "1d_in0")) / chip.clock_hz
        if p.a_in_dram:
            t_dram_blk += a_blk * senders_a * ks / per_cycle
        if p.b_in_dram:
            t_dram_blk += b_blk * senders_b * ks / per_cycle_b
    t_sram_blk = 2 * (a_blk + b_blk) / chip.l1_bytes_per_cycle  # written by the NoC, read by the unpackers

    movement = max(t_a, t_b, t_dram_blk, t_sram_blk)
    t_blk = max(comp_blk, movement)
    t_loop = sweeps * (movement + (nb - 1) * t_blk + comp_blk)

    t_ksplit = 0.0
    if ks > 1:  # partial sums (bf16 tiles) sent to a neighbour and added, log2(ks) rounds
        part = s.per_m * s.per_n
        add_cycles = chip.tile * chip.tile / chip.vector_flops_per_cycle
        t_ksplit = math.ceil(math.log2(ks)) * (
            chip.noc_latency + part * chip.tile_bytes("bf16") / chip.unicast + part * add_cycles
        )

    out_total = mt * nt * to
    t_out = 0.0
    if p.out_in_dram and chip.has_dram:
        t_out = max(
            chip.dram_latency + s.per_m * s.per_n * to / chip.dram_write,
            out_total / (chip.dram_write_Bps() / chip.clock_hz),
        )

    cyc = 1.0 / chip.clock_hz
    seconds = chip.fixed_s + (t_loop + t_ksplit + t_out) * cyc
    dram = dram_bytes(p, s, (mt, kt, nt), (ta, tb, to))  # the bytes ``spatial_traffic`` reports, one formula
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
        flops=2.0 * mt * kt * nt * chip.tile**3,
        bound=max(bounds, key=bounds.__getitem__),
    )


def _fetch(chip: GridChip, nbytes: float, in_dram: bool) -> float:
    """Cycles for a sender to get a block: one DRAM transaction's latency plus the bytes at what one core
    reads per cycle — or, for an operand already in the sender's L1, the L1 read."""
    if in_dram and chip.has_dram:
        return chip.dram_latency + nbytes / chip.dram_read
    return nbytes / chip.l1_bytes_per_cycle


def _mcast(chip: GridChip, nbytes: float, receivers: int, depth: int) -> float:
    """Cycles to multicast a block to ``receivers`` cores: charged once (a row/column tree carries the bytes
    once per link) at the sender's injection rate, which is below the link rate, plus the tree's depth."""
    if receivers <= 0:
        return 0.0
    return chip.noc_latency + nbytes / min(chip.multicast, chip.noc_link) + depth * chip.hop_cycles
