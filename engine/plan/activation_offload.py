"""Activation offload to host memory as Megatron-Core and Transformer Engine run it: training with
``mapping.memory_levels.activations`` in a host memory, ``mapping.offload_layers`` of each model chunk offloaded.

Why not every layer, and why only transformer layers:

- Megatron-Core's ``TransformerBlock`` (``megatron/core/transformer/transformer_block.py``) runs each of its
  transformer layers inside Transformer Engine's ``get_cpu_offload_context(cpu_offloading,
  cpu_offloading_num_layers, num_layers, cpu_offloading_activations, cpu_offloading_weights)``; the embedding
  and the output layer (head, loss) run outside it, so their saved tensors stay on the device.
- Transformer Engine (``transformer_engine/pytorch/cpu_offload.py``, NVIDIA/TransformerEngine @ 00382b96,
  ``OffloadSynchronizer._default_offload_sync_init``) offloads layers 0 … k − 1 of the ``model_layers`` and
  asserts k ≤ model_layers − 1: "Cannot offload all layers … last layer is not offloaded" — the last layer's
  backward starts right after its forward, there is nothing to hide a copy behind. Its docstring: the saved
  activations on the device peak at (model_layers − k) · T, T one layer's. The earlier handler (@ 7e6b21ef,
  ``AsyncDoubleBufferGroupOffloadHandler``) copies a layer out on a d2h stream behind the next layer's forward
  and back on an h2d stream one layer ahead of its backward (``num_prefetch_group=1``): double buffering.
- Megatron-Core's ``TransformerConfig.__post_init__`` (NVIDIA/Megatron-LM @ 002526d8) refuses
  ``cpu_offloading_num_layers`` outside [0, num_layers) ("CPU offloading can be done only for layers less than
  {num_layers}"), pipeline parallelism ("Currently there is no support for Pipeline parallelism with CPU
  offloading") and recomputation (``plan.checks._offload_checks`` refuses all three).

So one model chunk — with pp 1, the whole model — copies the first k of its transformer layers' stored
activations to the host (default k = L − 1, the frameworks' maximum) and keeps the rest on the device. The
copies overlap the passes' kernels as before (``passes.Segment.close``: the copy engines' time bounds a
segment's); the memory tracks hold the kept share on the device and the offloaded share on the host
(``engines.result_builder``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from tilewright.engine.ir.ops import Op
from tilewright.engine.plan.residency import workspace_level

if TYPE_CHECKING:
    from tilewright.engine.plan.stage_build import StagePlan


def offload_count(blocks: int, asked: int | None) -> int:
    """Transformer layers of a chunk of ``blocks`` whose activations go to the host: ``asked``
    (``mapping.offload_layers``), else all but the last; never the last (``plan.checks`` refuses more)."""
    most = max(blocks - 1, 0)
    return most if asked is None else min(asked, most)


def offloaded_layers(chunks: Iterable[list[int]], blocks: Iterable[int], asked: int | None) -> frozenset[int]:
    """Layer indices whose stored activations are copied to the host: in each model chunk (its layers in
    order), its first ``offload_count`` transformer layers (``blocks``: the model's transformer layers)."""
    block_set = set(blocks)
    out: set[int] = set()
    for chunk in chunks:
        own = [i for i in chunk if i in block_set]
        out.update(own[: offload_count(len(own), asked)])
    return frozenset(out)


def offloaded_ops(layers: list[list[Op]], offloaded: frozenset[int]) -> list[list[Op]]:
    """The layers (each a list of its ops) among ``layers`` whose stored activations go to the host."""
    return [ops for ops in layers if ops and ops[0].layer in offloaded]


def host_share(stored: float, offloaded: float) -> float:
    """Of a chunk's stored activations per micro-batch, the fraction on the host (0 when nothing is stored).
    With pp 1 and one chunk (what Megatron-Core allows) every micro-batch in flight splits the same way, so
    the memory series of the stored activations splits by this one fraction."""
    return offloaded / stored if stored > 0 else 0.0


def notes(stages: Iterable[StagePlan], blocks: Iterable[int], asked: int | None) -> list[str]:
    """"activation offload: the stored activations of 31 of 32 transformer layers per model chunk …" once, for
    the stage offloading the most (none without offload)."""
    block_set = set(blocks)
    counts = []
    for st in stages:
        if st.offloaded_bytes and st.residency is not None and "host" in st.residency.levels:
            per_chunk = max(sum(i in block_set for i in idx) for idx in st.chunk_layers.values())
            counts.append((len(st.offload_layers) // len(st.chunk_layers), per_chunk,
                           st.residency.levels["host"].memory))
    if not counts:
        return []
    k, per_chunk, memory = max(counts)
    how = "mapping.offload_layers" if asked is not None else "all but the last, the frameworks' maximum"
    return [f"activation offload: the stored activations of {k} of {per_chunk} transformer layers per model chunk "
            f"are copied to host '{memory}' in the forward and back in the backward ({how}; Megatron-Core "
            f"cpu_offloading_num_layers {k}); the last layer's, the embedding's and the head's stay on the device"]


def track_split(st: StagePlan) -> tuple[float, str] | None:
    """(host share of the stored activations, the device level that keeps the rest) for a stage that offloads
    activations; None otherwise. The kept layers' activations sit beside the ops' workspace
    (``residency.workspace_level``: the device's fastest level in use)."""
    if not st.offloaded_bytes or st.residency is None:
        return None
    return host_share(sum(st.act_bytes.values()), sum(st.offloaded_bytes.values())), workspace_level(st.residency)


def activation_series(values: list[float], level: str, split: tuple[float, str]) -> list[float]:
    """The stored activations' series as the track of memory ``level`` holds it under activation offload
    (``split``: ``track_split``): the host's share on the host level, the rest on the device's."""
    share, kept = split
    if level == "host":
        return [v * share for v in values]
    if level == kept:
        return [v * (1.0 - share) for v in values]
    return [0.0] * len(values)
