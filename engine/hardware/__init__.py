"""Elaboration: the hardware IR becomes a networkx graph of devices, switches and memory ports joined by
directed links, with hierarchical, cached routing. No Qt, no simpy."""

from engine.hardware.elaborate import elaborate
from engine.hardware.graph import HardwareGraph
from engine.hardware.grow import grow
from engine.hardware.model import Device, Link, MemoryPort

__all__ = ["Device", "HardwareGraph", "Link", "MemoryPort", "elaborate", "grow"]
