"""Design-space exploration on top of the engine, one subpackage per method:

- ``parallel``: the fastest tp/pp/dp/micro-batch/… mapping of a model on a system (Calculon's space);
- ``hardware``: accelerator designs under area and power budgets (WHAM);
- ``hypar``: layer-wise data or model parallelism on an accelerator array (HyPar);
- ``multilevel``: tp/pp/dp per network dimension and operator fusion per chip, by MILP (DFModel);
- ``sweep``: grid, random and Latin-hypercube sweeps of any project field into a resumable CSV;
- ``pareto``: the non-dominated points, shared by sweeps, the hardware search and the studio.

Every method builds on the engine's own cost models (``engine.perf``, ``engine.plan``) so that it ranks
candidates the way the simulator would, and the long ones follow the job protocol of ``engine.jobs``
(``progress(fraction, text)``, ``cancel()``). Nothing here imports Qt.
"""
