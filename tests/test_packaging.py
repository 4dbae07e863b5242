"""Packaging files, checked cheaply (PyInstaller itself runs only in `make package`): the spec parses and
bundles presets and icons behind the launcher, the launcher opens the studio by default, the desktop
entry and the app icon are valid."""

from __future__ import annotations

import ast
import configparser
import importlib.util
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"


def load_launcher():
    spec = importlib.util.spec_from_file_location("tilewright_launcher", PACKAGING / "launcher.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_spec_parses_and_bundles_presets_icons_and_the_launcher():
    text = (PACKAGING / "tilewright.spec").read_text()
    tree = ast.parse(text)
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert {"presets", "icons", "launcher.py", "tilewright"} <= strings
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert {"Analysis", "PYZ", "EXE", "COLLECT"} <= calls  # one-folder: COLLECT, not a one-file EXE
    assert (ROOT / "presets" / "projects").is_dir() and any((ROOT / "icons").glob("*.svg"))
    assert "packaging/tilewright.spec" in (ROOT / "Makefile").read_text()


@pytest.mark.parametrize(("argv", "expected"), [
    ([], ["studio"]),
    (["project.json"], ["studio", "project.json"]),
    (["--presentation", "p.json"], ["studio", "--presentation", "p.json"]),
    (["run", "p.json"], ["run", "p.json"]),
    (["studio", "--run"], ["studio", "--run"]),
    (["--version"], ["--version"]),
])
def test_launcher_opens_the_studio_unless_a_command_is_given(argv, expected):
    assert load_launcher().launch_args(argv) == expected


def test_desktop_entry_is_valid():
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # keys are case-sensitive in desktop entries
    parser.read(PACKAGING / "tilewright.desktop", encoding="utf-8")
    entry = parser["Desktop Entry"]
    assert entry["Type"] == "Application"
    for key in ("Name", "Exec", "Icon"):
        assert entry.get(key, "").strip()
    assert entry["Exec"].split()[0] == "tilewright"
    assert entry["Icon"] == "tilewright" and (PACKAGING / "tilewright.svg").is_file()
    assert entry.get("Terminal") == "false"
    assert all(c.endswith(";") for c in (entry["Categories"], entry["Keywords"], entry["MimeType"]))


def test_app_icon_is_an_svg():
    root = ET.parse(PACKAGING / "tilewright.svg").getroot()
    assert root.tag.endswith("svg") and root.get("viewBox")
