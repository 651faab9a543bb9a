"""Writing a store's split files: ids appended as documents stream by, text encoded in batches of
about ``BATCH_BYTES`` with ``encode_batch``, cut where the tokenizer allows (``tokenizer.pieces``)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from posx.core.progress import Reporter, rate
from posx.data import tokenizer as tok_mod

BATCH_BYTES = 8 << 20  # text per tokenizer batch


class SplitFile:
    """One split being written: token ids appended to a file, document starts recorded."""

    def __init__(self, path: Path, dtype: np.dtype, separator: np.ndarray):
        self.path, self.dtype, self.separator = path, dtype, separator.astype(dtype)
        self.f = open(path, "wb")
        self.n = 0  # tokens written
        self.starts: list[int] = []  # document starts
        self.text_bytes = 0  # source bytes behind the tokens (separators count 1; counted as they arrive)

    def _open_doc(self) -> None:
        if not self.starts:
            self.starts.append(self.n)

    def begin(self) -> None:
        self.starts.append(self.n)

    def sep(self) -> None:
        self._open_doc()
        self.f.write(self.separator.tobytes())
        self.n += len(self.separator)

    def write(self, ids: np.ndarray) -> None:
        self._open_doc()
        self.f.write(ids.astype(self.dtype).tobytes())
        self.n += len(ids)

    def close(self) -> None:
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()


class Encoder:
    """Writes a split's elements, text encoded in batches of about ``BATCH_BYTES``, in pieces
    (``tokenizer.pieces``) where ``Tokenizer.cuts_at_lines``: a document's tail after its last safe
    cut waits until the document goes on or ends. The byte tokenizer writes the bytes as they are."""

    def __init__(self, tok: tok_mod.Tokenizer, files: list[SplitFile], progress: Reporter):
        self.tok, self.files, self.progress = tok, files, progress
        self.pending: list[tuple[int, str, Any]] = []  # (side, op, bytes or str)
        self.size = 0  # text bytes pending
        self.carry: tuple[int, str] | None = None  # (side, the unfinished tail of a document)
        self.documents = 0  # source documents begun (a document cut by the byte split counts once)
        self.start = time.perf_counter()

    def add(self, side: int, op: str, chunk: bytes) -> None:
        self.files[side].text_bytes += len(chunk) if op == "text" else int(op == "sep")
        self.size += len(chunk)
        if self.tok.hf is None or op != "text":
            self._release()
            self.pending.append((side, op, chunk))
        else:
            self._text(side, chunk.decode("utf-8", errors="replace"))
        if self.size >= BATCH_BYTES:
            self.flush()

    def _text(self, side: int, text: str) -> None:
        if self.carry is not None and self.carry[0] != side:  # the tail split cuts a document
            self._release()
        text = text if self.carry is None else self.carry[1] + text
        parts = tok_mod.pieces(text, tok_mod.PIECE_CHARS) if self.tok.cuts_at_lines else [text]
        self.pending.extend((side, "text", part) for part in parts[:-1])
        self.carry = side, parts[-1]

    def _release(self) -> None:
        if self.carry is not None:
            self.pending.append((self.carry[0], "text", self.carry[1]))
            self.carry = None

    def flush(self, last: bool = False) -> None:
        if last:
            self._release()
        texts = [c for _, op, c in self.pending if op == "text" and isinstance(c, str)]
        encoded = iter(self.tok.encode_batch(texts)) if texts else None
        for side, op, chunk in self.pending:
            if op == "begin":
                self.files[side].begin()
                self.documents += 1
            elif op == "sep":
                self.files[side].sep()
            else:
                self.files[side].write(next(encoded) if isinstance(chunk, str) else np.frombuffer(chunk, np.uint8))
        self.pending.clear()
        self.size = 0
        mb, seconds = sum(f.text_bytes for f in self.files) / 1e6, time.perf_counter() - self.start
        self.progress.update(self.documents, rate(mb, seconds, self.documents, self.progress.total))  # MB/s, time left
