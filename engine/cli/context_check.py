"""An inference run's flags against the model's context length: refused up front, as serving runtimes do."""

from __future__ import annotations

from typing import Any

from tilewright.engine.cli.common import COMMAND_LINE
from tilewright.engine.errors import InputError, Problem


def refuse_past_context(flags: list[str], project: Any) -> None:
    """Refuse ``--prompt-tokens``/``--output-tokens`` whose sequence (prompt + output) runs past the model's
    context: its learned position table (``positions``), else its ``seq_len`` (a rotary model's
    ``max_position_embeddings`` when imported). Serving runtimes refuse such a request the same way (vLLM:
    "This model's maximum context length is N tokens"), rather than serve a length the model never saw.
    Only the flags are held to it here: a project file's own settings are the project checks' business."""
    named = [f for f in flags if f in ("--prompt-tokens", "--output-tokens")]
    spec, inf = project.workload, project.run.inference
    context = getattr(spec, "positions", None) or getattr(spec, "seq_len", None)
    if not named or context is None:
        return
    encoder = getattr(spec, "kind", "") == "bert"  # an encoder generates nothing: only the prompt is fed
    length = inf.prompt_tokens + (0 if encoder else inf.output_tokens)
    field = "workload.position_table" if getattr(spec, "position_table", None) else "workload.seq_len"
    if length > context:
        what = f"{inf.prompt_tokens} prompt" + ("" if encoder else f" + {inf.output_tokens} output")
        raise InputError(COMMAND_LINE, Problem(", ".join(named), f"{what} = {length:,} tokens, past the model's "
                                               f"context of {context:,} ({field})"))
