"""One grid device as the spatial cost model sees it, and what happens inside one of its cores.

``GridChip`` flattens ``Compute.grid`` (per-core rates), the device's DRAM and its fixed per-op cost into a
frozen, hashable record: it is the memo key of every split the model chooses, so the ~10 distinct GEMM
shapes of a model are costed once per device type, however many stages, passes and search candidates
ask. The functions below are the per-core inner loop (cycles per tile multiply-accumulate) and the L1
budget of an op's buffers, which decide how large a block a core can work on at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from tilewright.engine.ir.common import DType, MathFidelity, dtype_bytes
from tilewright.engine.ir.hardware import Compute, Memory
from tilewright.engine.ir.tile_grid import TileGrid

INF = float("inf")


@dataclass(frozen=True, slots=True)
class GridChip:
    """Per-core figures of a grid device (bytes and FLOP per cycle, cycles), its DRAM, its fixed cost."""

    rows: int
    cols: int
    clock_hz: float
    tile: int
    rates: tuple[tuple[str, tuple[tuple[str, float], ...]], ...]  # format → fidelity → FLOP/cycle per core
    vector_flops_per_cycle: float
    l1_usable: float
    l1_bytes_per_cycle: float
    dram_read: float  # per core, bytes/cycle
    dram_write: float
    multicast: float
    unicast: float
    dram_latency: float  # cycles
    noc_latency: float
    noc_link: float  # bytes/cycle per link
    hop_cycles: float
    unpack: float  # bytes/cycle, INF when not a bound
    pack: float
    mac_overhead: float
    dst_tiles: int
    dram_peak: float  # bytes/s of the device's DRAM, 0 when it has none
    eff_local: float  # bank-adjacent readers
    eff_read: float  # interleaved pages, arbitrary readers
    eff_write: float
    fixed_s: float
    dram_banks: int = 0  # DRAM-sharded weights: one slice per bank (``TileGrid.dram_banks``), 0 = not modelled
    readers_per_bank: int = 1

    @property
    def cores(self) -> int:
        return self.rows * self.cols

    @property
    def has_dram(self) -> bool:
        return self.dram_peak > 0

    def with_grid(self, rows: int, cols: int) -> GridChip:
        """The same chip with another compute grid (firmware that enables more or fewer cores)."""
        fields = {f: getattr(self, f) for f in self.__slots__}
        return GridChip(**{**fields, "rows": rows, "cols": cols})

    def tile_bytes(self, fmt: str) -> float:
        return dtype_bytes(fmt) * self.tile * self.tile

    def flops_per_cycle(self, fmt: str, fidelity: str) -> float:
        return _rate(self.rates, fmt, fidelity)

    def peak(self, fmt: str, fidelity: str) -> float:
        return self.cores * self.flops_per_cycle(fmt, fidelity) * self.clock_hz

    def dram_read_Bps(self, interleaved: bool = True) -> float:  # noqa: N802 - unit suffix
        return self.dram_peak * (self.eff_read if interleaved else self.eff_local)

    def dram_write_Bps(self) -> float:  # noqa: N802 - unit suffix
        return self.dram_peak * self.eff_write


@lru_cache(maxsize=4096)
def _rate(rates: tuple, fmt: str, fidelity: str) -> float:
    table = dict(rates)
    if fmt not in table:
        fmt = DType.bf16.value if DType.bf16.value in table else next(iter(table))
    by_fid = dict(table[fmt])
    if fidelity in by_fid:
        return by_fid[fidelity]
    if MathFidelity.LoFi.value in by_fid:
        return by_fid[MathFidelity.LoFi.value] / MathFidelity(fidelity).phases
    return min(by_fid.values())


def grid_chip(compute: Compute, dram: Memory | None) -> GridChip:
    """The flat record of a device whose ``compute.grid`` is set; ``dram`` is its DRAM (None: SRAM only)."""
    g: TileGrid | None = compute.grid
    assert g is not None, "grid_chip needs a device with a grid"
    mv = g.movement
    eff = dram.efficiency if dram is not None else 1.0
    return GridChip(
        rows=g.rows,
        cols=g.cols,
        clock_hz=g.clock_hz,
        tile=g.tile,
        rates=tuple(
            (fmt.value, tuple((fid.value, rate) for fid, rate in by_fid.items()))
            for fmt, by_fid in g.matrix_flops_per_cycle.items()
        ),
        vector_flops_per_cycle=g.vector_flops_per_cycle,
        l1_usable=g.l1_usable_bytes,
        l1_bytes_per_cycle=g.l1_bytes_per_cycle,
        dram_read=mv.dram_read,
        dram_write=mv.dram_write,
        multicast=mv.multicast,
        unicast=mv.unicast,
        dram_latency=mv.dram_latency_cycles,
        noc_latency=mv.noc_latency_cycles,
        noc_link=g.noc_link_bytes_per_cycle,
        hop_cycles=g.noc_hop_cycles,
        unpack=g.unpack_bytes_per_cycle or INF,
        pack=g.pack_bytes_per_cycle or INF,
        mac_overhead=g.mac_overhead_cycles,
        dst_tiles=g.dst_tiles,
        dram_peak=dram.bandwidth_bytes_per_s if dram is not None else 0.0,
        eff_local=eff,
        eff_read=(dram.efficiency_interleaved_read or eff) if dram is not None else 1.0,
        eff_write=(dram.efficiency_interleaved_write or eff) if dram is not None else 1.0,
        fixed_s=compute.fixed_op_s,
        dram_banks=g.dram_banks if dram is not None else 0,
        readers_per_bank=g.dram_readers_per_bank,
    )


# --- inside one core ------------------------------------------------------------------------------------


def tile_mac_cycles(chip: GridChip, fmt_a: str, fmt_b: str, fidelity: str, sub_h: int, sub_w: int) -> float:
    """Cycles of one tile × tile × tile multiply-accumulate in a core: the matrix engine's passes, or the
    unpackers feeding its source registers, whichever is slower, plus a fixed pipeline overhead. Inside an
    ``sub_h × sub_w`` output sub-block one operand tile stays in its register while the other is reloaded,
    so a MAC moves (1 + 1/longer side) tiles — the reloaded one being the operand along the longer side.
    The feed is why bf16 (2,048 B a tile) is feed-bound at HiFi2 on Wormhole while bfp4 (576 B) is not."""
    flop_per_cycle = min(chip.flops_per_cycle(fmt_a, fidelity), chip.flops_per_cycle(fmt_b, fidelity))
    compute = 2.0 * chip.tile**3 / flop_per_cycle
    ta, tb = chip.tile_bytes(fmt_a), chip.tile_bytes(fmt_b)
    feed_bytes = tb + ta / sub_w if sub_w >= sub_h else ta + tb / sub_h
    return max(compute, feed_bytes / chip.unpack) + chip.mac_overhead


def buffer_bytes(out_h: int, out_w: int, block_k: int, ta: float, tb: float, tout: float) -> float:
    """L1 an op's circular buffers take for an ``out_h × out_w`` output block and K-blocks of ``block_k``
    tiles: double-buffered A and B blocks, the output and its partial-sum buffer (the structure of ttnn's
    matmul CB sizing)."""
    return 2 * out_h * block_k * ta + 2 * block_k * out_w * tb + out_h * out_w * 2 * tout


def fit_blocks(
    chip: GridChip, pm: int, pn: int, block_k: int, ta: float, tb: float, tout: float
) -> tuple[int, int, int]:
    """The largest output block (a divisor of each per-core side, closest to square) and K-block whose
    buffers fit a core's usable L1; a core then sweeps its per-core block in several passes over K."""
    return _fit(chip.l1_usable, pm, pn, block_k, ta, tb, tout)


