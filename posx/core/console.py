"""The consoles posx prints through, and its one way to print a message line.

On a terminal, rich wraps to the terminal's width as usual. Anywhere else (a log file, a SLURM
output file, a pipe) nothing is wrapped: a line, a run name or a path keeps its full text, and a
table is as wide as its cells, so what posx printed can be searched and copied whole.

A message's text is never read as rich markup: ``eval.methods=[none,pi]`` or
``pip install 'posx[trackers]'`` print as written.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

UNWRAPPED_WIDTH = 10_000  # columns of a console that is not a terminal: wide enough for any line


def new_console(*, stderr: bool = False, quiet: bool = False) -> Console:
    """A console on stdout (or stderr): the terminal's width on a terminal, unwrapped elsewhere."""
    if Console(stderr=stderr).is_terminal:
        return Console(stderr=stderr, quiet=quiet)
    return Console(stderr=stderr, quiet=quiet, width=UNWRAPPED_WIDTH, soft_wrap=True)


def say(out: Console, label: str, style: str, message: str) -> None:
    """``label: message`` on one line, the label styled, the message printed as plain text."""
    out.print(Text.assemble((f"{label}:", style), " ", " ".join(str(message).split())), highlight=False)
