"""The studio's hardware captions state the memory the engine uses: the capacities of the elaborated
graph's memory ports, which ``device_capacity`` shares out among the devices. Before, an edge memory
counted once however many ports it had: half of palm-wafer's DRAM, 1/16 of the 64 × 64 wafer's."""

from __future__ import annotations

import pytest
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import list_presets, load_system
from tilewright.engine.ir.common import DType
from tilewright.engine.perf.device import device_capacity, device_model, remote_memory
from tilewright.studio.summary import instance_memory, key_figures, own_ports
from tilewright.studio.units import BYTES, format_bytes, format_value


def engine_memory(system) -> dict[str, float]:
    out: dict[str, float] = {}
    for port in elaborate(system).memory_ports:
        out[port.memory.kind.value] = out.get(port.memory.kind.value, 0.0) + port.capacity_bytes
    return out


@pytest.mark.parametrize("name", ["palm-wafer", "wafer-64x64"])
def test_caption_memory_is_what_the_engine_gives_the_devices(name):
    system = load_system(name)
    shown = instance_memory(system)
    assert shown == pytest.approx(engine_memory(system))
    for kind, size in shown.items():
        assert f"{format_bytes(size)} {kind.upper()}" in key_figures(system)  # capacities in binary units
    # the capacity a run checks against, device by device (the presets' devices are alike)
    hw = elaborate(system)
    n = len(hw.devices)
    capacities = set()
    for i in (0, n // 2, n - 1):
        d = hw.devices[i]
        dev = device_model(d.compute, d.memories, remote_memory(hw, i), DType.bf16)
        capacities.add(round(device_capacity(hw, i, dev)))
    assert len(capacities) == 1
    assert n * capacities.pop() == pytest.approx(sum(shown.values()), rel=1e-9)


@pytest.mark.parametrize("name", list_presets("systems"))
def test_every_preset_caption_agrees_with_the_engine(name):
    system = load_system(name)
    assert instance_memory(system) == pytest.approx(engine_memory(system))


def test_nested_levels_and_edge_memory_ports():
    system = load_system("palm-wafer")
    die = next(c for _, c in system.walk() if any(m.attach for m in c.memories))
    dram = next(m for m in die.memories if m.attach)
    one_die = die.model_copy(update={"rows": 1, "cols": 1})
    ports = [p for p in elaborate(one_die).memory_ports if p.memory.name == dram.name]
    assert own_ports(die, dram) == len(ports) > 1
    assert instance_memory(die)[dram.kind.value] == pytest.approx(len(ports) * dram.capacity_bytes)


def test_canvas_frame_caption_counts_every_port():
    from tilewright.studio.ui.canvas.frame import frame_lines

    system = load_system("wafer-64x64")
    dram = next(m for m in system.memories if m.attach)
    hbm = engine_memory(system)[dram.kind.value]
    text = "\n".join(frame_lines(system))
    assert f"{format_value(hbm, BYTES)} {dram.kind.value.upper()}" in text
    assert f"{own_ports(system, dram)} ports × {format_value(dram.capacity_bytes, BYTES)}" in text
