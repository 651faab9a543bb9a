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
import shutil
import stat
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
    tmp_path.touch(exist_ok=False)  # O_EXCL: never follows a link planted under this name
    mode = stat.S_IMODE(tmp_path.stat().st_mode)
    try:
        yield tmp_path
        os.chmod(tmp_path, mode)  # a writer that made its own file (safetensors: 0600) keeps the umask's mode
        with open(tmp_path, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp_path, target)
        fsync_dir(target.parent)
    except OSError as exc:
        tmp_path.unlink(missing_ok=True)
        if exc.errno == errno.ENOSPC:
            raise PosxError(
                f"disk full while writing {target}; free space and retry (the previous file is intact)"
            ) from exc
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


def real_dir(path: str | Path, what: str) -> Path:
    """``path`` as a directory posx may write into: created if missing, refused if it is a
    symbolic link (posx never writes, or deletes, through a link inside what it owns)."""
    path = Path(path)
    if path.is_symlink():
        raise PosxError(
            f"{what} {path} is a symbolic link; posx does not write through links — replace it with a real directory"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise PosxError(f"{what} {path} exists and is not a directory; move it away") from None
    return path


@contextlib.contextmanager
def staged_dir(final: Path | None, parent: Path, name: str) -> Iterator[tuple[Path, list[Path]]]:
    """Build a directory of outputs that appears whole or not at all.

    Yields (staging directory, [published path]): everything is written into a hidden
    directory beside the target, which on success is renamed to ``final`` (new, or an empty
    directory) or, when ``final`` is None, to ``parent/name`` (``name-2``, ``-3`` ... if taken);
    the list then holds where it went. On failure the staging directory, which this call
    made, is removed; a killed process leaves only a hidden ``.*.tmp`` that blocks nothing.
    """
    target_parent = Path(final).parent if final is not None else Path(parent)
    target_parent.mkdir(parents=True, exist_ok=True)
    stem = Path(final).name if final is not None else name
    staging = target_parent / f".{stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    staging.mkdir()
    published: list[Path] = []
    try:
        yield staging, published
        candidates = [Path(final)] if final is not None else numbered(target_parent, name)
        for candidate in candidates:
            try:
                os.rename(staging, candidate)  # onto a missing or empty directory only
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST) and final is None:
                    continue
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                    raise PosxError(
                        f"{candidate} already exists and is not empty; choose a new one (outputs are never overwritten)"
                    ) from None
                raise
            fsync_dir(target_parent)
            published.append(candidate)
            break
        else:
            raise PosxError(f"too many directories named {name} under {target_parent}; pass --out")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


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


def numbered(parent: Path, stem: str, suffix: str = "", limit: int = 10_000) -> Iterator[Path]:
    """parent/<stem><suffix>, then <stem>-2<suffix>, -3 ...: the one rule for a fresh name
    beside taken ones (``suffix`` for a file, e.g. ".png")."""
    for i in range(1, limit):
        yield parent / (f"{stem}{suffix}" if i == 1 else f"{stem}-{i}{suffix}")


def unique_dir(root: str | Path, name: str, hint: str) -> Path:
    """Create root/<name>/, or <name>-2, -3 ... if taken: an existing directory is never reused.
    ``hint`` says how to pick another name if all are taken."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for candidate in numbered(root, name):
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise PosxError(f"too many directories named {name} under {root}; {hint}")
