"""The command line's progress printer: a bar with time left on a terminal, plain lines into a pipe."""

from __future__ import annotations

import io

from tilewright.engine.cli.progress import ProgressPrinter


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_into_a_pipe_each_new_text_is_one_plain_line():
    out = io.StringIO()
    with ProgressPrinter(stream=out) as p:
        p(0.0, "search: 10 candidates")
        p(0.3, "")  # a fraction alone: nothing to log
        p(0.5, "search: 10 candidates")  # the same text again: once is enough
        p(1.0, "search: done")
    assert out.getvalue() == "search: 10 candidates\nsearch: done\n"


def test_quiet_and_run_style_printers_write_nothing_into_a_pipe():
    for printer in (ProgressPrinter(False, stream=io.StringIO()), ProgressPrinter(lines=False, stream=io.StringIO())):
        printer(0.5, "simulating")
        assert not printer.enabled and printer.stream.getvalue() == ""


def test_on_a_terminal_one_line_is_redrawn_and_erased_at_the_end():
    out = Terminal()
    with ProgressPrinter(stream=out) as p:
        p(0.25, "sweep: 1/4 ok")
    text = out.getvalue()
    assert text.startswith("\r\033[K[######") and "25%" in text and "sweep: 1/4 ok" in text
    assert text.endswith("\r\033[K")  # the result prints on a clean line


def test_bar_shows_the_time_left_once_it_can_tell():
    line = ProgressPrinter.line(0.25, "text", elapsed=30.0, columns=200)
    assert "1:30 left" in line and line.endswith("text")
    assert "left" not in ProgressPrinter.line(0.25, "text", elapsed=0.2, columns=200)  # too early to guess
    assert len(ProgressPrinter.line(0.5, "x" * 300, elapsed=5.0, columns=80)) == 79  # never wraps


def test_into_a_pipe_every_s_keeps_a_modest_rate(monkeypatch):
    """``every_s``: a search whose text changes every half second writes one line per ``every_s`` into a log,
    each led by the fraction and the time so far; the last (fraction 1) always."""
    from tilewright.engine.cli import progress as module

    clock = [100.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    with ProgressPrinter(stream=out, every_s=10.0) as p:
        for i in range(60):  # 30 s of texts, two a second
            p(i / 100, f"search: step {i}")
            clock[0] += 0.5
        p(1.0, "search: done")
    lines = out.getvalue().splitlines()
    assert lines == ["[  0% 0:00] search: step 0", "[ 20% 0:10] search: step 20", "[ 40% 0:20] search: step 40",
                     "[100% 0:30] search: done"]
