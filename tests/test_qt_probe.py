"""The Qt probe starts the platform plugin the studio will use, in a child process, and when Qt cannot
start it names the missing Debian packages and exits 2 — instead of Qt's own abort (exit 134)."""

from __future__ import annotations

import os
import subprocess
import sys

from tilewright.engine.cli.qt_check import (
    debian_package,
    debian_packages,
    explain_probe,
    missing_libraries,
    plugin_file,
    probe_qt,
    qt_named_packages,
)

LDD_SAMPLE = """\
\tlinux-vdso.so.1 (0x00007ffd6b5f2000)
\tlibQt6XcbQpa.so.6 => /venv/PySide6/Qt/plugins/platforms/../../lib/libQt6XcbQpa.so.6 (0x00007f1c1a000000)
\tlibxcb-icccm.so.4 => not found
\tlibxcb-keysyms.so.1 => not found
\tlibxcb.so.1 => /lib/x86_64-linux-gnu/libxcb.so.1 (0x00007f1c19f00000)
\tlibxcb-icccm.so.4 => not found
\tlibxkbcommon-x11.so.0 => not found
\tlibfoo2.so.7 => not found
"""
QT_ABORT = """\
qt.qpa.plugin: From 6.5.0, xcb-cursor0 or libxcb-cursor0 is needed to load the Qt xcb platform plugin.
qt.qpa.plugin: Could not load the Qt platform plugin "xcb" in "" even though it was found.
This application failed to start because no Qt platform plugin could be initialized.
"""


def _no_display(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    return env | {"QT_QPA_PLATFORM": "xcb"} | extra


def test_ldd_output_gives_the_missing_libraries_once_each():
    assert missing_libraries(LDD_SAMPLE) == [
        "libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libxkbcommon-x11.so.0", "libfoo2.so.7"
    ]
    assert missing_libraries("\tlibc.so.6 => /lib/libc.so.6 (0x1)\n") == []


def test_libraries_map_to_debian_packages():
    assert debian_packages(missing_libraries(LDD_SAMPLE)) == [
        "libxcb-icccm4", "libxcb-keysyms1", "libxkbcommon-x11-0", "libfoo2-7"
    ]
    assert debian_package("libxcb-cursor.so.0") == "libxcb-cursor0"
    assert debian_package("libEGL.so.1") == "libegl1"
    assert debian_package("/usr/lib/libglib-2.0.so.0") == "libglib2.0-0"
    assert debian_package("libbar.so.3") == "libbar3"  # Debian's rule where the table has no entry
    assert qt_named_packages(QT_ABORT) == ["libxcb-cursor0"]


def test_offscreen_starts():
    probe = probe_qt(os.environ | {"QT_QPA_PLATFORM": "offscreen"})
    assert probe.ok and probe.platform == "offscreen" and probe.returncode == 0


def test_xcb_without_a_display_is_caught_and_explained():
    """A known failure on any machine: the xcb plugin with no display (or without its libraries)."""
    env = _no_display()
    probe = probe_qt(env)
    assert not probe.ok and probe.returncode != 0 and probe.platform == "xcb"
    text = explain_probe(probe, env)
    assert '"xcb" platform plugin' in text
    assert ("sudo apt-get install" in text and probe.packages) or "DISPLAY is unset" in text


def test_missing_libraries_from_ldd_are_named_as_packages():
    env = _no_display()
    probe = probe_qt(env, ldd=lambda _path: LDD_SAMPLE)
    if plugin_file("xcb") is None:  # a PySide6 without the xcb plugin: nothing to run ldd on
        return
    assert {"libxcb-icccm4", "libxcb-keysyms1", "libxkbcommon-x11-0"} <= set(probe.packages)
    text = explain_probe(probe, env)
    assert "sudo apt-get install" in text and "libxcb-icccm4 libxcb-keysyms1" in text
    assert "libxcb-icccm.so.4" in text


def test_probe_command_exits_2_with_a_message_not_qts_abort():
    proc = subprocess.run([sys.executable, "-m", "tilewright.studio.qt_probe"], env=_no_display(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("tilewright: Qt could not start")
    ok = subprocess.run([sys.executable, "-m", "tilewright.studio.qt_probe"],
                        env=os.environ | {"QT_QPA_PLATFORM": "offscreen"}, capture_output=True, text=True,
                        timeout=120)
    assert ok.returncode == 0, ok.stderr


def test_readme_lists_the_packages():
    from pathlib import Path

    from tilewright.engine.cli.qt_check import QT_DEBIAN_PACKAGES, XCB_DEBIAN_PACKAGES

    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").split())
    for pkg in (QT_DEBIAN_PACKAGES + " " + XCB_DEBIAN_PACKAGES).split():
        assert f" {pkg} " in readme.replace("\\", " ").replace("`", " "), pkg
