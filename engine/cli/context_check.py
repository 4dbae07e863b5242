"""What ``tilewright serve`` holds to the model's context beyond the project checks.

The rule itself is the plan's (``plan.context_length``): ``check_project`` refuses an inference run whose own
``run.inference`` lengths pass the model's context, for ``run``, ``validate``, sweep points and the studio
alike, and the flag blame (``cli.flag_blame``) names the flag that set a length. A serving run reads more
than a project's lengths: each request of a trace has its own, refused here naming the trace and the
request; and it serves the lengths it reads whatever the project's ``run.mode`` says (serving is inference),
so a training project served is held to them here too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tilewright.engine.errors import InputError, Problem
from tilewright.engine.plan.context_length import context_problems, past_context


def refuse_served_past_context(project: Any, source: str, trace: str | None, requests: Sequence[Any] | None) -> None:
    """Refuse a serving run with a request past the model's context: the first such request of ``requests``
    (a trace read from ``trace``), else the lengths ``project`` serves (its ``run.inference``, the flags'
    lengths put over the file's), naming ``source``'s fields."""
    if requests is not None:
        for request in requests:
            reason = past_context(project.workload, request.prompt_tokens, request.output_tokens)
            if reason is not None:
                raise InputError(trace or "", Problem(f"request {request.id + 1} (in file order)", reason))
        return
    problems = context_problems(project, serving=True)
    if problems:
        raise InputError(source, problems)
