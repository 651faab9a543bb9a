"""A command's module imported with Ctrl-C held off: one inside an import leaves a module half set up
(NumPy then fails with a traceback), so ``load`` stops after it, one line, exit 130."""

from __future__ import annotations

import importlib
import signal
from types import ModuleType

from posx.core.console import new_console, say

STOPPED = "stopped by Ctrl-C while starting; nothing was read or written"


def load(name: str) -> ModuleType:
    """``name`` imported with Ctrl-C held off (a plain import off the main thread, or if ignored)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return importlib.import_module(name)
    caught: list[int] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    except ValueError:  # not the main thread
        return importlib.import_module(name)
    try:
        module = importlib.import_module(name)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)
    if caught:
        say(new_console(stderr=True), "interrupted", "yellow", STOPPED)
        raise SystemExit(130)
    return module
