"""Packaging, checked cheaply (PyInstaller itself runs only in `make package`; the wheel is built and
installed in tests/test_wheel_install.py): pyproject's package list is the tree's packages, every code
folder is a package, the spec parses and bundles presets and icons behind the launcher, the launcher opens
the studio by default, the desktop entry and the app icon are valid."""

from __future__ import annotations

import ast
import configparser
import importlib.util
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
CODE_FOLDERS = ("engine", "studio")  # the folders holding the project's modules
# Data shipped as package data, read with importlib.resources: folder -> file patterns.
DATA_FOLDERS = {"presets": ("*.json",), "icons": ("*.svg",)}


def folders(top: Path):
    """``top`` and every folder below it, caches left out."""
    yield top
    for path in sorted(top.rglob("*")):
        if path.is_dir() and "__pycache__" not in path.parts:
            yield path


def package_name(folder: Path) -> str:
    """The import name a source folder installs as, through pyproject's package-dir."""
    top = folder.relative_to(ROOT).parts[0]
    names = [name for name, path in SETUPTOOLS["package-dir"].items() if path == top]
    assert names, f"{top}/ is not mapped in [tool.setuptools] package-dir"
    return ".".join([names[0], *folder.relative_to(ROOT / top).parts])


def test_package_dir_maps_the_design_card_folders_under_tilewright():
    assert SETUPTOOLS["package-dir"] == {f"tilewright.{top}": top for top in (*CODE_FOLDERS, *DATA_FOLDERS)}


def test_every_code_folder_is_a_package():
    """A folder of modules without __init__.py is a namespace package: tests that walk packages (no Qt in
    the engine, the import layers) skip it silently, and the package list below would not see it."""
    missing = [
        str(folder.relative_to(ROOT))
        for top in CODE_FOLDERS
        for folder in folders(ROOT / top)
        if any(folder.rglob("*.py")) and not (folder / "__init__.py").is_file()
    ]
    assert not missing, f"folders holding modules without an __init__.py: {missing}"


def test_pyproject_packages_are_exactly_the_packages_of_the_tree():
    """setuptools installs only the listed packages: a subpackage missing from the list is missing from the
    wheel (while the editable install still finds it), one listed but gone fails the build."""
    expected = {
        package_name(folder)
        for top in CODE_FOLDERS
        for folder in folders(ROOT / top)
        if (folder / "__init__.py").is_file()
    }
    for top, patterns in DATA_FOLDERS.items():
        assert (ROOT / top / "__init__.py").is_file(), f"{top}/ must be a package for importlib.resources"
        expected |= {
            package_name(folder)
            for folder in folders(ROOT / top)
            if (folder / "__init__.py").is_file() or any(any(folder.glob(p)) for p in patterns)
        }
    listed = SETUPTOOLS["packages"]
    assert len(listed) == len(set(listed)), "a package is listed twice"
    assert set(listed) == expected, (
        f"missing from [tool.setuptools] packages: {sorted(expected - set(listed))}; "
        f"listed but not in the tree: {sorted(set(listed) - expected)}"
    )


def test_every_data_file_is_package_data():
    package_data = SETUPTOOLS["package-data"]
    for top, patterns in DATA_FOLDERS.items():
        for folder in folders(ROOT / top):
            files = [f for p in patterns for f in folder.glob(p)]
            if files:
                declared = package_data.get(package_name(folder), [])
                assert set(patterns) <= set(declared), f"{folder.relative_to(ROOT)}: package-data lacks {patterns}"


def load_launcher():
    spec = importlib.util.spec_from_file_location("tilewright_launcher", PACKAGING / "launcher.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_spec_parses_and_bundles_the_installed_package_behind_the_launcher():
    text = (PACKAGING / "tilewright.spec").read_text()
    tree = ast.parse(text)
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    packages = {"tilewright.presets", "tilewright.icons", "tilewright.engine", "tilewright.studio"}
    assert packages | {"launcher.py"} <= strings
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert {"Analysis", "PYZ", "EXE", "COLLECT"} <= calls  # one-folder: COLLECT, not a one-file EXE
    assert {"collect_data_files", "collect_submodules"} <= calls  # from the installed package, not the tree
    assert (PACKAGING / "launcher.py").is_file()


def make_recipe(target: str) -> str:
    """The commands of one Makefile target."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    recipe = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return "\n".join(recipe)


def test_make_package_bundles_a_wheel_install_not_the_editable_one():
    """PyInstaller does not follow an editable install's import hook: `make package` builds a wheel, installs
    it into a venv of its own and runs that venv's PyInstaller on the spec."""
    recipe = make_recipe("package")
    assert "pip wheel" in recipe and "packaging/tilewright.spec" in recipe
    assert " -e " not in recipe and "$(BIN)/" not in recipe, recipe
    assert "$(PKG_VENV)/bin/pyinstaller" in recipe


def test_make_test_runs_everything_and_test_fast_leaves_out_slow():
    (pytest,) = [line for line in make_recipe("test").splitlines() if "-m pytest" in line]
    assert pytest.endswith("-m pytest"), pytest  # CI runs the slow tests too: no marker filter, no -k
    assert '-m "not slow"' in make_recipe("test-fast")
    assert "packaging" in make_recipe("lint").split("ruff check", 1)[1]
    assert "-m tilewright.studio.qt_probe" in make_recipe("studio")
    assert "make test" in (ROOT / ".ci" / "run").read_text()


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
