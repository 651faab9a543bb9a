"""posx.core.console: output that is not a terminal is never wrapped, and a message's text is
never read as markup."""

from __future__ import annotations

import io

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
