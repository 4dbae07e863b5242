"""The inspector reads each field of a component without dumping the whole hardware tree (on a large
project that dump, once per field and per refresh, was most of the GUI thread's work as it opened); what
it reads must still be exactly what the component's JSON dump holds at that path."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from tilewright.engine.io.presets import list_presets, load_project_preset  # noqa: E402
from tilewright.studio.tree_edit import get_field  # noqa: E402
from tilewright.studio.ui.inspector import props_for  # noqa: E402


def _components(root):
    yield root
    for child in root.children:
        yield from _components(child)


def _dumped(component, field):
    value = component.model_dump(mode="json")
    for key in field:
        value = value[key] if value is not None else None
    return value


@pytest.mark.parametrize("name", list_presets("projects"))
def test_every_inspector_field_reads_as_the_json_dump_holds_it(name):
    hardware = load_project_preset(name).hardware
    checked = 0
    for component in _components(hardware):
        for prop in props_for(component):
            assert get_field(component, prop.field) == _dumped(component, prop.field), (component.name, prop.field)
            checked += 1
    assert checked > 5


def test_enums_nested_fields_and_absent_parents():
    hardware = load_project_preset("palm-wafer-t18b").hardware
    tile = next(c for c in _components(hardware) if c.kind.value == "tile")
    assert get_field(tile, ("kind",)) == "tile"  # an enum reads as its JSON value
    assert tile.interconnect is None
    assert get_field(tile, ("interconnect", "topology")) is None  # no interconnect: the field reads None
    die = next(c for c in _components(hardware) if c.interconnect is not None)
    assert get_field(die, ("interconnect", "topology")) == die.interconnect.topology.value
