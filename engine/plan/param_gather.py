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

**With ``mapping.overlap_param_gather_with_optimizer_step``** (interleaved 1F1B, ZeRO-1/2). Megatron-Core then
builds one optimizer for the first model chunk and one for the others (``megatron/core/optimizer/__init__.py``:
``all_dense_model_chunks = [[model_chunks[0]], model_chunks[1:]]``) and gives every chunk a single bucket
(``training.get_model``: ``disable_bucketing=(model_chunk_idx > 0) or overlap_param_gather_with_optimizer_step``).
``ChainedOptimizer.step_with_ready_grads`` steps the first chunk's parameters, launches that chunk's whole
all-gather at once (``model_chunks[0].start_param_sync(force_dispatch=True)``) and only then steps the other
chunks', so the first chunk's gather runs under their step: it shows only by what that step (the fused Adam
stream of the other chunks' share of the parameters, ``StagePlan.fused_step_s``) cannot cover. The forward
pre-hooks then dispatch no next bucket (``skip_next_bucket_dispatch``): each later chunk's gather is its own
bucket, which must be complete before that chunk's first forward, so the rest is hidden by one micro-batch's
forward of every chunk but the last (the convention above, at the chunks' granularity). The gradient norm,
clipping and the other passes of the step (``plan.train_step``) run before the first optimizer steps: they hide
nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from tilewright.engine.perf.collectives import Collective
from tilewright.engine.plan.group_comm import scaled
from tilewright.engine.plan.plan import Plan
from tilewright.engine.plan.timing import pass_parts


def exposed_fractions(
    chunk_params: list[float], chunk_layers: list[int], chunk_forward: list[float], seconds: Callable[[float], float],
    step_s: float | None = None,
) -> tuple[float, float]:
    """(the first bucket, the exposed part of the rest) as fractions of the whole gather's bytes, from each
    chunk's parameters, layers and one micro-batch's forward seconds on the stage; ``seconds(f)`` times f of
    the gather. ``step_s``: with ``overlap_param_gather_with_optimizer_step``, the seconds of the stage's fused Adam
    step over all its parameters (``with_optimizer_step``); None: without it. The plan and the search's estimator
    both take it from here, so they cannot drift apart."""
    if step_s is not None and len(chunk_params) > 1:
        return with_optimizer_step(chunk_params, chunk_forward, seconds, step_s)
    if sum(chunk_layers) < 2:
        return 1.0, 0.0
    first = first_bucket_share(chunk_params, chunk_layers)
    if first >= 1.0:
        return 1.0, 0.0
    rest_s, hide_s = seconds(1.0 - first), covering_forward(chunk_forward, chunk_layers)
    if rest_s <= hide_s or rest_s <= 0:
        return first, 0.0
    return first, (1.0 - first) * (rest_s - hide_s) / rest_s


def with_optimizer_step(
    chunk_params: list[float], chunk_forward: list[float], seconds: Callable[[float], float], step_s: float
) -> tuple[float, float]:
    """(the exposed part of the first chunk's gather, of the others'), as fractions of the whole gather, with
    Megatron-Core's ``overlap_param_gather_with_optimizer_step`` (module docstring): the first chunk's share is
    gathered in one piece under the step of the other chunks' parameters (``step_s`` × their share: the fused
    step streams every parameter alike), the rest under one micro-batch's forward of every chunk but the last."""
    total = sum(chunk_params)
    if total <= 0:
        return 1.0, 0.0
    first = chunk_params[0] / total
    return _beyond(first, seconds, step_s * (1.0 - first)), _beyond(1.0 - first, seconds, sum(chunk_forward[:-1]))


def _beyond(share: float, seconds: Callable[[float], float], hide_s: float) -> float:
    """The fraction of the whole gather that shows when ``share`` of it runs under ``hide_s`` seconds of work."""
    if share <= 0:
        return 0.0
    t = seconds(share)
    return share * (t - hide_s) / t if t > hide_s and t > 0 else 0.0


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
    overlap; the exposed part of the rest, empty when the forward hides it). With
    ``overlap_param_gather_with_optimizer_step`` the first is what the optimizer step leaves of the first chunk's
    gather, empty when the step hides it all."""
    whole = plan.zero_gather(rank)
    none = Collective(whole.kind, "none", ())
    m = plan.project.mapping
    if not m.overlap_param_gather or not whole.phases:
        return whole, none
    st = plan.stages[rank]
    chunks = sorted(st.chunk_layers)
    with_step = m.overlap_param_gather_with_optimizer_step and len(chunks) > 1
    first, rest = exposed_fractions(
        [st.grad_bytes.get(c, 0.0) for c in chunks],
        [len(st.chunk_layers[c]) for c in chunks],
        [pass_parts(plan, rank, st.passes.get((c, "F")))[0] for c in chunks],
        lambda f: scaled(whole, f).time(plan.hw),
        st.fused_step_s if with_step else None,
    )
    if first >= 1.0:
        return whole, none
    return (scaled(whole, first) if first > 0 else none), (scaled(whole, rest) if rest > 0 else none)
