"""The Explore panel: parallelism search, sweeps with Pareto fronts, and HyPar partitioning."""

from tilewright.studio.ui.explore.panel import ExplorePanel

__all__ = ["ExplorePanel"]
