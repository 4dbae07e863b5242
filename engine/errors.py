"""User-facing errors: each names the file, the JSON path and the reason, and maps to an exit status."""

from __future__ import annotations

from dataclasses import dataclass

EXIT_BAD_INPUT = 2
EXIT_OUT_OF_MEMORY = 3


@dataclass
class Problem:
    """One thing wrong with an input: where (dotted JSON path) and why."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}" if self.path else self.reason


class InputError(Exception):
    """Bad input. ``str()`` gives one line per problem, each prefixed with the file name."""

    exit_status = EXIT_BAD_INPUT

    def __init__(self, source: str, problems: list[Problem] | Problem | str):
        if isinstance(problems, str):
            problems = [Problem("", problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.source = source
        self.problems = problems
        super().__init__(str(self))

    def __str__(self) -> str:
        prefix = f"{self.source}: " if self.source else ""
        return "\n".join(prefix + str(p) for p in self.problems)
