"""Where an op's bytes live (``mapping.memory_levels``) and the memory time that placement implies.

Each category of state — weights, weight gradients, activations, the KV cache — sits in one *level*:
- ``sram``: the device's own SRAM. Nothing of it crosses a DRAM port; it costs SRAM bandwidth only.
- ``dram``: the device's DRAM — its own (HBM beside a GPU) or the DRAM ports of its die or wafer, reached
  over the NoC. Local DRAM is timed at its bandwidth; remote DRAM bytes become network flows.
- ``host``: a memory above the devices (a node's DDR, a wafer system's external memory), reached over each
  device's host link. Its bytes stream in (or out) on every pass, overlapped with the op, as weight
  offloading (ZeRO-Infinity, FlexGen) and weight streaming (Cerebras MemoryX) run.

Every byte an op touches still passes through SRAM when the device has one, so SRAM bandwidth is always a
bound, DRAM-less wafers included. When one operand of a matmul is resident on chip (SRAM weights, a fused
neighbour's output), it is the stationary one and the other operands stream from DRAM exactly once — the
tiling model's "resident" case for that operand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tilewright.engine.perf.device import DeviceModel
from tilewright.engine.perf.formats import OpFormats
from tilewright.engine.perf.tiling import matmul_traffic

Level = Literal["sram", "dram", "host"]
LEVELS: tuple[Level, ...] = ("sram", "dram", "host")  # fastest first
CATEGORIES = ("weights", "gradients", "optimizer", "activations", "kv_cache")


@dataclass(frozen=True)
class Residency:
    """The level of every category for one stage's devices, and each device's bandwidth to host memory."""

    levels: dict[str, Level] = field(default_factory=dict)
    host_bandwidth: float = float("inf")  # bytes/s per device; inf when there is no host level in use

    def at(self, category: str) -> Level:
        return self.levels.get(category, "dram")

    def __hash__(self) -> int:  # frozen with a dict field: hash what it says
        return hash((tuple(sorted(self.levels.items())), self.host_bandwidth))


@dataclass(frozen=True, slots=True)
class OpBytes:
    """Bytes one op moves on one device, by category. ``activations`` counts input reads, output writes
    and (backward) gradient reads/writes; ``fused`` is the part of it that a fused neighbour keeps on chip."""

    weights: float
    gradients: float
    activations: float
    kv_cache: float
    fused: float = 0.0

    @classmethod
    def of(
        cls, w: float, inp: float, out: float, cache: float, backward: bool, fused: tuple[bool, bool],
        formats: OpFormats | None, elem_bytes: float,
    ) -> OpBytes:
        """From per-device element counts (weights, input, output, KV-cache part of the input) in each
        tensor's format: a forward reads weights and input and writes the output; a backward reads
        weights, saved input and output gradient, writes input and weight gradients (the accounting of
        ``op_cost``). Weight gradients are written in the activations' (compute) format."""
        wb, ab, kb = (formats.weight_bytes, formats.activation_bytes, formats.kv_bytes) if formats else (
            elem_bytes, elem_bytes, elem_bytes)
        acts = inp + out + (inp if backward else 0.0) - cache
        fused_elems = (inp if fused[0] else 0.0) + (out if fused[1] else 0.0)
        return cls(w * wb, w * ab if backward else 0.0, acts * ab, cache * kb, fused_elems * ab)

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.activations + self.kv_cache

    def at(self, residency: Residency, level: Level) -> float:
        """Bytes of the categories that live at ``level`` (fused activations never leave the chip)."""
        out = 0.0
        for cat in ("weights", "gradients", "activations", "kv_cache"):
            if residency.at(cat) == level:
                out += getattr(self, cat)
        if residency.at("activations") == level and level != "sram":
            out -= self.fused
        return max(out, 0.0)


@dataclass(frozen=True, slots=True)
class MemoryCost:
    memory_s: float  # the slowest of SRAM, local DRAM and host streams (all overlapped with compute)
    dram_bytes: float  # to move to/from remote DRAM ports as network flows
    local_bytes: float  # moved to/from the device's own memory (its DRAM, else its SRAM)


def op_memory(
    dev: DeviceModel,
    b: OpBytes,
    residency: Residency | None,
    gemm: tuple[float, float, float] | None,
    elem_bytes: float,
    backward: bool,
    fused: tuple[bool, bool] = (False, False),
) -> tuple[MemoryCost, str]:
    """Memory time and remote-DRAM bytes of one op on ``dev`` (see the module docstring), and the dataflow
    the SRAM tiling model chose for a matmul streamed from remote DRAM ("" otherwise). ``gemm`` is the
    matmul's per-device (M, N, K); ``fused`` says its input / output stays on chip with a fused neighbour."""
    res = residency or Residency()
    sram_s = b.total / dev.sram_bandwidth
    host = b.at(res, "host")
    host_s = host / res.host_bandwidth if host else 0.0
    if dev.local_dram is not None:
        dram = b.at(res, "dram")
        return MemoryCost(max(dram / dev.local_dram.effective_bandwidth, sram_s, host_s), 0.0, dram), ""
    if dev.remote_dram is None:  # SRAM only, no DRAM at all: SRAM bandwidth is the bound (never 0)
        return MemoryCost(max(sram_s, host_s), 0.0, b.total), ""
    dataflow = ""
    if gemm is not None:
        acts_off = res.at("activations") != "dram"
        on_chip = (("a", fused[0] or acts_off), ("b", res.at("weights") != "dram"), ("c", fused[1] or acts_off))
        tiling = matmul_traffic(*gemm, dev.sram_bytes / elem_bytes, frozenset(x for x, on in on_chip if on))
        dram = tiling.dram_elems * (2.0 if backward else 1.0) * elem_bytes
        dataflow = tiling.dataflow
    else:
        dram = 0.0 if b.total <= dev.sram_bytes / 2 else b.at(res, "dram")
    return MemoryCost(max(sram_s, host_s), dram, b.total), dataflow
