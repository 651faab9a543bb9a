"""Atomic file writes: write a temporary file beside the target, flush, fsync, rename.

A process killed at any instant leaves either the previous version or the new one,
never a half-written file.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import uuid
from pathlib import Path
from typing import Callable, Iterator

from safetensors import SafetensorError

from posx.core.errors import PosxError


@contextlib.contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``target`` atomically."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    # A fresh name in the same directory (so the rename is atomic), created with the
    # user's umask like any other file.
    tmp_path = target.parent / f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    tmp_path.touch(exist_ok=False)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp_path, target)
        fsync_dir(target.parent)
    except OSError as exc:
        tmp_path.unlink(missing_ok=True)
        if exc.errno == errno.ENOSPC:
            raise PosxError(f"disk full while writing {target}; free space and retry (the previous file is intact)") from exc
        raise
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def fsync_dir(path: Path) -> None:
    """Make a rename inside ``path`` durable (best effort: some filesystems refuse)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_text(target: str | Path, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_bytes(target: str | Path, data: bytes) -> None:
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def safetensors_write(write: Callable[[], None]) -> None:
    """Run a safetensors write, turning its I/O failures into OSError with the real errno.

    safetensors reports a failed write (disk full included) as SafetensorError whose text
    ends in Rust's "(os error N)"; the errno is what the callers here act on.
    """
    try:
        write()
    except SafetensorError as exc:
        found = re.search(r"os error (\d+)", str(exc))
        if found is None:
            raise
        code = int(found.group(1))
        raise OSError(code, os.strerror(code)) from exc


def unique_dir(root: str | Path, name: str, hint: str) -> Path:
    """Create root/<name>/, or <name>-2, -3 ... if taken: an existing directory is never reused.
    ``hint`` says how to pick another name if all are taken."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(1, 10_000):
        candidate = root / (name if i == 1 else f"{name}-{i}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise PosxError(f"too many directories named {name} under {root}; {hint}")
