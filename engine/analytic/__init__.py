"""Closed-form engine: the event engine's quantities without a timeline, fast enough for search."""
