"""Tilewright Studio: the desktop design studio (PySide6). A client of ``engine``, which never imports it."""
