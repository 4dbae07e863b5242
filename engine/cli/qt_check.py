"""Can Qt open a window here? Explain why not in words a user can act on (Debian/Ubuntu package names).

Importing PySide6 proves little: the platform plugin (``xcb`` on an X11 desktop) is loaded only when the
first ``QGuiApplication`` starts, and when it cannot load, Qt aborts the process (exit 134) with its own
message. So ``probe_qt`` starts one in a child process, with the environment the studio will have (the
same ``QT_QPA_PLATFORM``, ``DISPLAY``…), and on failure reads Qt's message and the plugin's ``ldd`` for
the missing libraries, and names the Debian packages that hold them. No Qt is imported here.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

QT_DEBIAN_PACKAGES = "libegl1 libgl1 libxkbcommon0 libfontconfig1 libdbus-1-3 libglib2.0-0"
# The X11 (xcb) platform plugin's own libraries, beyond the ones above: what a desktop lacking them needs.
XCB_DEBIAN_PACKAGES = (
    "libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-render-util0 libxcb-xkb1 "
    "libxkbcommon-x11-0 libxcb-randr0 libxcb-shape0 libxcb-xinerama0 libxcb-xinput0"
)
PROBE_TIMEOUT_S = 60.0

# soname (without its version) → Debian package. The usual libraries Qt's platform plugins link to.
LIBRARY_PACKAGES = {
    "libxcb-cursor": "libxcb-cursor0",
    "libxcb-icccm": "libxcb-icccm4",
    "libxcb-keysyms": "libxcb-keysyms1",
    "libxcb-image": "libxcb-image0",
    "libxcb-render-util": "libxcb-render-util0",
    "libxcb-xkb": "libxcb-xkb1",
    "libxcb-randr": "libxcb-randr0",
    "libxcb-shape": "libxcb-shape0",
    "libxcb-shm": "libxcb-shm0",
    "libxcb-sync": "libxcb-sync1",
    "libxcb-xfixes": "libxcb-xfixes0",
    "libxcb-xinerama": "libxcb-xinerama0",
    "libxcb-xinput": "libxcb-xinput0",
    "libxcb-render": "libxcb-render0",
    "libxcb-glx": "libxcb-glx0",
    "libxcb-util": "libxcb-util1",
    "libxcb": "libxcb1",
    "libX11-xcb": "libx11-xcb1",
    "libX11": "libx11-6",
    "libXext": "libxext6",
    "libXrender": "libxrender1",
    "libXi": "libxi6",
    "libSM": "libsm6",
    "libICE": "libice6",
    "libxkbcommon-x11": "libxkbcommon-x11-0",
    "libxkbcommon": "libxkbcommon0",
    "libEGL": "libegl1",
    "libGL": "libgl1",
    "libGLX": "libglx0",
    "libOpenGL": "libopengl0",
    "libfontconfig": "libfontconfig1",
    "libfreetype": "libfreetype6",
    "libdbus-1": "libdbus-1-3",
    "libglib-2.0": "libglib2.0-0",
    "libgthread-2.0": "libglib2.0-0",
    "libgobject-2.0": "libglib2.0-0",
    "libwayland-client": "libwayland-client0",
    "libwayland-cursor": "libwayland-cursor0",
    "libwayland-egl": "libwayland-egl1",
    "libmtdev": "libmtdev1",
    "libinput": "libinput10",
    "libudev": "libudev1",
    "libdrm": "libdrm2",
    "libgbm": "libgbm1",
}

# The child: start the platform plugin the studio would, and say which one it was.
_CHILD = (
    "import sys\n"
    "from PySide6.QtGui import QGuiApplication\n"
    "app = QGuiApplication(sys.argv[:1])\n"
    "print(app.platformName())\n"
)
_NOT_FOUND = re.compile(r"^\s*(\S+)\s*=>\s*not found", re.MULTILINE)
_QT_NEEDS = re.compile(r"(\S+) or (lib\S+) is needed to load the Qt (\S+) platform plugin")
_PLUGIN = re.compile(r'Qt platform plugin "([^"]+)"')


def explain_qt_import_error(exc: BaseException) -> str:
    text = str(exc)
    if "No module named" in text and "PySide6" in text:
        return "tilewright: PySide6 is not installed; run `make studio` (it installs the project into .venv)."
    named = debian_packages(re.findall(r"(lib[\w.+-]+\.so[\w.]*)", text))
    extra = "".join(f" {p}" for p in named if p not in QT_DEBIAN_PACKAGES.split())
    return (
        f"tilewright: Qt could not load ({text}).\n"
        f"Qt needs these system libraries; on Debian/Ubuntu install them with:\n"
        f"  sudo apt-get install {QT_DEBIAN_PACKAGES}{extra}"
    )


def missing_libraries(ldd_output: str) -> list[str]:
    """Libraries ``ldd`` reports as "not found", each once, in order."""
    return list(dict.fromkeys(_NOT_FOUND.findall(ldd_output)))


def debian_package(library: str) -> str:
    """The Debian package of a shared library ("libxcb-icccm.so.4" → "libxcb-icccm4"): from the table,
    else by Debian's naming rule (soname plus version; a hyphen when the name ends in a digit)."""
    name = Path(library).name
    base, _, version = name.partition(".so")
    version = version.lstrip(".").split(".")[0]
    if base in LIBRARY_PACKAGES:
        return LIBRARY_PACKAGES[base]
    pkg = base.lower()
    if version:
        pkg += ("-" if pkg[-1].isdigit() else "") + version
    return pkg


