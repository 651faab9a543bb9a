"""The Hydra command line of ``posx train`` and ``posx extend``, read once (``parse``: Hydra's flags,
and the overrides by Hydra's grammar) so every check can refuse before Hydra makes a sweep
directory; ``probes`` lists override sets using every value of every sweep."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import NamedTuple

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import OverrideParseException

from posx.core.errors import PosxError

# Hydra's application flags (each with its short form): switches, and flags that take a value.
SWITCHES = (
    "--help -h",
    "--hydra-help",
    "--version",
    "--resolve",
    "--run -r",
    "--multirun -m",
    "--shell-completion -sc",
)
VALUED = ("--package -p", "--config-path -cp", "--config-name -cn", "--config-dir -cd", "--experimental-rerun")
INFO = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")
GRAMMAR = "https://hydra.cc/docs/advanced/override_grammar/basic/"
# Lines of Hydra's parse report that are not its reason (the link, the caret, the headers).
_NOT_REASON = ("See https://", "^", "Error parsing override", "LexerNoViableAltException")


class OneLineParser(argparse.ArgumentParser):
    """A malformed line is a ``PosxError`` (one line, exit 2), not argparse's usage text."""

    def error(self, message: str):  # type: ignore[override]
        if message.startswith("unrecognized arguments:") and "=" in message:
            # Hydra's command line takes its overrides in one run: after a flag, more of them are strays
            raise PosxError(f"{message} (overrides go together, after the flags: e.g. -m a=1,2 b=3)")
        raise PosxError(f"{message} (--help lists the flags and overrides)")


def parser() -> argparse.ArgumentParser:
    """Hydra's application flags; ``--help`` and ``--version`` are left to Hydra."""
    p = OneLineParser(prog="posx", add_help=False, description="Hydra overrides and flags")
    p.add_argument("overrides", nargs="*")
    for flags in SWITCHES:
        p.add_argument(*flags.split(), action="store_true")
    p.add_argument("--cfg", "-c", choices=["job", "hydra", "all"])
    for flags in VALUED:
        p.add_argument(*flags.split())
    p.add_argument("--info", "-i", const="all", nargs="?", choices=INFO)
    return p


def unreadable(exc: OverrideParseException) -> str:
    """One line for an override Hydra's grammar cannot read: which, the parser's reason, and the two
    fixes that cover almost every case (close the list's bracket; quote grammar characters)."""
    lines = (line.strip() for line in exc.message.splitlines())
    reasons = [line for line in lines if line and not line.startswith(_NOT_REASON)]
    reason = reasons[0] if reasons else "a character it cannot read (an unclosed quote?)"
    key = exc.override.split("=", 1)[0].lstrip("+~") or "key"
    return (
        f"cannot read the override {exc.override}: {reason}; a list needs its closing bracket ({key}=[1,2]) "
        f"and a value that holds brackets, braces, commas or quotes needs quoting ({key}='a[b],c' or "
        f"{key}=\"it's\") (Hydra's override grammar: {GRAMMAR})"
    )


class CommandLine(NamedTuple):
    flags: argparse.Namespace
    overrides: list[Override]

    @property
    def lines(self) -> list[str]:
        return [o.input_line for o in self.overrides]


def parse(args: list[str]) -> CommandLine:
    """The flags and overrides of ``args`` (an unreadable override: ``OverrideParseException``)."""
    flags = parser().parse_args(args)
    return CommandLine(flags, OverridesParser.create().parse_overrides(flags.overrides))


def modes(flags: argparse.Namespace) -> list[str]:
    """The mutually exclusive modes ``flags`` asks for."""
    return [
        flag
        for flag, on in (
            ("-m/--multirun", flags.multirun),
            ("--cfg", flags.cfg),
            ("--info", flags.info),
            ("--run", flags.run),
            ("--shell-completion", flags.shell_completion),
        )
        if on
    ]


def refuse_run_dir(overrides: list[Override]) -> None:
    """``hydra.run.dir`` would only make an empty directory: refused, naming the keys that count."""
    for o in overrides:
        if o.key_or_group == "hydra.run.dir":
            raise PosxError(
                f"'{o.input_line}': posx does not put a run in hydra.run.dir; it makes <results_dir>/runs/<name>/ "
                "(set results_dir=DIR and name=NAME instead; a sweep's jobs go under hydra.sweep.dir)"
            )


def refuse_name_in_sweep(overrides: list[Override]) -> None:
    """``name=`` in a sweep would be recorded by each job but used by none (Hydra names the jobs)."""
    for o in overrides:
        if o.key_or_group == "name":
            raise PosxError(
                f"'{o.input_line}': name= names a single run; a sweep's jobs are named <number>_<values> inside "
                "hydra.sweep.dir (choose the sweep's directory with hydra.sweep.dir= instead)"
            )


def refuse_sweep_values(overrides: list[str], command: str, why: str) -> None:
    """A sweep's value (``seed=1,2``) given to ``command``, which runs once: one line with ``why``."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except OverrideParseException:
        return
    for item in parsed:
        if item.is_sweep_override():
            raise PosxError(f"{command} takes one value per key, not '{item.input_line}' ({why})")


def probes(parsed: list[Override]) -> list[list[str]]:
    """Override lists that together use every value of every sweep, the rest at their first:
    ``a=1,2 b=3,4`` -> ``[a=1 b=3], [a=2 b=3], [a=1 b=4]``."""
    values = [list(o.sweep_string_iterator()) if o.is_sweep_override() else [None] for o in parsed]
    for o, v in zip(parsed, values):
        if not v:  # Hydra would launch no job and exit 0
            raise PosxError(f"the sweep {o.input_line} gives no values; give it at least one")

    def line(choice: list[int]) -> list[str]:
        return [
            o.input_line if v[i] is None else f"{o.get_key_element()}={v[i]}"
            for o, v, i in zip(parsed, values, choice)
            if v
        ]

    first = [0] * len(parsed)
    found = [line(first)]
    for k, v in enumerate(values):
        for i in range(1, len(v)):
            found.append(line([*first[:k], i, *first[k + 1 :]]))
    return found


@contextlib.contextmanager
def argv(args: list[str]) -> Iterator[None]:
    """``sys.argv`` is ``args`` inside, as ``hydra.main`` reads it; ``HYDRA_FULL_ERROR=1`` lets an error
    from outside the job (a launcher's) reach ``user_errors`` instead of Hydra's report."""
    saved, full_error = sys.argv, os.environ.get("HYDRA_FULL_ERROR")
    sys.argv = [saved[0] if saved else "posx", *args]
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    finally:
        sys.argv = saved
        if full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = full_error
