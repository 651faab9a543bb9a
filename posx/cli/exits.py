"""How a command ends when something fails: one line on stderr and an exit status, never a
traceback for the user's own mistakes (``user_errors``, around every command and Hydra job)."""

from __future__ import annotations

import contextlib
import os
import tempfile
import traceback
from collections.abc import Iterator

from hydra.errors import HydraException, OverrideParseException
from omegaconf.errors import OmegaConfBaseException

from posx.configure import command_line
from posx.core import library_errors
from posx.core.console import new_console, say
from posx.core.errors import Interrupted, PosxError, Preempted

err = new_console(stderr=True)
# What Ctrl-C leaves, said by each command (``user_errors``'s ``interrupted``; a training job that
# has a run directory says which, ``posx.cli.jobs.stopped_run``).
NOTHING_LEFT = "stopped by Ctrl-C; nothing half-written was left (posx writes its outputs whole or not at all)"
EVAL_INTERRUPTED = (
    "stopped by Ctrl-C; the unfinished evaluation was not kept, the model and its earlier evaluations are "
    "unchanged; run the same command again to evaluate"
)
TRAINING_INTERRUPTED = (
    "stopped by Ctrl-C; a run continues from its last checkpoint with `posx train --resume RUN` "
    "(one stopped before its first checkpoint was removed)"
)


@contextlib.contextmanager
def user_errors(interrupted: str = NOTHING_LEFT) -> Iterator[None]:
    """PosxError, Hydra/OmegaConf config errors and known library failures
    (``posx.core.library_errors``) -> one line, exit 2; ``Preempted`` -> exit 75; Ctrl-C -> exit
    130 with ``interrupted`` (or an ``Interrupted``'s own line); anything else -> ``fail``."""
    try:
        yield
    except Preempted as exc:
        say(err, "stopped", "bold yellow", str(exc))
        raise SystemExit(Preempted.EXIT_CODE) from None
    except OverrideParseException as exc:
        say(err, "error", "bold red", command_line.unreadable(exc))
        raise SystemExit(2) from None
    except (PosxError, HydraException, OmegaConfBaseException) as exc:
        say(err, "error", "bold red", str(exc))
        raise SystemExit(2) from None
    except KeyboardInterrupt as exc:
        say(err, "interrupted", "yellow", str(exc) if isinstance(exc, Interrupted) else interrupted)
        raise SystemExit(130) from None
    except Exception as exc:  # a library's failure, or a bug in posx or below it
        fail(exc)
    except BaseException as exc:  # a Rust library's panic is a BaseException; SystemExit goes on
        if library_errors.advice(exc) is None:
            raise
        fail(exc)


def fail(exc: BaseException) -> None:
    """Exit 2 with a known library failure's advice, else exit 3 naming a file with the traceback."""
    advice = library_errors.advice(exc)
    if advice is not None:
        say(err, "error", "bold red", advice)
        raise SystemExit(2) from None
    if os.environ.get("POSX_DEBUG") == "1":
        raise exc
    fd, path = tempfile.mkstemp(prefix="posx-traceback-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write("".join(traceback.format_exception(exc)))
    say(err, "internal error", "bold red", f"{type(exc).__name__}: {exc} (traceback in {path}; "
        "POSX_DEBUG=1 prints it instead)")  # fmt: skip
    raise SystemExit(3) from None
