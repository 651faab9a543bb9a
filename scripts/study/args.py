"""The command line of the study scripts, held to posx's contract: a bad argument is one line on
stderr and exit 2, found before anything is written (no traceback, no usage text, no folder).

``OneLineParser`` turns every argparse error into that line; the argument types below refuse what
would fail later (a job count of 0, a NaN factor, a study name that is a path), and
``check_folders`` and ``check_overrides`` what only the whole command line can tell.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from posx.configure.checks import check_config
from posx.configure.compose import compose
from posx.core.errors import PosxError


class OneLineParser(argparse.ArgumentParser):
    """Bad input: one line on stderr, exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {' '.join(str(message).split())} (see --help)\n")


def positive(text: str) -> int:
    """A whole number >= 1 (jobs, threads, steps)."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def whole(text: str) -> int:
    """A whole number >= 0 (a seed)."""
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return int(text)


def number(lo: float, hi: float):
    """An argparse type: a finite number in [lo, hi] (an extension factor: no NaN, no inf)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and lo <= value <= hi) or "_" in text:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number from {lo:g} to {hi:g}")
        return value

    return parse


def folder_name(text: str) -> str:
    """A study name: a plain folder name (it names results/study/<name> and results/reference/<name>)."""
    if not text.strip() or "/" in text or "\\" in text or text in (".", "..") or text.startswith("-"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a plain folder name (no '/', not '.', not starting '-')")
    return text


def check_folders(parser: argparse.ArgumentParser, folders: dict[str, Path]) -> None:
    """Each ``--option: path`` a folder or nothing yet: never a link or a file."""
    for option, path in folders.items():
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            parser.error(f"{option} {path}: not a folder (a link or a file); name another")


def check_overrides(
    parser: argparse.ArgumentParser, option: str, overrides: list[str], base: list[str], root: str = "config"
) -> None:
    """``option``'s KEY=VALUE overrides composed on ``base`` and checked as posx checks a config,
    so a bad one stops the study before its first run (not at it, after a token store is built)."""
    bad = [o for o in overrides if "=" not in o or not o.partition("=")[0].strip()]
    if bad:
        parser.error(f"{option} {bad[0]}: write KEY=VALUE, e.g. {option} train.steps=20")
    try:
        check_config(compose([*base, *overrides], root))
    except PosxError as exc:
        parser.error(f"{option}: {exc}")
