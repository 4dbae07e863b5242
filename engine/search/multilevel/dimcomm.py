"""Collectives along one network dimension, timed by the engine's own collective model.

The inter-chip programme charges each parallelism's collectives per network dimension (``milp``). Its
first version timed them with a textbook ring on the dimension's one-direction bandwidth, which the
engine does not use: on a torus the engine runs bidirectional rings and picks among algorithms
(``perf.collectives``), so the mapper's tensor-parallel time on TPU v4 was twice the engine's. Here a
group of f members along dimension j is the devices ``realize`` would put there — coordinate
``step·k`` (k < f) on j, 0 elsewhere: tp takes step 1, dp step f_tp, pp step f_tp·f_dp — and its time
is ``CommModel``'s (the parallel search's cached decomposition, equal to what ``make_plan`` computes).
"""

from __future__ import annotations

from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.search.comm import CommModel
from tilewright.engine.search.multilevel.netdims import Dim, device_index


class DimComm:
    """Engine-timed collectives and pipeline sends on groups laid along one network dimension."""

    def __init__(self, hw: HardwareGraph, dims: list[Dim]) -> None:
        self.dims = dims
        self.comm = CommModel(hw)
        self._groups: dict[tuple[int, int, int, int], tuple[int, ...]] = {}

    def group(self, j: int, f: int, step: int = 1, start: int = 0) -> tuple[int, ...]:
        """Device indices of ``f`` members along dimension ``j``, ``step`` apart from coordinate ``start``."""
        key = (j, f, step, start)
        g = self._groups.get(key)
        if g is None:
            coord = [0] * len(self.dims)
            out = []
            for k in range(f):
                coord[j] = start + step * k
                out.append(device_index(coord, self.dims))
            g = self._groups[key] = tuple(out)
        return g

    def collective(self, kind: str, j: int, f: int, nbytes: float, step: int = 1) -> float:
        """One collective of ``nbytes`` (the full tensor) over ``f`` members along dimension ``j``."""
        if f <= 1 or nbytes <= 0:
            return 0.0
        return self.comm.collective_time(kind, self.group(j, f, step), nbytes)

    def send(self, j: int, step: int, nbytes: float) -> float:
        """One pipeline hop: a member sends ``nbytes`` to the member ``step`` further along dimension ``j``."""
        if nbytes <= 0 or step >= self.dims[j].size:
            return 0.0
        return self.comm.p2p_time(self.group(j, 1), self.group(j, 1, start=step), nbytes)
