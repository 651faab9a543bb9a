"""A command line the parser cannot read (an unknown command or option, a missing argument) as
one line, ``error: <message> (`posx <command> --help` lists what it takes)``, exit 2.
``OneLineUsageErrors`` is the group class of posx's Typer apps (``typer.Typer(cls=...)``); Typer
exposes only the errors' base class, so the usage error is told by its class name.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

from posx.core.console import new_console, say


def is_usage_error(exc: BaseException) -> bool:
    """A usage error other than "no arguments: show the help"."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return "UsageError" in names and "NoArgsIsHelpError" not in names


def one_line(exc: Any) -> None:
    """Print the usage error's message on one line, naming the command's --help; exit 2."""
    where = exc.ctx.command_path if getattr(exc, "ctx", None) is not None else "posx"
    dash = ""
    if "NoSuchOption" in {cls.__name__ for cls in type(exc).__mro__}:  # a run named -x reads as an option
        dash = f"; a run or path whose name starts with - goes after -- (`{where} -- -name`)"
    say(
        new_console(stderr=True),
        "error",
        "bold red",
        f"{exc.format_message()} (`{where} --help` lists what it takes){dash}",
    )
    raise SystemExit(exc.exit_code)


class OneLineUsageErrors(TyperGroup):
    """A Typer group whose usage errors, and those of its commands, are one line."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except typer.TyperException as exc:
            if not is_usage_error(exc):
                raise
            one_line(exc)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except typer.TyperException as exc:
            if not is_usage_error(exc):
                raise
            one_line(exc)
