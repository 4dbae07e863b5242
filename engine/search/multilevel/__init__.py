"""Multi-level mapping (DFModel): tp/pp/dp per network dimension by an MILP, and operator fusion per chip."""
