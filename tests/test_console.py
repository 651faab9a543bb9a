"""posx.core.console: output that is not a terminal is never wrapped, and a message's text is
never read as markup."""

from __future__ import annotations

import io

from rich.console import Console

from posx.core import progress
from posx.core.console import new_console, say


def test_a_console_that_is_not_a_terminal_keeps_long_lines_whole(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    out = new_console()
    out.file = io.StringIO()
    path = "results/sweeps/2026-12-03/17-02-11/" + "x" * 150 + "/extrapolation.csv"
    out.print(f"wrote {path}")
    assert out.file.getvalue() == f"wrote {path}\n"


def test_a_message_keeps_its_brackets_and_stays_on_one_line():
    out = new_console(stderr=True)
    out.file = io.StringIO()
    say(out, "error", "bold red", "set eval.methods=[none,pi]; pip install 'posx[trackers]'\n  [bold]x[/]")
    assert out.file.getvalue() == "error: set eval.methods=[none,pi]; pip install 'posx[trackers]' [bold]x[/]\n"


def test_a_log_gets_a_progress_line_every_total_over_lines_steps_and_whenever_it_went_quiet(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    console = Console(file=out, width=200)  # a file: plain lines, no live bar
    with progress.Reporter(console, "train", 100, lines=10) as reporter:  # a line every 10 steps
        for step in range(1, 31):
            now[0] += 1.0 if step != 13 else progress.QUIET_S  # step 13 takes long
            reporter.advance(f"s{step}")
    steps = [line.split()[1] for line in out.getvalue().splitlines()]
    assert steps == ["10/100", "13/100", "20/100", "30/100"]
