"""The pipeline's hops in the parallelism search: what a send costs and how the closed form times the pipeline.

Separate from ``estimate`` because it mirrors one part of the plan on its own: the pipeline sends
(``Plan.p2p``, 1/tp of the activation per member) and what the framework does around them
(``plan.pipeline_p2p``: blocking sends lengthen the stages that send; gathered receives are the passes'
leads, ``Estimator.framework_chunks``). The ``Estimator`` inherits it; the attributes and methods declared
below are the estimator's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.perf.device import DeviceModel
from tilewright.engine.plan.pipeline_p2p import PipelineP2P, blocked_stage_fb, pipeline_p2p
from tilewright.engine.plan.timing import closed_form
from tilewright.engine.search.comm import CommModel, Layout
from tilewright.engine.search.parallel.candidate import Candidate

if TYPE_CHECKING:  # for annotations only
    from tilewright.engine.search.parallel.stage_sums import Chunks


class PipelineHops:
    """Pipeline hop times, the sends' semantics and the closed-form pipeline time of a candidate."""

    project: Project
    hw: HardwareGraph
    dev: DeviceModel
    comm: CommModel
    out_elems: list[float]
    blocks: np.ndarray
    elem: float

    if TYPE_CHECKING:  # the Estimator's

        def _ranges(self, pp: int, v: int) -> tuple[np.ndarray, np.ndarray]: ...

        @staticmethod
        def micro_batch(c: Candidate) -> float: ...

    def pipeline_p2p(self, c: Candidate) -> PipelineP2P:
        """What ``c``'s pipeline sends do beyond their transfer (``mapping.pipeline_p2p``, as the plan resolves it)."""
        return pipeline_p2p(self.project.mapping.pipeline_p2p, c.recompute, self.dev.compute,
                            self.project.run.mode is Mode.train, c.tp, c.sequence_parallel)

    def hops(self, c: Candidate) -> list[float]:
        """Pipeline hop times: ``hops[r]`` from stage r to r+1, ``hops[pp-1]`` from the last stage back to
        stage 0 (the next chunk, interleaved only). Hops differ where stages straddle a node boundary."""
        if c.pp == 1:
            return [0.0]
        layout = Layout(c.placement, c.rank_order)
        nbytes = self.p2p_bytes(c)
        groups = [self.comm.tensor_group(layout, c.tp, c.pp, c.dp, r, 0) for r in range(c.pp)]
        out = [self.comm.p2p_time(groups[r], groups[r + 1], nbytes) for r in range(c.pp - 1)]
        out.append(self.comm.p2p_time(groups[-1], groups[0], nbytes) if c.interleave > 1 else 0.0)
        return out

    def p2p_bytes(self, c: Candidate) -> float:
        """Bytes one member sends per pipeline hop: 1/tp of the activation (``plan.plan``'s ``p2p_bytes``)."""
        _, ends = self._ranges(c.pp, c.interleave)
        return self.out_elems[int(self.blocks[ends[0] - 1])] * self.micro_batch(c) * self.elem / c.tp

    def pipeline_time(self, c: Candidate, m: int, chunks: Chunks) -> tuple[float, list[float]]:
        """(closed-form pipeline time, hop times). Blocking sends (``plan.pipeline_p2p``) lengthen the stages
        that send and arrive at once."""
        hops = self.hops(c)
        sends = [hops[vs % c.pp] for vs in range(c.pp * c.interleave - 1)]
        if self.pipeline_p2p(c).blocking:
            return closed_form(blocked_stage_fb(chunks.fb, sends, c.pp), m, c.interleave, []), hops
        return closed_form(chunks.fb, m, c.interleave, sends), hops

    def lower_bound(self, c: Candidate, m: int, chunks: Chunks) -> float:
        """The pipeline without any communication: no candidate sharing these chunks can be faster."""
        return closed_form(chunks.fb, m, c.interleave, [])
