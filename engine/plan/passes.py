"""One pass (forward, backward or recompute) of one model chunk for one micro-batch, as segments.

A segment is the compute between two tensor-parallel collectives. Megatron's placement of those
collectives (Shoeybi et al. 2019; Korthikanti et al. 2023 for sequence parallelism):
- forward: all-reduce after each row-parallel op and after the vocab-parallel embedding; with
  sequence parallelism a reduce-scatter there instead, and an all-gather before each column-parallel op;
- backward: all-reduce of the input gradient of each column-parallel op; with sequence parallelism a
  reduce-scatter there and an all-gather before each row-parallel op's backward.

The passes themselves live in ``pass_forward`` and ``pass_backward``, built by ``pass_builder`` (its collectives
in ``pass_comms``, its delayed weight gradients in ``wgrad_delay``); this module is the entry their callers import.
"""

from __future__ import annotations

from tilewright.engine.plan.pass_backward import backward_pass
from tilewright.engine.plan.pass_forward import forward_pass
from tilewright.engine.plan.pass_fusion import fused_edges, local_name
from tilewright.engine.plan.pass_records import ChunkPass, PassContext, PassKind, Segment
from tilewright.engine.plan.tp_placement import axis_rows, collective_between

__all__ = [
    "ChunkPass", "PassContext", "PassKind", "Segment", "axis_rows", "backward_pass", "collective_between",
    "forward_pass", "fused_edges", "local_name",
]
