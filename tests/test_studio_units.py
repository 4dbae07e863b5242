"""Qt-free parts of the studio: units both ways, pure tree edits, labels with figures."""

from __future__ import annotations

import pytest
from tilewright.studio.samples import big_wafer_project, dgx_project, wafer_project
from tilewright.studio.summary import block_caption, interconnect_caption, key_figures, one_line
from tilewright.studio.templates import TEMPLATES, build_component
from tilewright.studio.tree_edit import (
    EditRefused,
    add_child,
    drop_keys,
    remove_children,
    rename_keys,
    set_field,
)
from tilewright.studio.units import (
    BYTES,
    BYTES_PER_S,
    COUNT,
    FLOPS,
    SECONDS,
    UnitError,
    format_bytes,
    format_value,
    parse_value,
)


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (2.039e12, BYTES_PER_S, "2.04 TB/s"),
        (312e12, FLOPS, "312 TFLOP/s"),
        (80e9, BYTES, "80 GB"),
        (999.9e9, BYTES, "1 TB"),  # rounds up a prefix rather than showing "1000 GB"
        (1e-6, SECONDS, "1 µs"),
        (5e-9, SECONDS, "5 ns"),
        (0.239, SECONDS, "239 ms"),
        (4e-19, SECONDS, "≈ 0 s"),
    ],
)
def test_format_value_carries_unit(value, unit, text):
    assert format_value(value, unit) == text


@pytest.mark.parametrize(
    ("text", "unit", "value"),
    [
        ("2 TB/s", BYTES_PER_S, 2e12),
        ("400 Gb/s", BYTES_PER_S, 50e9),  # bits are eighths of bytes
        ("80 GiB", BYTES, 80 * 2**30),
        ("1.5 us", SECONDS, 1.5e-6),
        ("10 ns", SECONDS, 10e-9),
        ("2e12", BYTES_PER_S, 2e12),
        ("1,024", COUNT, 1024),
    ],
)
def test_parse_value(text, unit, value):
    assert parse_value(text, unit) == pytest.approx(value)


@pytest.mark.parametrize(
    ("text", "unit", "reason"),
    [
        ("3 parsecs", BYTES, "unknown unit 'parsecs'"),
        ("fast", BYTES_PER_S, "not a number"),
        ("2.5", COUNT, "whole number"),
        ("5 ms", BYTES, "unknown unit 'ms'"),  # milli is only for units that go below one
    ],
)
def test_parse_value_refuses_with_reason(text, unit, reason):
    with pytest.raises(UnitError, match=reason):
        parse_value(text, unit)


def test_formatted_values_parse_back():
    for value, unit in [(2.039e12, BYTES_PER_S), (1.5e6, BYTES), (7e-9, SECONDS), (19.5e12, FLOPS)]:
        assert parse_value(format_value(value, unit, digits=6), unit) == pytest.approx(value)


def test_set_field_returns_new_validated_tree_and_leaves_old_one():
    hw = wafer_project().hardware
    new = set_field(hw, "wafer/die/tile", ("compute", "peak_flops", "bf16"), 8e12)
    assert new.find("wafer/die/tile").compute.peak_flops["bf16"] == 8e12
    assert hw.find("wafer/die/tile").compute.peak_flops["bf16"] == 4e12


def test_set_field_refusals_name_the_field():
    hw = wafer_project().hardware
    with pytest.raises(EditRefused, match=r"rows: must be ≥ 1"):
        set_field(hw, "wafer/die", ("rows",), 0)
    with pytest.raises(EditRefused, match="letters, digits"):
        set_field(hw, "wafer/die", ("name",), "a b")
    with pytest.raises(EditRefused, match="no component"):
        set_field(hw, "wafer/nope", ("rows",), 2)


def test_model_level_rule_refuses_edit_on_a_child():
    """Dims on the parent's interconnect must match the child count: the check lives on the parent."""
    hw = wafer_project().hardware
    hw = set_field(hw, "wafer", ("interconnect", "dims"), [2, 2])
    with pytest.raises(EditRefused, match="dims"):
        set_field(hw, "wafer/die", ("rows",), 3)


