"""Where a corpus's documents come from (``data.source``: stdlib, text, datasets; docs/data.md),
read as chunks of at most ``CHUNK`` bytes cut after a newline. A dataset row whose text is not a
string is refused, naming it, rather than skipped: a skipped row would change the corpus silently.
"""

from __future__ import annotations

import codecs
import glob
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from posx.core.errors import PosxError, unknown
from posx.data import hfdatasets

SOURCES = ("stdlib", "text", "datasets")
CHUNK = 1 << 20  # bytes per chunk handed to a tokenizer
_STDLIB_SKIP = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"})
_SKIP_DIRS = frozenset({"__pycache__"})  # cache directories a text corpus leaves out
_BINARY_SUFFIXES = frozenset({".pyc", ".pyo"})
SNIFF = 8192  # bytes read to tell text from binary


@dataclass
class Source:
    kind: str  # stdlib | text | datasets
    where: str  # names the corpus in error messages
    ids: list[str]  # one per document, in order; the train/val split hashes them
    key: list  # JSON-able identity for the store's cache key (paths, sizes, mtimes; dataset fingerprint)
    info: dict  # fingerprint fields: source, root or dataset, files
    documents: Callable[[], Iterator[Iterator[bytes]]]  # each document as UTF-8 chunks, in order
    sizes: Callable[[], list[int]]  # bytes of each document (for the tail split)


def char_boundary(data: bytes, cut: int) -> int:
    """The largest index <= ``cut`` that does not split a UTF-8 character of ``data``."""
    while 0 < cut < len(data) and data[cut] & 0xC0 == 0x80:
        cut -= 1
    return cut


def _chunks(blocks: Iterator[bytes]) -> Iterator[bytes]:
    """Re-cut ``blocks`` so every chunk but the last ends with a newline (or is a long line)."""
    carry = b""
    for block in blocks:
        carry += block
        cut = carry.rfind(b"\n")
        if cut < 0 and len(carry) < 4 * CHUNK:
            continue
        cut = char_boundary(carry, len(carry)) if cut < 0 else cut + 1
        if cut:
            yield carry[:cut]
        carry = carry[cut:]
    if carry:
        yield carry


def _walk(root: Path, keep_dir, keep_file) -> list[str]:
    """Relative POSIX paths of files under ``root`` (no symlinked dirs followed), sorted."""
    rels = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if keep_dir(d) and not _posx_output(Path(dirpath) / d)]
        rel_dir = Path(dirpath).relative_to(root)
        for name in filenames:
            if keep_file(name) and os.path.isfile(os.path.join(dirpath, name)):
                rels.append((rel_dir / name).as_posix())
    return sorted(rels)


RESULTS_PARTS = ("runs", "sweeps", "reports", "cache")  # what posx writes under a results directory
REPORT_MARKERS = ("summary.csv", "missing.csv", "groups.csv")  # every report directory holds all three
SWEEP_MARKERS = ("multirun.yaml", "sweep.csv")  # Hydra's record of a sweep, posx's sweep table
RUN_MARKERS = ("model.json", "metrics.csv", "checkpoint")  # any of them beside a config.yaml


def _posx_output(path: Path) -> bool:
    """A directory posx wrote (by its marker files), or a results directory holding one."""
    return _posx_leaf(path) or any(
        (path / part).is_dir() and any(_posx_leaf(child) for child in (path / part).iterdir() if child.is_dir())
        for part in RESULTS_PARTS
    )


def _posx_leaf(path: Path) -> bool:
    def has(names: tuple[str, ...]) -> list[bool]:
        return [(path / name).exists() for name in names]

    run = (path / "config.yaml").is_file() and any(has(RUN_MARKERS))
    return (path / "store.json").is_file() or all(has(REPORT_MARKERS)) or any(has(SWEEP_MARKERS)) or run


def looks_binary(path: Path) -> bool:
    """Whether a file is not text by its first bytes (a NUL among the first ``SNIFF`` bytes)."""
    try:
        with open(path, "rb") as f:
            return b"\0" in f.read(SNIFF)
    except OSError as e:
        raise unreadable(path, e) from None


def _skip_binary(root: Path, rels: list[str], exclude: Path | None) -> tuple[list[str], int]:
    """``rels`` less cache files, binary files and those under ``exclude``; and how many were left out."""
    kept = []
    for rel in rels:
        full = root / rel
        if Path(rel).suffix in _BINARY_SUFFIXES or _SKIP_DIRS.intersection(Path(rel).parts[:-1]):
            continue
        if exclude is not None and full.resolve().is_relative_to(exclude):
            continue
        if not looks_binary(full):
            kept.append(rel)
    return kept, len(rels) - len(kept)


def _stdlib_files(path: str | None) -> tuple[Path, list[str]]:
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


