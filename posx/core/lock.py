"""The one lock posx takes on a directory: an exclusive ``flock`` on a hidden file inside it, which
dies with its process (kill -9 included), so nobody waits on a dead holder."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

from posx.core.errors import PosxError

LOCK_NAME = ".posx.lock"


class Busy(PosxError):
    """Another process holds the lock: the directory is in use, and nothing in it is ours."""


@contextlib.contextmanager
def exclusive(directory: str | Path, busy: str | None = None) -> Iterator[None]:
    """Hold the directory's lock: wait for it, or with ``busy`` fail at once with ``Busy(busy)``."""
    path = Path(directory) / LOCK_NAME
    try:  # O_NOFOLLOW: a link planted as the lock file is refused, never followed
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise PosxError(
            f"cannot open the lock file {path} ({exc.strerror}); it must be a plain file in a writable directory"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if busy is None else fcntl.LOCK_NB))
        except BlockingIOError:
            raise Busy(busy) from None
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def held(directory: str | Path) -> bool:
    """Whether a live process holds the directory's lock (a run training now); creates nothing."""
    try:
        fd = os.open(Path(directory) / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # no lock file (or a link planted as one): nobody holds it
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
