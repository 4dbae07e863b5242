"""The ZeRO-1/2 weight all-gather after the optimizer step, and how much of it shows with overlap.

Without ``mapping.overlap_param_gather`` the updated weights are gathered in the open after the sharded
optimizer step (``Plan.zero_gather``). With it, Megatron-Core's distributed optimizer does not gather after
the step: the gather is launched bucket by bucket and each module's forward pre-hook waits only for its own
bucket (NVIDIA/Megatron-LM ``megatron/core/distributed/param_and_grad_buffer.py``:
``_ParamAndGradBucketGroup.finish_param_sync`` waits for its bucket's all-gather and only then dispatches
``next_param_gather_bucket_group.start_param_sync()``; ``distributed_data_parallel.py`` registers the
forward pre-hooks that call it when ``overlap_param_gather`` is set). So the next iteration's forward
waits for the first bucket in full — it is dispatched either right then or, with ``align_param_gather``,
by the pipeline schedule just before the chunk's first forward — and each later bucket is gathered while
the layers of the bucket before it compute.

Buckets are taken as layers, as ``Plan.dp_buckets`` does for the gradient reduction: the first bucket is
the first layer of the stage's first chunk (that chunk's share of the gather over its layers); the rest
runs behind the first micro-batch's forward on the stage up to its last layer (whose bucket must have
arrived before it starts), taken as uniform over the last chunk's layers. What that forward cannot cover
shows too, charged as the same collective carrying the exposed fraction of its bytes (the convention of
``ShardComm.exposed``), so both engines time it like any collective. The hidden bytes still cross the
links: energy and link traffic count the whole ``Plan.zero_gather``.

This file times one iteration, so the gather charged at its end stands for the one the next iteration's
forward waits for (every iteration has one). Stages after the first receive their first activations later
than the first stage starts, which would hide more; that slack is not counted.
"""

from __future__ import annotations

from collections.abc import Callable

from tilewright.engine.perf.collectives import Collective
from tilewright.engine.plan.group_comm import scaled
from tilewright.engine.plan.plan import Plan
from tilewright.engine.plan.timing import pass_parts


def exposed_fractions(
    chunk_params: list[float], chunk_layers: list[int], chunk_forward: list[float], seconds: Callable[[float], float],
) -> tuple[float, float]:
    """(the first bucket, the exposed part of the rest) as fractions of the whole gather's bytes, from each
    chunk's parameters, layers and one micro-batch's forward seconds on the stage; ``seconds(f)`` times f of
    the gather. The plan and the search's estimator both take it from here, so they cannot drift apart."""
    if sum(chunk_layers) < 2:
        return 1.0, 0.0
    first = first_bucket_share(chunk_params, chunk_layers)
    if first >= 1.0:
        return 1.0, 0.0
    rest_s, hide_s = seconds(1.0 - first), covering_forward(chunk_forward, chunk_layers)
    if rest_s <= hide_s or rest_s <= 0:
        return first, 0.0
    return first, (1.0 - first) * (rest_s - hide_s) / rest_s


def first_bucket_share(chunk_params: list[float], chunk_layers: list[int]) -> float:
    """The first bucket (the first layer of the first chunk) as a fraction of the stage's gather: the first
    chunk's share of the stage's parameters over its layers."""
    total = sum(chunk_params)
    if total <= 0 or not chunk_layers or chunk_layers[0] <= 0:
        return 1.0
    return chunk_params[0] / total / chunk_layers[0]


def covering_forward(chunk_forward: list[float], chunk_layers: list[int]) -> float:
    """Seconds of the first micro-batch's forward on the stage that can hide the later buckets: every chunk's
    forward but the last layer's share of the last chunk (its bucket must be there before it runs)."""
    if not chunk_forward:
        return 0.0
    last = chunk_forward[-1] / chunk_layers[-1] if chunk_layers[-1] > 0 else chunk_forward[-1]
    return max(sum(chunk_forward) - last, 0.0)


def exposed_gather(plan: Plan, rank: int) -> tuple[Collective, Collective]:
    """(what of the post-step weight gather is exposed: the first bucket, or the whole gather without
    overlap; the exposed part of the rest, empty when the forward hides it)."""
    whole = plan.zero_gather(rank)
    none = Collective(whole.kind, "none", ())
    if not plan.project.mapping.overlap_param_gather or not whole.phases:
        return whole, none
    st = plan.stages[rank]
    chunks = sorted(st.chunk_layers)
    first, rest = exposed_fractions(
        [st.grad_bytes.get(c, 0.0) for c in chunks],
        [len(st.chunk_layers[c]) for c in chunks],
        [pass_parts(plan, rank, st.passes.get((c, "F")))[0] for c in chunks],
        lambda f: scaled(whole, f).time(plan.hw),
    )
    if first >= 1.0:
        return whole, none
    return scaled(whole, first), (scaled(whole, rest) if rest > 0 else none)
