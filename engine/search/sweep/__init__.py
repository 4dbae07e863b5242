"""Sweeps over any project field (grid, random, Latin hypercube), run on a process pool or Ray, streamed to a
resumable CSV, with their Pareto front."""
