"""Byte-level corpora: a token is a byte (vocabulary 256); nothing is downloaded.

Two sources:

* ``stdlib``: every ``*.py`` file of the running interpreter's standard library, minus
  ``site-packages``/``dist-packages``, test directories and ``__pycache__``.
* ``text``: ``data.path`` is a UTF-8 file, a directory (recursive, hidden entries skipped)
  or a glob pattern.

Files are sorted by relative path and joined with ``b"\\n"``. The split is by file (a hash
of the relative path decides); when that leaves a split empty it falls back to holding out
the last ``val_fraction`` of the bytes. The joined train/val bytes are cached as raw
``.bin`` files plus a JSON sidecar, keyed by a cheap key (paths, sizes, mtimes) so a second
load reads no source file. Cache files are written atomically and checked on load; a bad
cache is rebuilt, never trusted.

Training and evaluation read token stores (``posx.data.store``), which reuse ``select_files``
and the split rule here; with the byte tokenizer a store holds exactly ``load_corpus``'s
tokens, which stays as that reference (tests/test_store.py) and for the benchmark scripts.
"""

from __future__ import annotations

import glob
import hashlib
import json
import math
import os
import platform
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from posx.core import files
from posx.core.errors import PosxError

VOCAB_SIZE = 256
FILE_SOURCES = ("stdlib", "text")  # what load_corpus (the byte reference) reads
CACHE_FORMAT = 1  # bump when the cache layout or the corpus construction changes
_STDLIB_SKIP = frozenset(
    {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
)


@dataclass
class Corpus:
    train: torch.Tensor  # uint8, 1-D, all training bytes concatenated
    val: torch.Tensor  # uint8, 1-D, held-out bytes
    fingerprint: dict  # JSON-serialisable description of what was loaded


# ---------------------------------------------------------------- file selection


def _walk(root: Path, keep_dir, keep_file) -> list[str]:
    """Relative POSIX paths of files under ``root`` (no symlinked dirs followed), sorted."""
    rels = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if keep_dir(d)]
        rel_dir = Path(dirpath).relative_to(root)
        for name in filenames:
            if keep_file(name) and os.path.isfile(os.path.join(dirpath, name)):
                rels.append((rel_dir / name).as_posix())
    return sorted(rels)


def select_files(source: str, path: str | None = None) -> tuple[Path, list[str]]:
    """The corpus root (resolved) and the sorted relative POSIX paths of its files."""
    if source == "stdlib":
        if path:
            raise PosxError(
                f"data.path '{path}' is set but data.source is 'stdlib'; "
                "set data.source=text to use it, or remove data.path"
            )
        root = Path(sysconfig.get_paths()["stdlib"]).resolve()
        rels = _walk(root, lambda d: d not in _STDLIB_SKIP, lambda f: f.endswith(".py"))
        if not rels:
            raise PosxError(
                f"found no .py files in the standard library at '{root}'; "
                "use data.source=text with data.path pointing at some text"
            )
        return root, rels
    if source != "text":
        raise PosxError(
            f"unknown data.source '{source}'; choose one of: " + ", ".join(FILE_SOURCES)
        )
    if not path:
        raise PosxError(
            "data.source 'text' needs data.path; point data.path at a UTF-8 text file, "
            "directory or glob"
        )
    expanded = os.path.expanduser(str(path))
    if os.path.isfile(expanded):
        full = Path(expanded).resolve()
        return full.parent, [full.name]
    if os.path.isdir(expanded):
        root = Path(expanded).resolve()
        rels = _walk(root, lambda d: not d.startswith("."), lambda f: not f.startswith("."))
        if not rels:
            raise PosxError(
                f"data.path '{path}' is a directory with no (non-hidden) files; "
                "put UTF-8 text files in it or point data.path elsewhere"
            )
        return root, rels
    if any(c in expanded for c in "*?["):
        matches = sorted(
            {Path(m).resolve() for m in glob.glob(expanded, recursive=True) if os.path.isfile(m)}
        )
        if not matches:
            raise PosxError(
                f"data.path glob '{path}' matches no files; fix the pattern or point "
                "data.path at a UTF-8 text file or directory"
            )
        root = Path(os.path.commonpath([str(m.parent) for m in matches]))
        return root, sorted(m.relative_to(root).as_posix() for m in matches)
    raise PosxError(
        f"data.path '{path}' does not exist; point data.path at a UTF-8 text file, "
        "directory or glob"
    )


