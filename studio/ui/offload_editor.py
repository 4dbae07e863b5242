"""Offloading state to host memory, as the workload dock edits it: one check box per category (weights,
gradients, optimizer state, activations) that puts it in the node's host memory
(``mapping.memory_levels[category] = "host"``) or brings it back to the device.

The host memory is the one the engine can reach over a host link: a memory of a component that does not
compute, with ``host_link_bandwidth_bytes_per_s`` set (``engine.plan.residency.available_levels`` refuses one
without it); ``host_memory`` finds it in the hardware tree, so the box names it with its link's bandwidth.
Categories the mapping puts elsewhere (an SRAM, ``auto``) are kept as they are; only the host's entries
change. The editor hands the whole new ``memory_levels`` to the options group, which pushes it as one undo
command (``MappingOptions.set_option``) after the engine's check.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QCheckBox, QGridLayout, QWidget
from tilewright.engine.ir.hardware import Component
from tilewright.studio.ui.fields import Check, _Editor
from tilewright.studio.units import BYTES_PER_S, format_value

OFFLOAD_CATEGORIES = ("weights", "gradients", "optimizer", "activations")  # what training can offload
COLUMNS = 2


def host_memory(hardware: Component) -> tuple[str, float] | None:
    """(name, host link bandwidth in B/s) of the first memory above the devices that they reach over a host
    link, or None when the hardware has none (nothing to offload to)."""
    for _path, component in hardware.walk():
        if component.compute is not None:
            continue
        for memory in component.memories:
            link = memory.host_link_bandwidth_bytes_per_s
            if link:
                return memory.name, float(link)
    return None


def offload_text(host: tuple[str, float] | None) -> str:
    """The row's label: "offload to host (50 GB/s link)"."""
    if host is None:
        return "offload to host memory"
    return f"offload to {host[0]} ({format_value(host[1], BYTES_PER_S)} link)"


def with_offload(levels: dict[str, str], host: str, category: str, on: bool) -> dict[str, str]:
    """``levels`` with ``category`` moved to ``host`` (on) or back to the device (off: its entry removed
    when it named the host; a category the mapping put elsewhere is left alone)."""
    out = dict(levels)
    if on:
        out[category] = host
    elif out.get(category) == host:
        del out[category]
    return out


class OffloadEditor(_Editor):
    """The check boxes; ``value`` is the mapping's whole ``memory_levels``."""

    def __init__(self, value: dict[str, str], host: str | None, check: Check, parent: QWidget | None = None):
        super().__init__(check, parent)
        self.host = host
        self.value = dict(value)
        grid = QGridLayout()
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(8)
        self.boxes: dict[str, QCheckBox] = {}
        for i, category in enumerate(OFFLOAD_CATEGORIES):
            box = QCheckBox(category, self)
            box.clicked.connect(lambda on, c=category: self._on_clicked(c, on))
            grid.addWidget(box, i // COLUMNS, i % COLUMNS)
            self.boxes[category] = box
        self._box.addLayout(grid)
        self._box.addWidget(self.error_label)
        self.set_value(value)

    def set_value(self, value: dict[str, str]) -> None:
        self.value = dict(value)
        for category, box in self.boxes.items():
            box.setChecked(self.host is not None and self.value.get(category) == self.host)

    def offloaded(self) -> list[str]:
        return [c for c, box in self.boxes.items() if box.isChecked()]

    def _on_clicked(self, category: str, on: bool) -> None:
        if self.host is None:
            return
        new = with_offload(self.value, self.host, category, on)
        reason = self.check(new)
        if reason:
            self.boxes[category].setChecked(not on)
            self.show_error(reason)
            return
        self.show_error(None)
        self.committed.emit(new)

    def set_offload(self, category: str, on: bool) -> None:
        """What a user does: tick or clear one box (tests and scripted demos)."""
        self.boxes[category].setChecked(on)
        self._on_clicked(category, on)


def offload_undo_text(value: Any, host: str | None) -> str:
    """"Offload optimizer, weights to host" / "Keep every category on the device"."""
    moved = [c for c in OFFLOAD_CATEGORIES if host is not None and (value or {}).get(c) == host]
    return f"Offload {', '.join(moved)} to {host}" if moved else "Keep every category on the device"