def debian_packages(libraries: list[str]) -> list[str]:
    return list(dict.fromkeys(debian_package(lib) for lib in libraries))


def qt_named_packages(qt_message: str) -> list[str]:
    """Packages Qt itself names ("From 6.5.0, xcb-cursor0 or libxcb-cursor0 is needed…"). Qt prints that
    hint whenever the xcb plugin fails, for whatever reason: check with ``installed`` before believing it."""
    return list(dict.fromkeys(m.group(2) for m in _QT_NEEDS.finditer(qt_message)))


def installed(package: str) -> bool | None:
    """Whether the library a package holds loads here (None: not a package this table knows)."""
    base = next((b for b, p in LIBRARY_PACKAGES.items() if p == package), None)
    version = re.search(r"(\d+)$", package)
    if base is None or version is None:
        return None
    try:
        ctypes.CDLL(f"{base}.so.{version.group(1)}")
    except OSError:
        return False
    return True


def plugin_file(platform: str) -> Path | None:
    """PySide6's plugin for ``platform`` (found without importing Qt)."""
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        path = Path(root) / "Qt" / "plugins" / "platforms" / f"libq{platform}.so"
        if path.exists():
            return path
    return None


def run_ldd(path: Path) -> str:
    ldd = shutil.which("ldd")
    if ldd is None:
        return ""
    try:
        return subprocess.run([ldd, str(path)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


@dataclass
class QtProbe:
    ok: bool
    platform: str  # the plugin Qt started, or the one it failed to start ("" when unknown)
    returncode: int
    qt_message: str = ""
    missing: list[str] = field(default_factory=list)  # libraries
    packages: list[str] = field(default_factory=list)  # Debian packages holding them


def probe_qt(env: dict[str, str] | None = None, ldd=run_ldd) -> QtProbe:
    """Start a ``QGuiApplication`` in a child process with ``env`` (default: this one) and report."""
    env = dict(os.environ if env is None else env)
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return QtProbe(False, env.get("QT_QPA_PLATFORM", ""), -1, "Qt did not start within "
                       f"{PROBE_TIMEOUT_S:.0f} s (a display that does not answer?)")
    if proc.returncode == 0:
        return QtProbe(True, proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "", 0)
    message = proc.stderr.strip()
    named = _PLUGIN.findall(message)
    platform = named[0] if named else env.get("QT_QPA_PLATFORM", "").split(":")[0] or ("xcb" if sys.platform
                                                                                          == "linux" else "")
    missing: list[str] = []
    plugin = plugin_file(platform) if platform else None
    if plugin is not None:
        missing = missing_libraries(ldd(plugin))
    named = [p for p in qt_named_packages(message) if installed(p) is not True]
    packages = list(dict.fromkeys([*named, *debian_packages(missing)]))
    return QtProbe(False, platform, proc.returncode, message, missing, packages)


def explain_probe(probe: QtProbe, env: dict[str, str] | None = None) -> str:
    env = dict(os.environ if env is None else env)
    plugin = f'"{probe.platform}" ' if probe.platform else ""
    code = f"exit {probe.returncode}" + (" — Qt aborted" if probe.returncode in (134, -6) else "")
    lines = [f"tilewright: Qt could not start its {plugin}platform plugin ({code}), so the studio cannot open."]
    no_display = "could not connect to display" in probe.qt_message or (
        probe.platform == "xcb" and not env.get("DISPLAY"))
    if probe.packages:
        if probe.missing:
            lines.append(f"Missing system libraries: {', '.join(probe.missing)}.")
        lines += ["On Debian/Ubuntu install them with:", f"  sudo apt-get install {' '.join(probe.packages)}"]
    if no_display:
        where = f"DISPLAY={env['DISPLAY']} does not answer" if env.get("DISPLAY") else "DISPLAY is unset"
        lines.append(f"No X display: {where}. Run it on a desktop, or render offscreen with "
                     "QT_QPA_PLATFORM=offscreen (e.g. `tilewright studio --screenshot out.png`).")
    if not probe.packages and not no_display:
        lines.append(f"Qt's X11 plugin needs these packages on Debian/Ubuntu: {XCB_DEBIAN_PACKAGES} "
                     f"(and {QT_DEBIAN_PACKAGES}).")
    said = [ln for ln in probe.qt_message.splitlines() if ln.strip()][:4]
    if said:
        lines += ["Qt said:", *(f"  {ln}" for ln in said)]
    return "\n".join(lines)
