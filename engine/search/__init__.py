"""Design-space search on top of the engine: layer-wise hybrid parallelism (HyPar), parallelism search,
hardware search (WHAM), multi-level mapping with an MILP (DFModel), and sweeps with Pareto fronts.

Every module here builds on the engine's own cost models (``engine.perf``, ``engine.analytic``) so that a
search ranks candidates the way the simulator would; nothing here imports Qt.
"""
