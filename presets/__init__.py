"""Preset systems, models, projects and sweeps shipped as package data (read with importlib.resources)."""
