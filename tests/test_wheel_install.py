"""A plain (non-editable) install runs what the README shows, from any directory, offline.

The project is copied (so a stale ``build/`` in the work tree cannot leak into the wheel), built into a wheel
with the test venv's setuptools (``--no-build-isolation --no-index``: no network), and installed with
``--no-deps`` into a fresh venv made without pip. Its dependencies come from the test venv through a plain
path line in a ``.pth`` file: ``site`` only appends such a line to ``sys.path`` and does not run the ``.pth``
files found there, so the test venv's editable finder (which maps ``tilewright`` to this work tree) stays
out; the first test proves it. Every check then goes through the installed ``tilewright`` command or the
fresh venv's interpreter in an empty directory, never through the work tree.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import tomllib
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_DIR = PYPROJECT["tool"]["setuptools"]["package-dir"]  # tilewright.engine -> engine, …
GPT_RUN = ["--system", "dgx-a100", "--model", "gpt", "--layers", "4", "--hidden", "1024", "--heads", "16",
           "--tp", "1", "--pp", "1", "--dp", "1", "--global-batch", "8", "--json"]


class Install:
    def __init__(self, base: Path):
        self.base = base
        self.src = base / "src"
        self.venv = base / "venv"
        self.bin = self.venv / "bin"
        self.work = base / "elsewhere"  # the directory every command runs in
        self.env = {k: v for k, v in os.environ.items()
                    if k not in {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONSAFEPATH"}}
        self.env |= {"PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONNOUSERSITE": "1",
                     "QT_QPA_PLATFORM": "offscreen", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}

    def run(self, argv: list[str], timeout: float = 180) -> subprocess.CompletedProcess:
        proc = subprocess.run(argv, cwd=self.work, env=self.env, capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0, f"{argv} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc

    def python(self, code: str):
        """Run ``code`` in the fresh venv; it prints one JSON value."""
        return json.loads(self.run([str(self.bin / "python"), "-c", code]).stdout)

    def tilewright(self, *args: str) -> str:
        return self.run([str(self.bin / "tilewright"), *args]).stdout


def copy_project(dest: Path) -> None:
    """What setuptools reads: pyproject, the readme, licence files and the mapped folders."""
    dest.mkdir()
    for path in ROOT.iterdir():
        if path.is_file() and (path.name in {"pyproject.toml", "README.md", "setup.cfg", "setup.py", "MANIFEST.in"}
                               or path.name.upper().startswith(("LICENSE", "LICENCE", "NOTICE", "COPYING"))):
            shutil.copy2(path, dest / path.name)
    for folder in set(PACKAGE_DIR.values()):
        shutil.copytree(ROOT / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


@pytest.fixture(scope="module")
def install(tmp_path_factory) -> Install:
    setuptools = version("setuptools")
    assert int(setuptools.split(".")[0]) >= 77, (
        f"setuptools {setuptools} cannot build this project offline (needs >= 77): install the test extras "
        "(`make test` does)")
    inst = Install(tmp_path_factory.mktemp("wheel-install"))
    inst.work.mkdir()
    copy_project(inst.src)
    inst.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
              "--wheel-dir", str(inst.base / "dist"), str(inst.src)])
    (inst.wheel,) = (inst.base / "dist").glob("tilewright-*.whl")
    inst.run([sys.executable, "-m", "venv", "--without-pip", str(inst.venv)])
    inst.purelib = Path(inst.python("import json, sysconfig; print(json.dumps(sysconfig.get_paths()['purelib']))"))
    # The test venv's site-packages as plain path lines: dependencies visible, its .pth files not run.
    dev_sites = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (inst.purelib / "_tilewright_test_deps.pth").write_text("".join(f"{p}\n" for p in dev_sites))
    inst.before = inst.python(
        "import importlib.util as u, json, sys; print(json.dumps({"
        "'tilewright': u.find_spec('tilewright') is not None, 'numpy': u.find_spec('numpy') is not None,"
        "'PySide6': u.find_spec('PySide6') is not None, 'editable_finder': [m for m in sys.modules if"
        " m.startswith('__editable__')], 'meta_path': [repr(f) for f in sys.meta_path]}))")
    inst.run([sys.executable, "-m", "pip", "--python", str(inst.bin / "python"), "install", "--quiet",
              "--no-deps", "--no-index", str(inst.wheel)])
    return inst


def test_the_fresh_venv_sees_the_dependencies_but_not_the_work_tree(install):
    """Before the wheel is installed, nothing named ``tilewright`` is importable: the test venv's editable
    finder was not run, so whatever the later tests import comes from the wheel."""
    before = install.before
    assert before["numpy"] and before["PySide6"], before
    assert not before["tilewright"], f"the fresh venv imports tilewright without the wheel: {before}"
    assert not before["editable_finder"], before
    assert not any("editable" in f.lower() for f in before["meta_path"]), before["meta_path"]


def test_the_wheel_installs_only_the_tilewright_namespace_with_presets_and_icons(install):
    names = zipfile.ZipFile(install.wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"tilewright", f"tilewright-{PYPROJECT['project']['version']}"
                                                ".dist-info"}
    # Every module, preset and icon of the (copied) tree is in the wheel, at its tilewright.* place.
    expected = set()
    for package, folder in PACKAGE_DIR.items():
        prefix = package.replace(".", "/")
        for pattern in ("**/*.py", "**/*.json", "**/*.svg"):
            expected |= {f"{prefix}/{p.relative_to(install.src / folder).as_posix()}"
                         for p in (install.src / folder).glob(pattern)}
    assert not expected - set(names), f"not in the wheel: {sorted(expected - set(names))}"
    assert any(n.startswith("tilewright/presets/projects/") and n.endswith(".json") for n in names)
    assert any(n.startswith("tilewright/presets/systems/") and n.endswith(".json") for n in names)
    assert any(n.startswith("tilewright/icons/") and n.endswith(".svg") for n in names)
    # Nothing but the namespace lands in site-packages (no top-level engine/ or studio/).
    installed = {p.name for p in install.purelib.iterdir()} - {"_tilewright_test_deps.pth", "__pycache__"}
    assert {n for n in installed if not n.endswith(".dist-info")} == {"tilewright"}, installed


def test_imports_resolve_inside_the_fresh_venv(install):
    found = install.python(
        "import importlib.util as u, json, importlib.resources as r, tilewright, tilewright.engine,"
        " tilewright.studio; print(json.dumps({'namespace': list(tilewright.__path__),"
        " 'engine': tilewright.engine.__file__, 'studio': tilewright.studio.__file__,"
        " 'top_engine': u.find_spec('engine') is not None, 'top_studio': u.find_spec('studio') is not None,"
        " 'projects': sorted(p.name for p in r.files('tilewright.presets').joinpath('projects').iterdir()),"
        " 'icons': sorted(p.name for p in r.files('tilewright.icons').iterdir() if p.name.endswith('.svg'))}))")
    for path in [*found["namespace"], found["engine"], found["studio"]]:
        assert Path(path).is_relative_to(install.purelib), f"{path} is not from the installed wheel"
        assert not Path(path).resolve().is_relative_to(ROOT)
    assert not found["top_engine"] and not found["top_studio"], found
    assert "gpt3-dgx-a100.json" in found["projects"]
    assert found["icons"] == sorted(p.name for p in (install.src / "icons").glob("*.svg"))


def test_presets_lists_every_preset(install):
    out = install.tilewright("presets")
    for kind in ("systems", "models", "projects"):
        assert f"{kind}:" in out
        for preset in (install.src / "presets" / kind).glob("*.json"):
            assert preset.stem in out, f"{kind} preset {preset.stem} not listed:\n{out}"


def test_run_gpt_on_dgx_a100(install):
    metrics = json.loads(install.tilewright("run", *GPT_RUN))
    assert metrics["devices"] == 1
    assert metrics["iteration_time_s"] > 0 and 0 < metrics["mfu"] < 1


def test_validate_and_studio_on_a_preset_project_inside_the_package(install):
    project = install.purelib / "tilewright" / "presets" / "projects" / "gpt3-dgx-a100.json"
    assert "valid project" in install.tilewright("validate", str(project))
    install.tilewright("studio", str(project), "--screenshot", "x.png")
    png = install.work / "x.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
