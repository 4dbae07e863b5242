"""Elaboration: the hardware IR becomes a networkx graph of devices, switches and memory ports joined by
directed links, with hierarchical, cached routing. No Qt, no simpy."""

from tilewright.engine.hardware.elaborate import elaborate
from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.hardware.grow import grow
from tilewright.engine.hardware.model import Device, Link, MemoryPort

__all__ = ["Device", "HardwareGraph", "Link", "MemoryPort", "elaborate", "grow"]