@lru_cache(maxsize=65536)
def _fit(l1: float, pm: int, pn: int, block_k: int, ta: float, tb: float, tout: float) -> tuple[int, int, int]:
    if buffer_bytes(pm, pn, block_k, ta, tb, tout) < l1:
        return pm, pn, block_k
    hs, ws = _divisors(pm), _divisors(pn)
    shapes = sorted(((h * w, -max(h, w) / min(h, w), h, w) for h in hs for w in ws), reverse=True)
    for kb in _divisors(block_k):
        for _, _, h, w in shapes:
            if buffer_bytes(h, w, kb, ta, tb, tout) < l1:
                return h, w, kb
    return 1, 1, 1


@lru_cache(maxsize=4096)
def _divisors(x: int) -> tuple[int, ...]:
    """Divisors of ``x``, largest first."""
    small = [d for d in range(1, math.isqrt(x) + 1) if x % d == 0]
    return tuple(sorted({*small, *(x // d for d in small)}, reverse=True))


@lru_cache(maxsize=65536)
def sub_block(h: int, w: int, dst_tiles: int) -> tuple[int, int]:
    """The largest output sub-block dividing ``h × w`` that the destination register holds (8 bf16 tiles
    with half-sync), preferring the wider of equal sizes (matrix_engine.md, "Fp32 Dest Acc")."""
    best = (1, 1)
    for sh in _divisors(h):
        for sw in _divisors(w):
            if sh * sw <= dst_tiles and (sh * sw, sw) > (best[0] * best[1], best[1]):
                best = (sh, sw)
    return best
