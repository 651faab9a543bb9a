"""The one lock posx takes on a directory: an exclusive ``flock`` on a hidden file inside it.

A run directory is locked while it trains (two processes never train into one run; the
second is refused at once), and a sweep directory while a job rewrites the sweep table
(jobs that finish together wait their turn). The lock dies with its process, kill -9
included, so nobody ever waits on a dead holder.
"""

from __future__ import annotations

import contextlib
import fcntl
from pathlib import Path
from typing import Iterator

from posx.core.errors import PosxError

LOCK_NAME = ".posx.lock"


@contextlib.contextmanager
def exclusive(directory: str | Path, busy: str | None = None) -> Iterator[None]:
    """Hold the directory's lock. ``busy`` None: wait for it; else fail at once with
    ``PosxError(busy)`` when another process holds it."""
    with open(Path(directory) / LOCK_NAME, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if busy is None else fcntl.LOCK_NB))
        except BlockingIOError:
            raise PosxError(busy) from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def held(directory: str | Path) -> bool:
    """Whether a live process holds the directory's lock (a run that is training now). Only
    looks: a directory without a lock file is not locked, and none is created."""
    path = Path(directory) / LOCK_NAME
    if not path.is_file():
        return False
    try:
        with open(path) as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
    except OSError:
        return False
    return False
