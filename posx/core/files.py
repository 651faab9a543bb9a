"""Atomic file writes (a temporary file beside the target, fsynced, renamed: a process killed at
any instant leaves the previous version or the new one), directories that appear whole, and
the checks that keep posx from writing through a symbolic link or over what it did not make."""

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
def atomic_path(target: str | Path, new: bool = False, durable: bool = True) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``target`` atomically (with ``new``:
    only if nothing, not even a dangling link, took the name meanwhile). Without ``durable``
    nothing is fsynced: for a file posx can always make again (a crash may lose it, never halve it)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    # A fresh name in the same directory (so the rename is atomic), created with the user's umask.
    tmp_path = target.parent / f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    tmp_path.touch(exist_ok=False)  # O_EXCL: never follows a link planted under this name
    mode = stat.S_IMODE(tmp_path.stat().st_mode)
    try:
        yield tmp_path
        os.chmod(tmp_path, mode)  # a writer that made its own file (safetensors: 0600) keeps the umask's mode
        if durable:
            fsync_file(tmp_path)
        _publish(tmp_path, target) if new else os.replace(tmp_path, target)
        if durable:
            fsync_dir(target.parent)
    except BaseException as exc:
        tmp_path.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            raise PosxError(
                f"disk full while writing {target}; free space and retry (the previous file is intact)"
            ) from exc
        raise


def _publish(tmp_path: Path, target: Path) -> None:
    """``tmp_path`` becomes ``target`` if that name is free (a hard link fails on any entry there;
    without hard links, checked just before)."""
    try:
        os.link(tmp_path, target, follow_symlinks=False)
    except FileExistsError:
        raise PosxError(f"{target} appeared while it was being written; nothing is overwritten") from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        if os.path.lexists(target):
            raise PosxError(f"{target} appeared while it was being written; nothing is overwritten") from None
        os.replace(tmp_path, target)
        return
    tmp_path.unlink()


def fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    """Make a rename inside ``path`` durable (best effort: some filesystems refuse)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def real_dir(path: str | Path, what: str) -> Path:
    """``path`` as a directory posx may write into: created if missing, refused if a symbolic link."""
    path = no_link(path, what)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise PosxError(f"{what} {path} exists and is not a directory; move it away") from None
    return path


def check_dir(path: str | Path, what: str) -> Path:
    """``path`` checked before any work as ``real_dir`` would refuse it later."""
    path = no_link(path, what)
    if path.exists() and not path.is_dir():
        raise PosxError(f"{what} {path} exists and is not a directory; move it away")
    return path


def no_link(path: str | Path, what: str) -> Path:
    """``path``, refused if it is a symbolic link: a directory posx writes into is a real one."""
    path = Path(path)
    if path.is_symlink():
        raise PosxError(
            f"{what} {path} is a symbolic link; posx does not write through links — replace it with a real directory"
        )
    return path


def new_file(path: str | Path, option: str) -> Path:
    """``path`` for an output option that writes a new file: any entry there (a link too) is refused."""
    path = Path(path)
    if path.is_symlink():
        raise PosxError(f"{path} is a symbolic link; choose another {option} (nothing is overwritten)")
    if path.exists():
        raise PosxError(f"{path} already exists; choose another {option} (nothing is overwritten)")
    return path


def new_dir(path: str | Path, option: str) -> Path:
    """``path`` for an output option that makes a directory: missing, or an empty real directory."""
    path = Path(path)
    reason = _dir_taken(path)
    if reason:
        raise PosxError(f"{path} {reason}; choose a new {option} (outputs are never overwritten)")
    return path


def _dir_taken(path: Path) -> str | None:
    """Why a new directory cannot go at ``path``; None when it can (missing, or empty)."""
    if path.is_symlink():
        return "is a symbolic link (posx does not write through links)"
    if path.exists() and not path.is_dir():
        return "already exists and is not a directory"
    if path.exists() and any(path.iterdir()):
        return "already exists and is not empty"
    return None


def write_new_text(target: str | Path, text: str) -> None:
    """``text`` as a new file at ``target``, which nothing else may take meanwhile."""
    with atomic_path(target, new=True) as tmp:
        tmp.write_text(text, encoding="utf-8")


def free_name(parent: Path, stem: str, suffix: str = "") -> Path:
    """The first of ``numbered``'s names with nothing there, not even a dangling link."""
    return next(p for p in numbered(parent, stem, suffix) if not os.path.lexists(p))


@contextlib.contextmanager
def staged_dir(final: Path | None, parent: Path, name: str) -> Iterator[tuple[Path, list[Path]]]:
    """A directory of outputs that appears whole or not at all. Yields (staging directory,
    [published path]): a hidden directory beside the target, renamed on success to ``final`` (new,
    or empty) or, when ``final`` is None, to ``parent/name`` (``name-2``, ``-3`` ... if taken),
    the list then holding where it went. On failure the staging directory is removed; a killed
    process leaves only a hidden ``.*.tmp`` that blocks nothing."""
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
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                    raise
                if final is None:
                    continue
                reason = _dir_taken(candidate) or "already exists"
                raise PosxError(f"{candidate} {reason}; choose a new one (outputs are never overwritten)") from None
            fsync_dir(target_parent)
            published.append(candidate)
            break
        else:
            raise PosxError(f"too many directories named {name} under {target_parent}; pass --out")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_text(target: str | Path, text: str, durable: bool = True) -> None:
    with atomic_path(target, durable=durable) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_bytes(target: str | Path, data: bytes) -> None:
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)


def regular(path: str | Path, what: str = "") -> Path:
    """``path``, refused unless a regular file (after links): a FIFO is one line, not a read that waits."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise PosxError(f"{what or path} cannot be read ({exc.strerror}); restore it or remove the run") from None
    if not stat.S_ISREG(mode):
        raise PosxError(f"{what or path} is not a regular file; posx reads only files it wrote — move it away")
    return path


def read_regular(path: str | Path) -> bytes:
    """The bytes of a regular file at ``path``; else OSError, without waiting (opened non-blocking,
    checked on the descriptor: nothing can swap a FIFO in between)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, f"{path} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def sha256_file(*paths: str | Path) -> str:
    """Hex sha256 of the files' bytes one after the other, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def safetensors_write(write: Callable[[], None]) -> None:
    """Run a safetensors write, a SafetensorError ending in "(os error N)" raised as OSError(N)."""
    try:
        write()
    except SafetensorError as exc:
        found = re.search(r"os error (\d+)", str(exc))
        if found is None:
            raise
        code = int(found.group(1))
        raise OSError(code, os.strerror(code)) from exc


def numbered(parent: Path, stem: str, suffix: str = "", limit: int = 10_000) -> Iterator[Path]:
    """parent/<stem><suffix>, then <stem>-2<suffix>, -3 ...: the one rule for a fresh name."""
    for i in range(1, limit):
        yield parent / (f"{stem}{suffix}" if i == 1 else f"{stem}-{i}{suffix}")


def unique_dir(root: str | Path, name: str, hint: str) -> Path:
    """Create root/<name>/, or <name>-2, -3 ... (``hint``: what to do when all are taken)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for candidate in numbered(root, name):
        with contextlib.suppress(FileExistsError):
            candidate.mkdir()
            return candidate
    raise PosxError(f"too many directories named {name} under {root}; {hint}")