def _text_files(path: str | None, exclude: Path | None = None) -> tuple[Path, list[str], int]:
    if not path:
        raise PosxError("data.source 'text' needs data.path; point data.path at a UTF-8 text file, directory or glob")
    expanded = os.path.expanduser(str(path))
    if os.path.isfile(expanded):
        full = Path(expanded).resolve()
        return full.parent, [full.name], 0
    if os.path.isdir(expanded):
        root = Path(expanded).resolve()
        found = _walk(root, lambda d: not d.startswith("."), lambda f: not f.startswith("."))
        none = f"data.path '{path}' is a directory with no (non-hidden) files"
        fix = "put UTF-8 text files in it or point data.path elsewhere"
    elif any(c in expanded for c in "*?["):
        matches = sorted({Path(m).resolve() for m in glob.glob(expanded, recursive=True) if os.path.isfile(m)})
        root = Path(os.path.commonpath([str(m.parent) for m in matches])) if matches else Path()
        found = [m.relative_to(root).as_posix() for m in matches]
        none = f"data.path glob '{path}' matches no files"
        fix = "fix the pattern or point data.path at a UTF-8 text file or directory"
    elif os.path.lexists(expanded):  # a FIFO, a device, a socket, a link that leads nowhere or loops
        raise PosxError(
            f"data.path '{path}' is neither a regular file nor a directory (a pipe, a device, or a link that leads "
            "nowhere or to itself); point data.path at a UTF-8 text file, directory or glob"
        )
    else:
        raise PosxError(f"data.path '{path}' does not exist; point data.path at a UTF-8 text file, directory or glob")
    rels, skipped = _skip_binary(root, found, exclude)
    if not rels:
        besides = f" besides {skipped} binary or cache files (skipped)" if skipped else ""
        raise PosxError(f"{none}{besides}; {fix}")
    return root, rels, skipped


def select_files(source: str, path: str | None = None, exclude: Path | None = None) -> tuple[Path, list[str], int]:
    """(resolved root, sorted relative POSIX paths, files skipped) of ``stdlib`` or ``text``, none under ``exclude``."""
    if source == "stdlib":
        return (*_stdlib_files(path), 0)
    if source == "text":
        return _text_files(path, exclude)
    raise PosxError(f"data.source '{source}' is not read from files; choose stdlib or text")


def unreadable(path: Path, e: OSError) -> PosxError:
    return PosxError(
        f"cannot read data file '{path}': {e.strerror or e}; fix its permissions or leave it out of data.path"
    )


def _file_chunks(path: Path, check_utf8: bool) -> Iterator[bytes]:
    """A file in chunks; with ``check_utf8``, a one-line error naming the file if it is not UTF-8."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    try:
        f = open(path, "rb")
    except OSError as e:
        raise unreadable(path, e) from None
    with f:

        def blocks() -> Iterator[bytes]:
            nonlocal offset
            while True:
                try:
                    block = f.read(CHUNK)
                except OSError as e:
                    raise unreadable(path, e) from None
                if check_utf8:
                    try:
                        decoder.decode(block, final=not block)
                    except UnicodeDecodeError as e:
                        raise PosxError(
                            f"data file '{path}' is not UTF-8 ({e.reason} at byte {offset + e.start}); "
                            "convert it to UTF-8 or leave it out of data.path"
                        ) from None
                if not block:
                    return
                offset += len(block)
                yield block

        yield from _chunks(blocks())


def file_source(kind: str, path: str | None, exclude: Path | None = None) -> Source:
    """``stdlib`` or ``text``: one document per file (none from under ``exclude``)."""
    root, rels, skipped = select_files(kind, path, exclude)
    where = f"data.path '{path}'" if kind == "text" else f"the standard library at '{root}'"
    stats = []
    for rel in rels:
        try:
            st = (root / rel).stat()
        except OSError as e:
            raise unreadable(root / rel, e) from None
        stats.append([rel, st.st_size, st.st_mtime_ns])

    def documents() -> Iterator[Iterator[bytes]]:
        for rel in rels:
            yield _file_chunks(root / rel, check_utf8=kind == "text")

    info = {"source": kind, "root": str(root), "files": len(rels), **({"skipped": skipped} if skipped else {})}
    return Source(kind, where, rels, [str(root), stats], info, documents, lambda: [s[1] for s in stats])


def datasets_source(
    name: str | None, config_name: str | None, data_files: Any, split: str, text_column: str, cache_dir: str | Path
) -> Source:
    """A ``datasets`` dataset, one document per row of ``text_column`` (loaded by ``posx.data.hfdatasets``)."""
    rows = hfdatasets.load_rows(name, config_name, data_files, split, text_column, cache_dir)
    ds = rows.dataset

    def documents() -> Iterator[Iterator[bytes]]:
        for batch in ds.iter(batch_size=1024):
            for text in batch[text_column]:
                yield _chunks(iter([text.encode("utf-8")]))

    def sizes() -> list[int]:
        return [len(t.encode("utf-8")) for b in ds.iter(batch_size=1024) for t in b[text_column]]

    info = {
        "source": "datasets",
        "root": rows.what,
        "files": len(ds),
        "dataset": name,
        "config_name": config_name,
        "split": split,
        "text_column": text_column,
    }
    key = [name, config_name, repr(rows.files), split, text_column, hfdatasets.data_key(ds, text_column, cache_dir)]
    return Source("datasets", rows.what, [str(i) for i in range(len(ds))], key, info, documents, sizes)


def open_source(dcfg: Any, cache_dir: str | Path) -> Source:
    """The source a data config names (``data.source``)."""
    kind = dcfg.get("source", "stdlib")
    if kind in ("stdlib", "text"):
        return file_source(kind, dcfg.get("path"), Path(cache_dir).resolve())
    if kind == "datasets":
        return datasets_source(
            dcfg.get("name"),
            dcfg.get("config_name"),
            dcfg.get("data_files"),
            dcfg.get("split") or "train",
            dcfg.get("text_column") or "text",
            cache_dir,
        )
    raise unknown("data.source", kind, SOURCES)
