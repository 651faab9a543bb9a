"""Token stores: a tokenized corpus on disk, read through memory maps (layout: docs/data.md).

``<data.cache_dir>/store-<key>/``, ``key`` a hash of the sources, split fraction, tokenizer and
Python version; ``store.json``, written last, marks it complete. A store that does not check out
is rebuilt in a temporary directory renamed into place, never trusted. Documents stream through
``posx.data.splitfiles``: the ids are those of each document encoded whole, the corpus never one
string in memory. With the byte tokenizer a store holds the files' bytes, the tokens and
fingerprint of the byte corpus before stores, so old runs resume and re-evaluate on the same data.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import shutil
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
from rich.console import Console

from posx.core import files
from posx.core.errors import PosxError
from posx.core.progress import Reporter, rate
from posx.data import sources, splitfiles
from posx.data import tokenizer as tok_mod
from posx.schema.config import DataConfig
from posx.schema.fields import plain

STORE_FORMAT = 1  # bump when the layout or the construction changes
PROGRESS_S = 0.2  # the least time between two progress updates while a BPE trains
DATA_KEYS = (
    "source", "path", "val_fraction", "tokenizer", "vocab_size", "name", "config_name", "data_files", "split",
    "text_column",
)  # fmt: skip
# what a run recorded before these keys existed (posx.schema.config.DataConfig's defaults)
DEFAULTS = {
    "source": "stdlib",
    "val_fraction": 0.05,
    "tokenizer": tok_mod.BYTE,
    "vocab_size": 8192,
    "split": "train",
    "text_column": "text",
}


@dataclass
class Store:
    path: Path  # the store directory
    train: np.ndarray  # (N_train,) token ids, a read-only memmap
    val: np.ndarray  # (N_val,) token ids, a read-only memmap
    train_docs: np.ndarray  # (D_train,) int64: where each training document starts
    val_docs: np.ndarray  # (D_val,) int64: where each held-out document starts
    tokenizer: tok_mod.Tokenizer  # encodes and decodes the ids
    fingerprint: dict  # JSON-serialisable description (recorded in model.json)


def data_config(dcfg: DataConfig | Mapping) -> dict:
    """The data keys a run records and a store is built from (absent keys None)."""
    data = plain(dcfg) if isinstance(dcfg, DataConfig) else dcfg
    return {k: data.get(k) for k in DATA_KEYS}


def check_val_fraction(val_fraction) -> float:
    if (
        isinstance(val_fraction, bool)
        or not isinstance(val_fraction, (int, float))
        or not math.isfinite(val_fraction)
        or not 0 < val_fraction <= 0.5
    ):
        raise PosxError(
            f"data.val_fraction must be in (0, 0.5], got {val_fraction!r}; set data.val_fraction to e.g. 0.05"
        )
    return float(val_fraction)


def split_by_file(ids: list[str], val_fraction: float) -> list[bool]:
    """Whether each document is held out: a hash of its id (a file's relative path) below ``val_fraction``."""
    limit = val_fraction * 10_000
    return [int(hashlib.sha1(i.encode()).hexdigest(), 16) % 10_000 < limit for i in ids]


def _elements(
    source: sources.Source, is_val: list[bool], cut: int | None, exact_cut: bool, counts: dict
) -> Iterator[tuple[int, str, bytes]]:
    """(split 0 train / 1 val, op, chunk): ``begin`` a document, a ``sep`` between two, ``text``. With
    ``cut`` (the tail split) the stream goes to train up to byte ``cut`` (inside a UTF-8 character only
    with ``exact_cut``); ``counts`` gets the documents with a byte on each side."""
    pos = 0  # bytes of the joined stream so far (tail split)
    seen = [0, 0]  # documents begun per split
    for i, chunks in enumerate(source.documents()):
        if cut is None:
            side = int(is_val[i])
            if seen[side]:
                yield side, "sep", b""
            seen[side] += 1
            yield side, "begin", b""
            for chunk in chunks:
                yield side, "text", chunk
            continue
        if i:
            yield int(pos >= cut), "sep", b""
            pos += 1
        start = pos
        yield int(pos >= cut), "begin", b""
        for chunk in chunks:
            if pos < cut < pos + len(chunk):
                k = cut - pos if exact_cut else sources.char_boundary(chunk, cut - pos)
                yield 0, "text", chunk[:k]
                yield 1, "text", chunk[k:]
            else:
                yield int(pos >= cut), "text", chunk
            pos += len(chunk)
        counts["train"] += start < cut
        counts["val"] += pos > cut
    if cut is None:
        counts["train"], counts["val"] = seen


def _train_texts(source, is_val, cut, progress: Reporter) -> Iterator[str]:
    """The training split's text, chunk by chunk (what a BPE trains on), with progress."""
    start = shown = time.perf_counter()
    documents, read = 0, 0
    for side, op, chunk in _elements(source, is_val, cut, False, {"train": 0, "val": 0}):
        if op == "begin":
            documents += 1
            if (now := time.perf_counter()) - shown >= PROGRESS_S:
                progress.update(documents, rate(read / 1e6, now - start, documents, progress.total))
                shown = now
        elif side == 0 and op == "text":
            read += len(chunk)
            yield chunk.decode("utf-8", errors="replace")
    progress.update(progress.total, f"{read / 1e6:.1f} MB read; computing the merges")


def _make_tokenizer(dcfg: dict, source, is_val, cut, console: Console) -> tok_mod.Tokenizer:
    """The tokenizer of ``data.tokenizer``; a BPE is trained on the training split first."""
    spec = dcfg["tokenizer"]
    if spec == tok_mod.BYTE:
        return tok_mod.byte_tokenizer()
    if spec == tok_mod.BPE:
        with Reporter(console, "train bpe", max(1, len(source.ids))) as progress:
            return tok_mod.train_bpe(_train_texts(source, is_val, cut, progress), dcfg["vocab_size"])
    return tok_mod.from_file(spec)


def _write_splits(source, tok, is_val, cut, tmp: Path, progress: Reporter) -> tuple[list, dict]:
    """Both split files written (train, val) and the documents of each."""
    dtype = tok_mod.dtype_for(tok.vocab_size)
    files = [splitfiles.SplitFile(tmp / name, dtype, tok.separator) for name in ("train.bin", "val.bin")]
    counts = {"train": 0, "val": 0}
    encoder = splitfiles.Encoder(tok, files, progress)
    for element in _elements(source, is_val, cut, tok.hf is None, counts):
        encoder.add(*element)
    encoder.flush(last=True)
    for f in files:
        f.close()
    return files, counts


def _build(source: sources.Source, dcfg: dict, key: str, tmp: Path, console: Console) -> dict:
    """Write a complete store into ``tmp``; returns its store.json."""
    val_fraction = dcfg["val_fraction"]
    is_val = split_by_file(source.ids, val_fraction)
    cut = None
    if not source.ids or all(is_val) or not any(is_val):  # a split is empty: hold out the tail
        total = sum(source.sizes()) + max(0, len(source.ids) - 1)
        if total < 2:
            raise PosxError(
                f"{source.where} holds {total} byte(s) of text, too few to split into "
                "train and validation; add more text"
            )
        cut = total - max(1, int(total * val_fraction))
    tok = _make_tokenizer(dcfg, source, is_val, cut, console)
    with Reporter(console, "prepare", max(1, len(source.ids))) as progress:
        (train, val), counts = _write_splits(source, tok, is_val, cut, tmp, progress)
    if train.n < 1 or val.n < 1:
        raise PosxError(
            f"{source.where} gives {train.n} training and {val.n} held-out tokens; "
            "both splits need tokens: add more text or raise data.val_fraction"
        )
    with open(tmp / "docs.npz", "wb") as f:
        np.savez(f, train=np.asarray(train.starts, dtype=np.int64), val=np.asarray(val.starts, dtype=np.int64))
    if tok.hf is not None:
        (tmp / "tokenizer.json").write_text(tok.to_json(), encoding="utf-8")
    fingerprint = {
        **source.info, "train_files": counts["train"], "val_files": counts["val"],
        "bytes": train.text_bytes + val.text_bytes, "train_bytes": train.text_bytes, "val_bytes": val.text_bytes,
        "sha256": files.sha256_file(train.path, val.path), "python": platform.python_version(),
        "val_fraction": val_fraction, "split": "files" if cut is None else "bytes",
        "tokens": train.n + val.n, "train_tokens": train.n, "val_tokens": val.n,
        "documents": {"train": len(train.starts), "val": len(val.starts)},
        "tokenizer": tok.describe(), "dtype": str(tok_mod.dtype_for(tok.vocab_size)),
    }  # fmt: skip
    meta = {"format": STORE_FORMAT, "key": key, "data": dcfg, "fingerprint": fingerprint}
    (tmp / "store.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return meta


def open_store(path: Path, key: str | None = None) -> Store | None:
    """The store in ``path``, or None when it is missing or does not check out."""
    try:
        meta = json.loads((path / "store.json").read_text(encoding="utf-8"))
        fp = meta["fingerprint"]
        if meta.get("format") != STORE_FORMAT or (key is not None and meta.get("key") != key):
            return None
        kind, saved = fp["tokenizer"]["kind"], path / "tokenizer.json"
        if kind == tok_mod.BYTE:
            tok = tok_mod.byte_tokenizer()
        else:
            tok = tok_mod.from_json(saved.read_text(encoding="utf-8"), kind, str(saved))
        if tok.sha256 != fp["tokenizer"]["sha256"]:
            return None
        dtype = np.dtype(fp["dtype"])
        arrays = []
        for split in ("train", "val"):
            n = int(fp[f"{split}_tokens"])
            if n < 1 or (path / f"{split}.bin").stat().st_size != n * dtype.itemsize:
                return None
            arrays.append(np.memmap(path / f"{split}.bin", dtype=dtype, mode="r", shape=(n,)))
        with np.load(path / "docs.npz") as docs:
            train_docs, val_docs = docs["train"], docs["val"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, PosxError):
        return None
    return Store(path, arrays[0], arrays[1], train_docs, val_docs, tok, fp)


def load(dcfg: DataConfig | Mapping, cache_dir: str | Path, console: Console | None = None) -> Store:
    """The store of a data config: found under ``cache_dir``, else built there (and reported)."""
    dcfg = {k: v if v is not None else DEFAULTS.get(k) for k, v in data_config(dcfg).items()}
    dcfg["val_fraction"] = check_val_fraction(dcfg["val_fraction"])
    source = sources.open_source(dcfg, cache_dir)
    spec = tok_mod.spec(dcfg["tokenizer"], dcfg["vocab_size"])
    head = [STORE_FORMAT, source.kind, source.key, repr(dcfg["val_fraction"]), platform.python_version(), spec]
    key = hashlib.sha1(json.dumps(head, sort_keys=True, default=str).encode()).hexdigest()[:20]
    final = Path(cache_dir) / f"store-{key}"
    found = open_store(final, key)
    if found is not None:
        return found
    console = console or Console(quiet=True)
    start = time.perf_counter()
    tmp = Path(cache_dir) / f".store-{key}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        tmp.mkdir(parents=True)
        meta = _build(source, dcfg, key, tmp, console)
        _install(tmp, final)
    except OSError as e:
        raise PosxError(
            f"cannot write the token store in '{cache_dir}': {e.strerror or e}; "
            "set data.cache_dir to a writable directory with free space"
        ) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    store = open_store(final, key)
    if store is None:
        raise PosxError(f"the token store {final} did not check out after building it; remove it and retry")
    seconds = time.perf_counter() - start
    fp = meta["fingerprint"]
    kind = tok_mod.kind_label(fp["tokenizer"]["kind"])
    console.print(
        f"built {fp['source']} corpus: {fp['files']} documents"
        f"{f' (skipped {skipped} binary or cache files)' if (skipped := fp.get('skipped')) else ''}, "
        f"{fp['bytes'] / 1e6:.1f} MB -> "
        f"{fp['tokens']:,} {kind} tokens (vocab {fp['tokenizer']['vocab_size']}, "
        f"val {fp['val_tokens']:,}, split by {fp['split']}) in {seconds:.2f} s "
        f"({fp['bytes'] / 1e6 / max(seconds, 1e-9):.1f} MB/s, {fp['tokens'] / max(seconds, 1e-9):,.0f} tokens/s)",
        markup=False,
        highlight=False,
    )
    return store


def _install(tmp: Path, final: Path) -> None:
    """Rename the built store into place; a bad one there is removed, one another process finished kept."""
    if final.exists():
        if open_store(final) is not None:
            return
        trash = final.with_name(f".{final.name}.bad-{uuid.uuid4().hex[:8]}")
        os.rename(final, trash)
        shutil.rmtree(trash, ignore_errors=True)
    try:
        os.rename(tmp, final)
    except OSError:
        if open_store(final) is None:
            raise
