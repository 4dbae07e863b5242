"""Tilewright engine: the Qt-free core (data model, elaboration, simulation, search, command line)."""

__version__ = "0.1.0"
