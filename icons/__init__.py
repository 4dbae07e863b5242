"""The studio's SVG icons, shipped as package data (read with importlib.resources)."""