def unreadable(path: Path, e: OSError) -> PosxError:
    return PosxError(
        f"cannot read data file '{path}': {e.strerror or e}; "
        "fix its permissions or leave it out of data.path"
    )


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise unreadable(path, e) from None


# ---------------------------------------------------------------- building


def split_by_file(rels: list[str], val_fraction: float) -> list[bool]:
    limit = val_fraction * 10_000
    return [int(hashlib.sha1(r.encode()).hexdigest(), 16) % 10_000 < limit for r in rels]


def _build(source, root, rels, val_fraction, where: str) -> tuple[bytes, bytes, dict]:
    """Read, check and split the files; ``where`` names the corpus in error messages."""
    blobs = []
    for rel in rels:
        data = _read_file(root / rel)
        if source == "text":
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise PosxError(
                    f"data file '{root / rel}' is not UTF-8 ({e.reason} at byte {e.start}); "
                    "convert it to UTF-8 or leave it out of data.path"
                ) from None
        blobs.append(data)
    is_val = split_by_file(rels, val_fraction)
    train = b"\n".join(b for b, v in zip(blobs, is_val) if not v)
    val = b"\n".join(b for b, v in zip(blobs, is_val) if v)
    split = "files"
    n_val_files = sum(is_val)
    n_train_files = len(rels) - n_val_files
    if not train or not val:  # a split is empty: hold out the tail bytes instead
        split = "bytes"
        joined = b"\n".join(blobs)
        if len(joined) < 2:
            raise PosxError(
                f"{where} holds {len(joined)} byte(s) of text, too few to split into "
                "train and validation; add more text"
            )
        cut = len(joined) - max(1, int(len(joined) * val_fraction))
        train, val = joined[:cut], joined[cut:]
        starts = np.cumsum([0] + [len(b) + 1 for b in blobs[:-1]])
        ends = starts + np.array([len(b) for b in blobs])
        n_train_files = int((starts < cut).sum())
        n_val_files = int((ends > cut).sum())
    sha = hashlib.sha256(train)
    sha.update(val)
    return train, val, {
        "source": source, "root": str(root), "files": len(rels),
        "train_files": n_train_files, "val_files": n_val_files,
        "bytes": len(train) + len(val), "train_bytes": len(train), "val_bytes": len(val),
        "sha256": sha.hexdigest(), "python": platform.python_version(),
        "val_fraction": val_fraction, "split": split,
    }  # fmt: skip


# ---------------------------------------------------------------- cache


