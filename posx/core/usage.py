"""A command line the parser cannot read as one line and exit 2, through ``OneLineUsageErrors``, the
group class of posx's Typer apps (Typer exposes only the errors' base class: told by class name)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import typer
from typer.core import TyperGroup

from posx.core.console import new_console, say


@contextlib.contextmanager
def one_line() -> Iterator[None]:
    """A usage error inside (but "no arguments: show the help") as one line, exit 2."""
    try:
        yield
    except typer.TyperException as exc:
        names = {cls.__name__ for cls in type(exc).__mro__}
        if "UsageError" not in names or "NoArgsIsHelpError" in names:
            raise
        where = exc.ctx.command_path if getattr(exc, "ctx", None) is not None else "posx"
        message = f"{exc.format_message()} (`{where} --help` lists what it takes)"
        if "NoSuchOption" in names:  # a run named -x reads as an option
            message += f"; a run or path whose name starts with - goes after -- (`{where} -- -name`)"
        say(new_console(stderr=True), "error", "bold red", message)
        raise SystemExit(exc.exit_code) from None


class OneLineUsageErrors(TyperGroup):
    """A Typer group whose usage errors, and those of its commands, are one line."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        with one_line():
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: Any) -> Any:
        with one_line():
            return super().invoke(ctx)
