"""Widgets of the studio: the main window, its docks and the canvas."""
