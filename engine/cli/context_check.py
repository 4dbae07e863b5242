"""An inference run's sequence against the model's context length: refused up front, as serving runtimes do,
whether the lengths come from flags, from the project file or from a serving trace."""

from __future__ import annotations

from typing import Any

from tilewright.engine.cli.common import COMMAND_LINE
from tilewright.engine.errors import InputError, Problem

PROMPT_FIELD = "run.inference.prompt_tokens"
OUTPUT_FIELD = "run.inference.output_tokens"


def model_context(spec: Any) -> tuple[int, str] | None:
    """The longest sequence the model takes and the field that says so: its learned position table
    (``positions``), else its ``seq_len`` (a rotary model's ``max_position_embeddings`` when imported); None
    for a model without a sequence (a CNN, an MLP, a custom graph)."""
    context = getattr(spec, "positions", None) or getattr(spec, "seq_len", None)
    if context is None:
        return None
    field = "workload.position_table" if getattr(spec, "position_table", None) else "workload.seq_len"
    return int(context), field


def past_context(spec: Any, prompt: int, output: int) -> str | None:
    """Why ``prompt`` + ``output`` tokens do not fit the model's context (None when they do): a request past it
    is refused by serving runtimes (vLLM: "This model's maximum context length is N tokens"), rather than served
    at a length the model never saw. An encoder generates nothing: only its prompt is fed."""
    known = model_context(spec)
    if known is None:
        return None
    context, field = known
    encoder = getattr(spec, "kind", "") == "bert"
    length = prompt + (0 if encoder else output)
    if length <= context:
        return None
    what = f"{prompt} prompt" + ("" if encoder else f" + {output} output")
    return f"{what} = {length:,} tokens, past the model's context of {context:,} ({field})"


def refuse_past_context(flags: list[str], project: Any, source: str = COMMAND_LINE) -> None:
    """Refuse an inference run whose sequence (prompt + output) runs past the model's context. The blame goes
    where the lengths came from: ``--prompt-tokens``/``--output-tokens`` when given (``flags``), else the
    project file ``source`` and its ``run.inference`` fields. A training run reads no inference lengths, and a
    run built from flags alone (no file: ``source`` is the command line) without them runs the defaults'."""
    named = [f for f in flags if f in ("--prompt-tokens", "--output-tokens")]
    if not named and (source == COMMAND_LINE or getattr(project.run.mode, "value", project.run.mode) != "infer"):
        return
    inf = project.run.inference
    refuse_lengths(project.workload, inf.prompt_tokens, inf.output_tokens, named, source)


def refuse_lengths(spec: Any, prompt: int, output: int, named: list[str], source: str) -> None:
    """Refuse ``prompt`` + ``output`` past ``spec``'s context, naming the flags in ``named`` (from the command
    line) or else the project file's fields."""
    reason = past_context(spec, prompt, output)
    if reason is None:
        return
    if named:
        raise InputError(COMMAND_LINE, Problem(", ".join(named), reason))
    fields = PROMPT_FIELD if getattr(spec, "kind", "") == "bert" else f"{PROMPT_FIELD}, {OUTPUT_FIELD}"
    raise InputError(source, Problem(fields, reason + "; shorten them or pass --prompt-tokens/--output-tokens"))
