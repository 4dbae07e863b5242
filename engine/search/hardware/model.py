"""A parametric area and power model of a training accelerator, for hardware search (WHAM, Adnan et al.,
arXiv 2404.14632, §4: "the area and power of each candidate come from a parametric model").

A design is tensor cores (each a ``rows × cols`` systolic array of bf16 MACs with fp32 accumulation),
vector cores (128 fp32 lanes each), on-chip SRAM and HBM stacks, at one clock. The constants are 7 nm
estimates, derived as stated; they are order-of-magnitude figures for comparing designs against each
other under the same assumptions, not a sign-off model:

- MAC area and energy: Horowitz, "Computing's energy problem", ISSCC 2014, Fig. 1.1.9 (45 nm): fp16
  multiply 1,640 µm² / 1.1 pJ, fp32 add 4,184 µm² / 0.9 pJ. Scaled to 7 nm with the factors of
  Stillmaker & Baas, "Scaling equations ... 180 nm to 7 nm", Integration 2017 (area ×0.04, energy
  ×0.16 from 45 to 7 nm), then ×1.5 for the array's pipeline registers and operand wiring:
  3.5e-4 mm² and 0.45 pJ per MAC.
- Vector lane: fp32 multiply 7,700 µm² + add 4,184 µm² (Horowitz), same scaling → 4.8e-4 mm²; a core of
  128 lanes with register file and control ≈ 0.25 mm², 1.0 pJ per lane-operation.
- SRAM: TSMC N7 high-density bit cell 0.027 µm² (Jeong et al., IEDM 2017) → 0.23 mm²/MB of cells;
  with ~50 % array efficiency, 0.45 mm²/MB. Access 0.6 pJ/byte (Horowitz: 10 pJ per 64-bit read of an
  8 KB array at 45 nm, ×0.4 for 7 nm wires), charged at the arrays' operand rate.
- HBM2e stack: 460 GB/s (JEDEC JESD235C: 3.6 Gb/s × 1,024 bits), 16 GB; 3.9 pJ/bit for DRAM access and
  I/O (O'Connor et al., "Fine-Grained DRAM", MICRO 2017, HBM2); PHY and controller ≈ 15 mm² per stack
  (die-shot estimates of A100/MI200-class chips).
- Leakage 0.02 W/mm² (≈ 10 % of the ~0.2 W/mm² power density of 7 nm accelerators); uncore (NoC,
  control, chip-to-chip I/O) 10 % of the rest plus 20 mm².

TDP assumes every unit busy at once: MACs, vector lanes, SRAM at the arrays' operand rate, HBM at full
bandwidth, plus leakage — the thermal design point, not the average.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tilewright.engine.ir.hardware import Component, Compute, Memory

CLOCK_HZ = 1.0e9
MAC_AREA_MM2 = 3.5e-4
MAC_ENERGY_J = 0.45e-12
VECTOR_LANES = 128
VECTOR_CORE_AREA_MM2 = 0.25
LANE_ENERGY_J = 1.0e-12
SRAM_MM2_PER_MB = 0.45
SRAM_ENERGY_J_PER_BYTE = 0.6e-12
HBM_STACK_BW = 460e9
HBM_STACK_BYTES = 16e9
HBM_ENERGY_J_PER_BIT = 3.9e-12
HBM_PHY_MM2 = 15.0
LEAKAGE_W_PER_MM2 = 0.02
UNCORE_FRACTION = 0.10
UNCORE_FIXED_MM2 = 20.0
BF16_BYTES = 2


@dataclass(frozen=True, order=True)
class Design:
    pe_rows: int
    pe_cols: int
    tensor_cores: int
    vector_cores: int
    sram_mb: int
    hbm_stacks: int

    @property
    def macs(self) -> int:
        return self.pe_rows * self.pe_cols * self.tensor_cores

    @property
    def peak_flops(self) -> float:
        return 2.0 * self.macs * CLOCK_HZ

    @property
    def vector_flops(self) -> float:
        return 2.0 * VECTOR_LANES * self.vector_cores * CLOCK_HZ

    @property
    def hbm_bandwidth(self) -> float:
        return HBM_STACK_BW * self.hbm_stacks

    @property
    def hbm_bytes(self) -> float:
        return HBM_STACK_BYTES * self.hbm_stacks

    @property
    def sram_bytes(self) -> float:
        return self.sram_mb * 1e6

    def label(self) -> str:
        return (
            f"{self.tensor_cores}×{self.pe_rows}×{self.pe_cols} PE, {self.vector_cores} vec, "
            f"{self.sram_mb} MB SRAM, {self.hbm_stacks} HBM"
        )

    def as_json(self) -> dict:
        return asdict(self) | {"area_mm2": area_mm2(self), "tdp_w": tdp_w(self), "peak_tflops": self.peak_flops / 1e12}


def area_mm2(d: Design) -> float:
    core = d.macs * MAC_AREA_MM2 + d.vector_cores * VECTOR_CORE_AREA_MM2 + d.sram_mb * SRAM_MM2_PER_MB
    core += d.hbm_stacks * HBM_PHY_MM2
    return core * (1 + UNCORE_FRACTION) + UNCORE_FIXED_MM2


def tdp_w(d: Design) -> float:
    mac = d.macs * CLOCK_HZ * MAC_ENERGY_J
    vector = VECTOR_LANES * d.vector_cores * CLOCK_HZ * LANE_ENERGY_J
    # each array takes a row of A and a column of B per cycle from SRAM (bf16)
    sram = d.tensor_cores * (d.pe_rows + d.pe_cols) * BF16_BYTES * CLOCK_HZ * SRAM_ENERGY_J_PER_BYTE
    hbm = d.hbm_bandwidth * 8 * HBM_ENERGY_J_PER_BIT
    return mac + vector + sram + hbm + LEAKAGE_W_PER_MM2 * area_mm2(d)


def fits(d: Design, area_budget: float, power_budget: float) -> bool:
    return area_mm2(d) <= area_budget and tdp_w(d) <= power_budget


def to_component(d: Design, name: str = "accelerator") -> Component:
    """The design as a hardware component (one chip), e.g. to save and simulate it."""
    compute = Compute(
        peak_flops={"bf16": d.peak_flops, "fp16": d.peak_flops, "fp32": d.peak_flops / 4},
        vector_flops=d.vector_flops,
        pe_array=(d.pe_rows, d.pe_cols),
        tensor_cores=d.tensor_cores,
        vector_cores=max(d.vector_cores, 1),
        comment=f"hw-search design: {d.label()} at {CLOCK_HZ / 1e9:g} GHz",
    )
    memories = [
        Memory(name="sram", kind="sram", capacity_bytes=d.sram_bytes, bandwidth_bytes_per_s=d.tensor_cores
               * (d.pe_rows + d.pe_cols) * BF16_BYTES * CLOCK_HZ),
        Memory(name="hbm", kind="hbm", capacity_bytes=d.hbm_bytes, bandwidth_bytes_per_s=d.hbm_bandwidth),
    ]
    return Component(name=name, kind="chip", compute=compute, memories=memories, area_mm2=area_mm2(d),
                     power_w=tdp_w(d))