def test_add_child_renames_and_adds_interconnect_when_needed():
    hw = dgx_project().hardware.model_copy(update={"interconnect": None, "children": []})
    hw = hw.model_copy(update={"children": [build_component("chip")]})
    new, path = add_child(hw, "cluster", build_component("chip"))
    assert path == "cluster/chip_2"
    assert new.interconnect is not None  # two instances now need something joining them
    assert [c.name for c in new.children] == ["chip", "chip_2"]


def test_remove_children_refuses_to_leave_an_empty_non_device():
    hw = wafer_project().hardware
    with pytest.raises(EditRefused, match="compute"):
        remove_children(hw, ["wafer/die"])
    with pytest.raises(EditRefused, match="top-level"):
        remove_children(hw, ["wafer"])


def test_rename_and_drop_keys_follow_descendants():
    table = {"w": (0, 0), "w/die": (1, 1), "w/die/tile": (2, 2), "w/dies": (3, 3)}
    assert rename_keys(table, "w/die", "w/d") == {"w": (0, 0), "w/d": (1, 1), "w/d/tile": (2, 2), "w/dies": (3, 3)}
    assert drop_keys(table, ["w/die"]) == {"w": (0, 0), "w/dies": (3, 3)}


def test_labels_carry_units():
    gpu = dgx_project().hardware.find("cluster/node/gpu")
    hbm = gpu.memories[0].capacity_bytes  # 80 GB (decimal), shown in binary as every capacity is
    assert one_line(gpu) == f"gpu · chip · 312 TFLOP/s bf16 · {hbm / 2**30:.3g} GiB HBM"
    node = dgx_project().hardware.find("cluster/node")
    assert key_figures(node) == ["2.5 PFLOP/s bf16", f"{8 * hbm / 2**30:.3g} GiB HBM", "8 devices"]
    assert interconnect_caption(node.interconnect) == "switch · 300 GB/s per link · 1 µs"
    assert block_caption(big_wafer_project().hardware.children[0]) == "64 × 64 tiles"


def test_every_template_builds_a_valid_component():
    for t in TEMPLATES:
        if t.target == "child":
            comp = build_component(t.key)
            assert comp.name and comp.device_count() >= 0


@pytest.mark.parametrize(
    ("value", "text"),
    [(34359738368, "32 GiB"), (80e9, "80 GB"), (786432, "768 KiB"), (1.5e6, "1.5 MB"), (50331648, "48 MiB")],
)
def test_capacities_show_in_the_prefix_they_are_round_in(value, text):
    assert format_value(value, BYTES) == text
    assert parse_value(text, BYTES) == value


def test_display_shape_follows_interconnect_dims():
    from tilewright.engine.ir.hardware import Interconnect
    from tilewright.studio.ui.canvas.layout import GridShape, display_shape

    hw = dgx_project().hardware
    node = hw.children[0].model_copy(update={"rows": 1, "cols": 64})
    cube = hw.model_copy(update={
        "children": [node],
        "interconnect": Interconnect(topology="torus", link_bandwidth_bytes_per_s=50e9, dims=[4, 4, 4]),
    })
    shape = display_shape(cube, node)
    assert shape == GridShape(4, 4, planes=4)
    assert shape.locate(21) == (1, 1, 1)
    x0, _ = shape.cell_center(0)
    x16, _ = shape.cell_center(16)
    assert x16 - x0 == pytest.approx(shape.plane_stride)  # instance 16 opens the second plane
    assert display_shape(hw, hw.children[0]) == GridShape(2, 1)  # no dims: the component's own grid


def test_capacities_on_a_card_share_one_convention():
    """The DGX system's card read "16 TB DDR · 5 TiB HBM": a decimal-round and a binary-round capacity."""
    from tilewright.engine.io.presets import load_project_preset

    system = load_project_preset("gpt3-dgx-a100").hardware
    figures = key_figures(system)
    capacities = [f for f in figures if f.split()[-1] in {"DDR", "HBM", "SRAM", "GDDR"}]
    assert len(capacities) >= 2  # the case at hand: two kinds of memory on one line
    for figure in capacities:
        number, unit, _kind = figure.split()
        assert unit in {"KiB", "MiB", "GiB", "TiB", "PiB"}, figures
    # the figures are the instance's capacities, in binary units
    from tilewright.studio.summary import instance_memory

    for kind, size in instance_memory(system).items():
        assert any(f.endswith(f" {kind.upper()}") and f.startswith(format_bytes(size)) for f in capacities)
