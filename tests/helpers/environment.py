"""The environment ``posx`` runs in under test: output that does not depend on the terminal
the tests were started from (wide, no colour, never drawn for a terminal), one-line Hydra
errors, and child processes that import the checkout under test."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Given to every posx the tests run (in process or not): wide enough that no line the tests
# read is wrapped (rich reads COLUMNS), no colour. pytest's own output keeps the terminal's.
POSX_ENV = {"COLUMNS": "200", "NO_COLOR": "1", "HYDRA_FULL_ERROR": "0"}
# Each of these makes rich draw for a terminal (colour, a live bar instead of progress lines);
# removed from this process's environment, so no child a test starts inherits them.
REMOVED = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "CLICOLOR_FORCE")


def isolate() -> None:
    """Remove what would make rich draw for a terminal from ``os.environ``."""
    for name in REMOVED:
        os.environ.pop(name, None)


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a ``posx`` child process: this session's, with PYTHONPATH pinning the
    checkout under test (whichever posx is installed), plus ``extra``."""
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, **POSX_ENV, "PYTHONPATH": pythonpath, **extra}
