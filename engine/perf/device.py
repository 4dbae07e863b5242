"""What the cost model needs to know about one device: peaks, and where its bytes live.

A device with local DRAM-class memory (HBM, DDR, HMC) reads operands from it directly. A device whose
only local memory is SRAM (a wafer tile) keeps what fits and streams the rest from DRAM ports
reached over the NoC; the tiling model decides how many bytes that is.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.common import DType
from tilewright.engine.ir.hardware import Compute, Memory, MemoryKind


@dataclass(frozen=True)
class DeviceModel:
    compute: Compute
    dtype: DType
    peak_flops: float
    vector_flops: float
    sram_bytes: float
    sram_bandwidth: float
    local_dram: Memory | None
    remote_dram: Memory | None  # an edge-attached memory reached over the interconnect

    @property
    def dram_bandwidth(self) -> float:
        mem = self.local_dram or self.remote_dram
        return mem.effective_bandwidth if mem else float("inf")

    @property
    def memory_capacity(self) -> float:
        """Bytes a device can hold for its own state (local DRAM, else SRAM plus its share of remote DRAM)."""
        if self.local_dram is not None:
            return self.local_dram.capacity_bytes
        return self.sram_bytes

    def matmul_efficiency(self, flops: float) -> float:
        if self.compute.efficiency is None:
            return 1.0
        return float(self.compute.efficiency.at(flops))


def device_model(
    compute: Compute, local: list[Memory] | tuple[Memory, ...], remote: Memory | None, dtype: DType
) -> DeviceModel:
    sram = [m for m in local if m.kind is MemoryKind.sram]
    dram = [m for m in local if m.kind is not MemoryKind.sram]
    return DeviceModel(
        compute=compute,
        dtype=dtype,
        peak_flops=compute.peak(dtype),
        vector_flops=compute.vector_peak(),
        sram_bytes=sum(m.capacity_bytes for m in sram),
        sram_bandwidth=sum(m.effective_bandwidth for m in sram) or float("inf"),
        local_dram=max(dram, key=lambda m: m.capacity_bytes) if dram else None,
        remote_dram=remote if not dram else None,
    )


def remote_memory(hw: HardwareGraph, device: int) -> Memory | None:
    """The edge-attached memory (e.g. a die's DRAM ports) of the device's owning ancestor, if any."""
    node = hw.devices[device].node
    for port in hw.memory_ports:
        if port.edge is not None and node.startswith(port.owner + "/"):
            return port.memory
    return None


def device_capacity(hw: HardwareGraph, device: int, dev: DeviceModel) -> float:
    """Bytes a device can hold: its local DRAM, else its SRAM plus a fair share of the edge DRAM that the
    devices under the same owner (e.g. the tiles of one die) share."""
    if dev.local_dram is not None:
        return dev.local_dram.capacity_bytes
    node = hw.devices[device].node
    owners = {p.owner for p in hw.memory_ports if p.edge is not None and node.startswith(p.owner + "/")}
    if not owners:
        return dev.sram_bytes
    owner = max(owners, key=len)
    ports = [p for p in hw.memory_ports if p.owner == owner and p.edge is not None]
    sharing = sum(1 for d in hw.devices if d.node.startswith(owner + "/"))
    return dev.sram_bytes + sum(p.capacity_bytes for p in ports) / max(sharing, 1)
