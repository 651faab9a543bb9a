"""Progress for long loops: a rich bar on a terminal; in a log file a line every ``total / lines``
steps, and whenever ``QUIET_S`` seconds passed without one (else a slow step looks like a hang)."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

QUIET_S = 30.0  # the longest a log goes without a progress line while work goes on


def rate(megabytes: float, seconds: float, done: int, total: int) -> str:
    """A reading loop's stats: megabytes, MB/s, and the time left at this rate of ``done`` units."""
    seconds = max(seconds, 1e-9)
    left = seconds * max(total - done, 0) / max(done, 1)
    return f"{megabytes:.1f} MB  {megabytes / seconds:.2f} MB/s  about {left:.0f} s left"


class Reporter:
    def __init__(self, console: Console, description: str, total: int, lines: int = 20):
        self.console = console
        self.description = description
        self.total = total
        self.every = max(1, total // lines)
        self.done = 0
        self.last_line = time.monotonic()
        self.bar: Progress | None = None
        if console.is_terminal:
            self.bar = Progress(
                TextColumn("[progress.description]{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TextColumn("{task.fields[stats]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=console,
            )
            self.task = self.bar.add_task(description, total=total, stats="")

    def __enter__(self) -> "Reporter":
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()

    def skip_to(self, done: int) -> None:
        """Start counting at ``done`` (a resumed loop)."""
        self.done = done
        if self.bar is not None:
            self.bar.update(self.task, completed=done)

    def update(self, done: int, stats: str) -> None:
        """Set the count to ``done`` (a loop that counts units, not steps: a token store's documents)."""
        before, self.done = self.done, done
        if self.bar is not None:
            self.bar.update(self.task, completed=done, stats=stats)
        elif (
            done // self.every > before // self.every
            or done == self.total
            or time.monotonic() - self.last_line >= QUIET_S
        ):
            self.console.print(f"{self.description} {self.done}/{self.total} {stats}", highlight=False)
            self.last_line = time.monotonic()

    def advance(self, stats: str) -> None:
        self.update(self.done + 1, stats)
