"""Exports of a Result: Chrome trace (Perfetto) and CSV."""
