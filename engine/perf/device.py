"""What the cost model needs to know about one device: peaks, and where its bytes live.

A device with local DRAM-class memory (HBM, DDR, GDDR, HMC) reads operands from it directly. A device whose
only local memory is SRAM (a wafer tile) keeps what fits and streams the rest from DRAM ports
reached over the NoC; the tiling model decides how many bytes that is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.common import DType
from tilewright.engine.ir.hardware import Compute, Memory, MemoryKind, RuntimeGraphs
from tilewright.engine.perf.formats import OpFormats, gemm_dtype


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
    # the framework calls PyTorch's SDPA, whose default kernel's rates are ``Compute.sdpa_flash``
    # (``plan.framework_host.attention_device`` sets it)
    sdpa_attention: bool = False

    @property
    def dram_bandwidth(self) -> float:
        """Local DRAM's achievable bandwidth; a remote memory's per-port figure (its flows are timed on the
        network instead); inf without DRAM (SRAM bandwidth then bounds memory time, ``perf.residency``)."""
        mem = self.local_dram or self.remote_dram
        return mem.effective_bandwidth if mem else float("inf")

    @property
    def stream_ramp_s(self) -> float:
        """What a memory-bound kernel large enough to fill the memory pipe loses once beyond its bytes at
        ``dram_bandwidth`` and the per-kernel floor (``Memory.stream_ramp_s`` of the local DRAM). The matrix
        kernels' counterpart is the efficiency curve's fixed part (``matmul_fill_s``), which already covers a
        memory-bound GEMM's start and drain: this is charged to the other kernels only (``op_cost``). 0 without
        local DRAM (an SRAM-only device's ports are timed as network flows)."""
        return self.local_dram.stream_ramp_s if self.local_dram is not None else 0.0

    def stream_s(self, nbytes: float) -> float:
        """Device time of one memory-bound kernel streaming ``nbytes`` through local DRAM, beyond the per-kernel
        floor. The delivered bandwidth rises linearly from nothing to ``dram_bandwidth`` over twice the ramp
        ``r`` (the first wave's loads wait a DRAM latency, requests in flight build up; the last wave drains
        the same way), which loses ``r`` against streaming at full rate from the start. With ``τ`` the
        bytes' time at full rate: a kernel still inside the rise (``τ < r``) takes ``2√(rτ)``, one past it
        ``τ + r`` — the published size sweeps' intercept for large kernels, and next to nothing beyond the
        floor for a kernel of a few KB (whose measured launch to launch is the floor). 0 when it moves
        none."""
        if nbytes <= 0:
            return 0.0
        tau, ramp = nbytes / self.dram_bandwidth, self.stream_ramp_s
        if tau >= ramp:
            return tau + ramp
        return 2.0 * math.sqrt(ramp * tau)

    @property
    def memory_capacity(self) -> float:
        """Bytes a device can hold for its own state (local DRAM, else SRAM plus its share of remote DRAM)."""
        if self.local_dram is not None:
            return self.local_dram.capacity_bytes
        return self.sram_bytes

    def matmul_peak(self, formats: OpFormats | None, weighted: bool) -> float:
        """Peak FLOP/s of a matrix op: the format it computes in (``formats.gemm_dtype``: fp8 GEMMs on the
        fp8 units, attention in the activations' format); the run's data type without formats. A format that
        reaches a lower share of its datasheet peak than the efficiency curve says (``Compute.format_efficiency``:
        fp8 on Hopper) has its peak scaled by that share."""
        dtype = self.dtype if formats is None else gemm_dtype(formats, weighted)
        peak = self.peak_flops if formats is None else self.compute.peak(dtype)
        return peak * self.compute.format_efficiency.get(DType(dtype), 1.0)

    def matmul_efficiency(self, flops: float) -> float:
        if self.compute.efficiency is None:
            return 1.0
        return float(self.compute.efficiency.at(flops))

    def matmul_fill_s(self, flops: float, peak: float) -> float:
        """The fixed part of a GEMM's time in the efficiency curve (launch, pipeline fill and drain): its time
        at the curve's efficiency minus its time at the curve's best efficiency. A memory-bound GEMM pays it
        too — the kernel starts and drains before and after it streams — so it is not hidden under memory."""
        return self.matmul_parts(flops, peak)[1]

    def matmul_parts(self, flops: float, peak: float) -> tuple[float, float]:
        """(throughput part, fixed part) of one GEMM kernel's time on the efficiency curve: they add up to
        its time at the curve's efficiency; the fixed part is ``matmul_fill_s``."""
        if flops <= 0:
            return 0.0, 0.0
        curve = self.compute.efficiency
        if curve is None:
            return flops / peak, 0.0
        at_curve = flops / (peak * float(curve.at(flops)))
        fill = max(0.0, at_curve - flops / (peak * self._best_efficiency))
        return at_curve - fill, fill

    def flash_parts(self, flops: float, peak: float, backward: bool, causal: bool = False) -> tuple[float, float]:
        """(throughput part, fixed part) of one fused (flash) attention kernel. The kernel's FLOPs are GEMMs
        interleaved with an online softmax on the same SMs (exponentials, row max and sum, rescaling) and, in
        the backward, atomic or separate reductions of dQ: at large sizes it reaches a lower fraction of the
        matrix peak than a plain GEMM (``Compute.flash_forward_efficiency`` / ``flash_backward_efficiency``,
        measured kernel rates; None: the GEMM curve's best). A ``causal`` (or sliding-window) kernel, costed
        over the tiles it computes (``Op.fused_flops``), is slower still per tile — its diagonal tiles are
        masked element by element and its query tiles carry unequal work — at its own measured rate when the
        device gives one (``Compute.flash_efficiency``). Which kernel: PyTorch SDPA's default when the framework
        calls it (``sdpa_attention``), else the one the ``flash_*`` fields measure. The fixed part — launch,
        pipeline fill and drain — is a GEMM kernel's of the same FLOPs (``matmul_parts``): the same machinery
        starts and drains."""
        throughput_s, fill_s = self.matmul_parts(flops, peak)
        rate = self.compute.flash_efficiency(backward, causal, self.sdpa_attention)
        if rate is None or flops <= 0:
            return throughput_s, fill_s
        return flops / (peak * rate), fill_s

    @cached_property
    def _best_efficiency(self) -> float:
        curve = self.compute.efficiency
        return max(y for _, y in curve.points) if curve is not None else 1.0


def issues_kernels(compute: Compute) -> bool:
    """Whether a host framework runs the device kernel by kernel (a GPU: ``host_dispatch_s`` set, or a
    runtime that replays graphs of those kernels); grids and wafers run an op as one program. Such a device
    pays per kernel: the gap between kernels (``plan.launch``) and each GEMM kernel's own fill
    (``op_cost.gemm_kernels``)."""
    return compute.grid is None and (compute.host_dispatch_s > 0 or compute.runtime_graphs is not RuntimeGraphs.none)


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
    """The ported memory (a die's DRAM ports on its edges or in its grid) of the device's closest owning
    ancestor, if any."""
    node = hw.devices[device].node
    best: tuple[int, Memory] | None = None
    for port in hw.memory_ports:
        if port.ctrl is not None and node.startswith(port.owner + "/"):
            if best is None or len(port.owner) > best[0]:
                best = (len(port.owner), port.memory)
    return best[1] if best else None


def shared_memory(hw: HardwareGraph, device: int, name: str) -> tuple[Memory, float] | None:
    """A memory called ``name`` that the device reaches but does not own, with the device's share of its
    capacity: ported DRAM (the closest owner's ports, split over the devices under that owner) or a
    memory of an ancestor that does not compute (a node's host DDR, split over the node's devices)."""
    node = hw.devices[device].node
    owners = [p for p in hw.memory_ports if p.memory.name == name and node.startswith(p.owner + "/")]
    if not owners:
        return None
    owner = max((p.owner for p in owners), key=len)
    ports = [p for p in owners if p.owner == owner]
    sharing = max(1, sum(1 for d in hw.devices if d.node.startswith(owner + "/")))
    return ports[0].memory, sum(p.capacity_bytes for p in ports) / sharing


def sharing_devices(hw: HardwareGraph, device: int, name: str) -> int:
    """Devices under the closest owner of the memory ``name`` that ``device`` reaches (1 if it owns it)."""
    node = hw.devices[device].node
    owners = [p.owner for p in hw.memory_ports if p.memory.name == name and node.startswith(p.owner + "/")]
    if not owners:
        return 1
    owner = max(owners, key=len)
    return max(1, sum(1 for d in hw.devices if d.node.startswith(owner + "/")))


def device_capacity(hw: HardwareGraph, device: int, dev: DeviceModel) -> float:
    """Bytes a device can hold: its local DRAM, else its SRAM plus a fair share of the ported DRAM that
    the devices under the same owner (e.g. the tiles of one die) share."""
    if dev.local_dram is not None:
        return dev.local_dram.capacity_bytes
    if dev.remote_dram is None:
        return dev.sram_bytes
    share = shared_memory(hw, device, dev.remote_dram.name)
    return dev.sram_bytes + (share[1] if share else 0.0)
