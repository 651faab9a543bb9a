"""The consoles posx prints through (off a terminal nothing is wrapped, so lines can be searched whole)
and ``say``, its one way to print a message line (the message is never read as rich markup)."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

UNWRAPPED_WIDTH = 10_000  # columns of a console that is not a terminal: wide enough for any line


def new_console(*, stderr: bool = False, quiet: bool = False) -> Console:
    if Console(stderr=stderr).is_terminal:
        return Console(stderr=stderr, quiet=quiet)
    return Console(stderr=stderr, quiet=quiet, width=UNWRAPPED_WIDTH, soft_wrap=True)


def say(out: Console, label: str, style: str, message: str) -> None:
    """``label: message`` on one line, the label styled, the message printed as plain text."""
    out.print(Text.assemble((f"{label}:", style), " ", " ".join(str(message).split())), highlight=False)
