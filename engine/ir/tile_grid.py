"""The grid of cores inside one device (a Tensix grid, a wafer's PEs), described parametrically.

The device the mapping counts (tp/pp/dp) is the chip; how one op spreads over the chip's cores is the cost
model's choice (``perf.spatial``). What that choice needs is per core and per cycle, because that is how
the public sources state it (ISA documents, directed data-movement tests): the matrix engine's rate per
format and math fidelity, the L1 size and bandwidth, what one core can read from DRAM or multicast per
cycle, and the inner loop's feed and overhead. Per-device figures (peak FLOP/s) are derived from them.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator
from tilewright.engine.ir.common import (
    DType,
    MathFidelity,
    PositiveBytes,
    QuietDefaultsModel,
    StrictModel,
    dtype_bytes,
)

PerCycle = Annotated[float, Field(gt=0, description="per core, per cycle")]
Cycles = Annotated[float, Field(ge=0, description="cycles")]


class CoreDataMovement(StrictModel):
    """Bytes per cycle one core achieves alone, and the latency of one transaction: they set how fast a
    core can fetch a block from DRAM and pass it on to its row or column of the grid."""

    dram_read: PerCycle = Field(description="bytes/cycle one core reads from DRAM")
    dram_write: PerCycle = Field(description="bytes/cycle one core writes to DRAM")
    multicast: PerCycle = Field(description="bytes/cycle one core multicasts to a row/column (linked)")
    unicast: PerCycle = Field(description="bytes/cycle one core writes to one other core")
    dram_latency_cycles: Cycles = Field(0.0, description="one DRAM read transaction, issue to data")
    noc_latency_cycles: Cycles = Field(0.0, description="one core-to-core write transaction")
    comment: str = ""


class TileGrid(QuietDefaultsModel):
    """``rows × cols`` identical cores of one device, each with its own L1 and a share of the NoC.

    ``dram_banks`` / ``dram_readers_per_bank``: a weight DRAM-sharded over the banks is read and multiplied by
    worker cores placed next to each bank (tt-metal's DRAM-sharded matmul), so how many banks the device's
    DRAM has, and how many reader cores the runtime gives each, set how many cores such a matmul runs on
    (``perf.spatial_cost``). 0 banks: not modelled (a sharded weight is read like any 1-D split's)."""

    _quiet = ("dram_banks", "dram_readers_per_bank")

    rows: Annotated[int, Field(ge=1)]
    cols: Annotated[int, Field(ge=1)]
    clock_hz: Annotated[float, Field(gt=0)]
    tile: Annotated[int, Field(ge=1)] = Field(32, description="edge of the matrix engine's tile (elements)")
    matrix_flops_per_cycle: dict[DType, dict[MathFidelity, PerCycle]] = Field(
        min_length=1, description="per core: FLOP/cycle of the matrix engine by operand format and fidelity"
    )
    vector_flops_per_cycle: PerCycle = Field(description="per core: FLOP/cycle of the vector unit")
    l1_bytes: PositiveBytes = Field(description="per core L1 SRAM")
    l1_usable_bytes: PositiveBytes = Field(description="per core L1 left for an op's buffers")
    l1_bytes_per_cycle: PerCycle = Field(description="per core L1 bandwidth")
    movement: CoreDataMovement
    unpack_bytes_per_cycle: PerCycle | None = Field(
        None, description="bytes/cycle the unpackers feed the matrix engine; None: never the bound"
    )
    pack_bytes_per_cycle: PerCycle | None = Field(
        None, description="bytes/cycle the packers accumulate partial outputs into L1; None: never the bound"
    )
    mac_overhead_cycles: Cycles = Field(0.0, description="fixed cycles per tile multiply-accumulate")
    dst_tiles: Annotated[int, Field(ge=1)] = Field(8, description="output tiles the destination register holds")
    noc_link_bytes_per_cycle: PerCycle = Field(description="per NoC link, per direction")
    noc_hop_cycles: Cycles = Field(0.0, description="router-to-router latency")
    dram_banks: Annotated[int, Field(ge=0)] = Field(
        0, description="DRAM banks a width-sharded weight is spread over, one slice each; 0: not modelled"
    )
    dram_readers_per_bank: Annotated[int, Field(ge=1)] = Field(
        1, description="worker cores the DRAM-sharded matmul gives each bank (read its slice and compute it)"
    )
    comment: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> TileGrid:
        if self.l1_usable_bytes > self.l1_bytes:
            raise ValueError(f"l1_usable_bytes: {self.l1_usable_bytes:.0f} exceeds l1_bytes {self.l1_bytes:.0f}")
        for fmt, rates in self.matrix_flops_per_cycle.items():
            if not rates:
                raise ValueError(f"matrix_flops_per_cycle.{fmt.value}: give the rate of at least one fidelity")
        return self

    @property
    def cores(self) -> int:
        return self.rows * self.cols

    def format_of(self, dtype: DType | str) -> DType:
        """The listed format an operand of ``dtype`` runs as: itself, else bf16, else the first listed."""
        d = DType(dtype)
        if d in self.matrix_flops_per_cycle:
            return d
        return DType.bf16 if DType.bf16 in self.matrix_flops_per_cycle else next(iter(self.matrix_flops_per_cycle))

    def flops_per_cycle(self, dtype: DType | str, fidelity: MathFidelity | str) -> float:
        """Per-core matrix FLOP/cycle. A fidelity the table does not list runs at the one-pass rate divided by
        its passes (each pass is one trip through the multipliers), else at the slowest listed rate."""
        rates = self.matrix_flops_per_cycle[self.format_of(dtype)]
        fid = MathFidelity(fidelity)
        if fid in rates:
            return rates[fid]
        if MathFidelity.LoFi in rates:
            return rates[MathFidelity.LoFi] / fid.phases
        return min(rates.values())

    def peak(self, dtype: DType | str, fidelity: MathFidelity | str) -> float:
        """Matrix FLOP/s of the whole grid."""
        return self.cores * self.flops_per_cycle(dtype, fidelity) * self.clock_hz

    def vector_peak(self) -> float:
        return self.cores * self.vector_flops_per_cycle * self.clock_hz

    def tile_bytes(self, dtype: DType | str) -> float:
        """Bytes of one ``tile × tile`` block in ``dtype`` (bfp8: 1088 for 32 × 32)."""
        return dtype_bytes(dtype) * self.tile * self.tile

