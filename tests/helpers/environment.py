"""The environment ``posx`` runs in under test: output that does not depend on the terminal
the tests were started from (wide, no colour, never drawn for a terminal), one-line Hydra
errors, and child processes that import the checkout under test."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# The environment of every posx the tests run (in process or not): wide enough that no line
# the tests read is wrapped (rich reads COLUMNS), no colour, and no network (the Hugging Face
# libraries read HF_HUB_OFFLINE when first imported; then they neither wait nor retry).
POSX_ENV = {"COLUMNS": "200", "NO_COLOR": "1", "HYDRA_FULL_ERROR": "0", "HF_HUB_OFFLINE": "1"}
# Each of these makes rich draw for a terminal (colour, a live bar instead of progress lines).
REMOVED = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "CLICOLOR_FORCE")


def isolate() -> None:
    """Set ``POSX_ENV`` in ``os.environ`` and remove ``REMOVED``: then Typer's test runner,
    posx in process and every child a test starts see them too."""
    for name in REMOVED:
        os.environ.pop(name, None)
    os.environ.update(POSX_ENV)


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a ``posx`` child process: this session's, with PYTHONPATH pinning the
    checkout under test (whichever posx is installed), plus ``extra``."""
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, **POSX_ENV, "PYTHONPATH": pythonpath, **extra}
