"""An inference sequence against the model's context length: the one rule every entry point applies.

A served request (prompt + output tokens) longer than the model's context is refused by serving runtimes
rather than run at a length the model never saw (vLLM: "This model's maximum context length is N tokens.
However, you requested M tokens (P in the messages, O in the completion)"). The context is the model's learned
position table (``LearnedPositions.positions``: ``position_table``, else ``seq_len``) or, for a rotary model, its
``seq_len`` (``max_position_embeddings`` when imported). An encoder (BERT) generates nothing: only its prompt is
fed. The prompt + output − 1 positions a decoder feeds its table always fit a sequence that passes this rule.

``check_project`` (``plan.checks``) holds an inference run's ``run.inference`` lengths to it, so ``tilewright
run`` (from a file or from flags alone), ``validate`` and sweep points refuse the same project with the same words
the studio's checks show; ``tilewright serve`` holds each request it serves to it too (a trace's, or the lengths
its flags give), whatever the project's mode: serving is inference. A training run reads no inference lengths
and is not held to them.
"""

from __future__ import annotations

from typing import Any

from tilewright.engine.errors import Problem
from tilewright.engine.ir.project import Mode

PROMPT_FIELD = "run.inference.prompt_tokens"
OUTPUT_FIELD = "run.inference.output_tokens"


def model_context(spec: Any) -> tuple[int, str] | None:
    """The longest sequence the model takes and the field that says so: its learned position table
    (``positions``), else its ``seq_len``; None for a model without a sequence (a CNN, an MLP, a custom graph)."""
    context = getattr(spec, "positions", None) or getattr(spec, "seq_len", None)
    if context is None:
        return None
    field = "workload.position_table" if getattr(spec, "position_table", None) else "workload.seq_len"
    return int(context), field


def _encoder(spec: Any) -> bool:
    return getattr(spec, "kind", "") == "bert"


def past_context(spec: Any, prompt: int, output: int) -> str | None:
    """Why ``prompt`` + ``output`` tokens do not fit ``spec``'s context (None when they do), naming the
    lengths, the context and the workload field that sets it."""
    known = model_context(spec)
    if known is None:
        return None
    context, field = known
    encoder = _encoder(spec)
    length = prompt + (0 if encoder else output)
    if length <= context:
        return None
    what = f"{prompt} prompt" + ("" if encoder else f" + {output} output")
    return f"{what} = {length:,} tokens, past the model's context of {context:,} ({field})"


def length_fields(spec: Any) -> str:
    """The ``run.inference`` fields a refusal names: the prompt's, and the output's unless an encoder's."""
    return PROMPT_FIELD if _encoder(spec) else f"{PROMPT_FIELD}, {OUTPUT_FIELD}"


def context_problems(project: Any, *, serving: bool = False) -> list[Problem]:
    """The problem of ``project``'s ``run.inference`` lengths past its model's context: for an inference run
    (``run.mode`` infer), or for any mode when ``serving`` (a serving simulation reads those lengths whatever
    the mode says). A training run reads none of them: its sequence is ``workload.seq_len`` itself."""
    if project.run.mode != Mode.infer and not serving:  # a model_copy may hold the plain string
        return []
    inf = project.run.inference
    reason = past_context(project.workload, inf.prompt_tokens, inf.output_tokens)
    if reason is None:
        return []
    shorten = "the prompt" if _encoder(project.workload) else "the prompt or the output"
    remedy = f"shorten {shorten}"
    if getattr(project.workload, "positions", None) is None and not getattr(project.workload, "position_table", None):
        # a rotary model's seq_len is what it was built (or imported) at, not a learned limit
        remedy += ", or raise workload.seq_len (--seq-len) if the model takes longer contexts"
    return [Problem(length_fields(project.workload), f"{reason}; {remedy}")]
