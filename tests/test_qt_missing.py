"""Where Qt's system libraries are missing, the message names the Debian packages to install."""

from tilewright.engine.cli.qt_check import QT_DEBIAN_PACKAGES, explain_qt_import_error


def test_missing_library_names_debian_packages():
    text = explain_qt_import_error(ImportError("libEGL.so.1: cannot open shared object file"))
    for pkg in ("libegl1", "libgl1", "libxkbcommon0", "libfontconfig1", "libdbus-1-3", "libglib2.0-0"):
        assert pkg in text
    assert QT_DEBIAN_PACKAGES in text


def test_missing_pyside_points_at_make_studio():
    assert "make studio" in explain_qt_import_error(ImportError("No module named 'PySide6'"))