def _cache_key(source, root: Path, rels: list[str], val_fraction: float) -> str:
    h = hashlib.sha1()
    head = [CACHE_FORMAT, source, str(root), platform.python_version(), repr(val_fraction)]
    h.update(json.dumps(head).encode())
    for rel in rels:
        try:
            st = (root / rel).stat()
        except OSError as e:
            raise unreadable(root / rel, e) from None
        h.update(f"\0{rel}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()[:20]


def _cache_paths(cache_dir: Path, key: str) -> tuple[Path, Path, Path]:
    stem = f"corpus-{key}"
    return cache_dir / f"{stem}.train.bin", cache_dir / f"{stem}.val.bin", cache_dir / f"{stem}.json"


def _load_cache(cache_dir: Path, key: str) -> Corpus | None:
    """The cached corpus, or None when it is missing or does not check out."""
    train_p, val_p, meta_p = _cache_paths(cache_dir, key)
    try:
        meta = json.loads(meta_p.read_text())
        fp = meta["fingerprint"]
        if meta.get("key") != key or meta.get("format") != CACHE_FORMAT:
            return None
        if train_p.stat().st_size != fp["train_bytes"] or val_p.stat().st_size != fp["val_bytes"]:
            return None
        if fp["train_bytes"] < 1 or fp["val_bytes"] < 1:
            return None
        train = torch.from_numpy(np.fromfile(train_p, dtype=np.uint8))
        val = torch.from_numpy(np.fromfile(val_p, dtype=np.uint8))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if train.numel() != fp["train_bytes"] or val.numel() != fp["val_bytes"]:
        return None
    return Corpus(train=train, val=val, fingerprint=fp)


def _write_cache(cache_dir: Path, key: str, train: bytes, val: bytes, fp: dict) -> None:
    train_p, val_p, meta_p = _cache_paths(cache_dir, key)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        files.write_bytes(train_p, train)
        files.write_bytes(val_p, val)
        # The sidecar goes last: it is what marks the cache as complete.
        meta = {"format": CACHE_FORMAT, "key": key, "fingerprint": fp}
        files.write_bytes(meta_p, (json.dumps(meta, indent=1) + "\n").encode())
    except OSError as e:
        raise PosxError(
            f"cannot write the corpus cache in '{cache_dir}': {e.strerror or e}; "
            "set data.cache_dir to a writable directory"
        ) from None


def _to_tensor(data: bytes) -> torch.Tensor:
    return torch.from_numpy(np.frombuffer(data, dtype=np.uint8).copy())


# ---------------------------------------------------------------- public API


def load_corpus(
    source: str,
    path: str | None = None,
    val_fraction: float = 0.05,
    cache_dir: str | Path = "results/cache",
    console=None,
) -> Corpus:
    """Load (from cache, else build and cache) the byte corpus of ``source``."""
    if (
        isinstance(val_fraction, bool)
        or not isinstance(val_fraction, (int, float))
        or not math.isfinite(val_fraction)
        or not 0 < val_fraction <= 0.5
    ):
        raise PosxError(
            f"data.val_fraction must be in (0, 0.5], got {val_fraction!r}; "
            "set data.val_fraction to e.g. 0.05"
        )
    val_fraction = float(val_fraction)
    root, rels = select_files(source, path)
    cache_dir = Path(cache_dir)
    key = _cache_key(source, root, rels, val_fraction)
    cached = _load_cache(cache_dir, key)
    if cached is not None:
        return cached
    start = time.perf_counter()
    where = f"data.path '{path}'" if source == "text" else f"the standard library at '{root}'"
    train, val, fp = _build(source, root, rels, val_fraction, where)
    _write_cache(cache_dir, key, train, val, fp)
    if console is not None:
        console.print(
            f"built {source} corpus: {fp['files']} files, {fp['bytes'] / 1e6:.1f} MB "
            f"(val {fp['val_bytes'] / 1e6:.2f} MB, split by {fp['split']}) "
            f"in {time.perf_counter() - start:.2f} s",
            markup=False,
            highlight=False,
        )
    return Corpus(train=_to_tensor(train), val=_to_tensor(val), fingerprint=fp)


def require_tokens(tokens: torch.Tensor, needed: int, what: str) -> None:
    """Raise PosxError when ``tokens`` holds fewer than ``needed`` tokens."""
    n = len(tokens)  # a 1-D tensor or a numpy array (a token store's memmap)
    if n < needed:
        raise PosxError(
            f"{what} has {n} tokens, fewer than the {needed} needed; "
            "use more data or a shorter context length"
        )


def get_batch(
    tokens: torch.Tensor, batch_size: int, context_length: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of ``tokens``: x and y (B, T) int64, y shifted by one.

    Offsets are drawn on the CPU with ``generator``; the result lives on ``tokens.device``
    (the CPU for a numpy array, e.g. a token store's memmap, of which only the windows are read).
    """
    if batch_size < 1 or context_length < 1:
        raise PosxError(
            f"batch size and context length must be at least 1, got {batch_size} and "
            f"{context_length}; fix train.batch_size / train.context_length"
        )
    n = len(tokens)
    if n < context_length + 1:
        raise PosxError(
            f"data has {n} tokens, fewer than one window of {context_length + 1}; "
            "use more data or a shorter train.context_length"
        )
    offsets = torch.randint(0, n - context_length, (batch_size,), generator=generator)
    idx = offsets[:, None] + torch.arange(context_length + 1)  # (B, T + 1)
    if isinstance(tokens, np.ndarray):
        windows = torch.from_numpy(tokens[idx.numpy()].astype(np.int64))  # (B, T + 1)
    else:
        windows = tokens.reshape(-1)[idx.to(tokens.device)].long()  # (B, T + 1)
    return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


def as_long(tokens) -> torch.Tensor:
    """A 1-D tensor or numpy array (a memmap slice) as an int64 tensor."""
    if isinstance(tokens, np.ndarray):
        return torch.from_numpy(tokens.astype(np.int64))
    return tokens.long()
