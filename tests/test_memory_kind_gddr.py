"""``MemoryKind.gddr``: Tenstorrent's Wormhole (n150: 12 GB) and Blackhole (p150: 32 GB) boards carry
GDDR6, which the presets used to call "ddr", so the studio printed "12 GiB DDR" for a GDDR6 board. The kind
is a label: a gddr memory must be DRAM-class wherever the engine sorts memories (residency, device model,
captions) and give the same numbers as the "ddr" it replaces; old files saying "ddr" must load and save
back unchanged."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import list_presets, load_system, preset_path
from tilewright.engine.io.project_file import project_from_data, project_to_text
from tilewright.engine.ir.common import DType
from tilewright.engine.ir.hardware import Component, Memory, MemoryKind
from tilewright.engine.perf.device import device_model, remote_memory
from tilewright.engine.plan.residency import available_levels, home_level
from tilewright.engine.simulate import simulate
from tilewright.studio.summary import key_figures, memory_caption
from tilewright.studio.units import BYTES, format_value

N150_PROJECT = "wormhole-n150-llama2-7b-inference"
DRAM_KINDS = [k for k in MemoryKind if k is not MemoryKind.sram]
TENSTORRENT = [n for n in list_presets("systems") if n.startswith(("wormhole-", "blackhole-"))]


def with_kind(data: dict, old: str, new: str) -> dict:
    """``data`` (a system or project dict) with every memory of kind ``old`` relabelled ``new``."""
    return json.loads(json.dumps(data).replace(f'"kind": "{old}"', f'"kind": "{new}"'))


def project_data() -> dict:
    return json.loads(preset_path("projects", N150_PROJECT).read_text())


def test_gddr_round_trips_through_json():
    m = Memory(name="gddr6", kind="gddr", capacity_bytes=12 * 2**30, bandwidth_bytes_per_s=288e9)
    data = m.model_dump(mode="json")
    assert data["kind"] == "gddr"
    back = Memory.model_validate(json.loads(json.dumps(data)))
    assert back.kind is MemoryKind.gddr and back == m


def test_old_ddr_project_loads_and_saves_back_unchanged():
    # the n150 project file as it was saved before GDDR existed: its GDDR6 memory said "ddr"
    old_text = preset_path("projects", N150_PROJECT).read_text().replace('"kind": "gddr"', '"kind": "ddr"')
    assert '"kind": "ddr"' in old_text
    project = project_from_data(json.loads(old_text), "old n150")
    assert project_to_text(project) == old_text
    kinds = {m.kind for _, c in project.hardware.walk() for m in c.memories}
    assert MemoryKind.ddr in kinds and MemoryKind.gddr not in kinds


@pytest.mark.parametrize("name", TENSTORRENT)
def test_tenstorrent_gddr6_memories_are_gddr(name):
    system = load_system(name)
    memories = [m for _, c in system.walk() for m in c.memories]
    gddr6 = [m for m in memories if "GDDR6" in m.comment]
    assert gddr6, "every Wormhole/Blackhole preset has GDDR6 beside its chips"
    assert all(m.kind is MemoryKind.gddr for m in gddr6)
    # only GDDR6 is labelled gddr (a host DDR, if a preset ever adds one, stays ddr)
    assert all("GDDR6" in m.comment for m in memories if m.kind is MemoryKind.gddr)


def chip_levels(system: Component) -> tuple[dict, str]:
    hw = elaborate(system)
    d = hw.devices[0]
    dev = device_model(d.compute, d.memories, remote_memory(hw, 0), DType.bf16)
    return available_levels(hw, 0, dev), home_level(dev)


@pytest.mark.parametrize("kind", DRAM_KINDS)
def test_every_dram_kind_is_a_dram_level_like_gddr(kind):
    n150 = load_system("wormhole-n150")
    gddr_levels, gddr_home = chip_levels(n150)
    assert gddr_levels["gddr6"].level == "dram" and gddr_home == "dram"
    relabelled = Component.model_validate(with_kind(n150.model_dump(mode="json"), "gddr", kind.value))
    levels, home = chip_levels(relabelled)
    assert levels == gddr_levels and home == gddr_home


def test_sram_is_not_a_dram_level():
    # the contrast that makes the test above meaningful: the kind does decide sram against dram
    n150 = load_system("wormhole-n150")
    as_sram = Component.model_validate(with_kind(n150.model_dump(mode="json"), "gddr", "sram"))
    levels, _ = chip_levels(as_sram)
    assert levels["gddr6"].level == "sram"


def test_n150_caption_says_gddr():
    n150 = load_system("wormhole-n150")
    chip = next(c for _, c in n150.walk() if c.memories)
    gddr6 = next(m for m in chip.memories if m.name == "gddr6")
    size = format_value(gddr6.capacity_bytes, BYTES)
    figures = key_figures(n150)
    assert f"{size} GDDR" in figures
    assert f"{size} DDR" not in figures
    assert " · GDDR · " in memory_caption(gddr6)


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_n150_numbers_identical_with_ddr_or_gddr(engine):
    """The relabelling changes no number: the n150 project with its memory called "ddr" (as before) runs
    exactly as with "gddr"."""
    runs = {}
    for kind in ("gddr", "ddr"):
        data = with_kind(project_data(), "gddr", kind)
        data["run"]["engine"] = engine
        runs[kind] = simulate(project_from_data(data, kind), series=False)
    new, old = runs["gddr"], runs["ddr"]
    assert new.iteration_time_s == old.iteration_time_s
    assert new.ttft_s == old.ttft_s and new.tpot_s == old.tpot_s
    assert new.peak_memory_bytes == old.peak_memory_bytes
    assert new.memory_breakdown_bytes == old.memory_breakdown_bytes
    assert new.time_breakdown_s == old.time_breakdown_s
