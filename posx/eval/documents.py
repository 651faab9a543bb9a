"""Evaluation windows that stay inside one document (``eval.within_documents``).

The PI and YaRN papers score long-context perplexity on whole documents (PG19 books,
proof-pile files; Chen et al. 2023, Peng et al. 2023, and the scripts of
github.com/jquesnelle/yarn), so a window never mixes two unrelated texts. Here a document of
the held-out split is the span between two separators (``posx.data.store``: ``b"\\n"`` for the byte
tokenizer, the end-of-document token otherwise); the separator itself is never in a window.

At length L with stride S, a document [a, b) gives windows starting at a, a + S, a + 2S, ...
while the window and its targets fit (start + L + 1 <= b): every token read is the
document's. Documents with fewer than max(L + 1, eval.min_document_tokens) tokens are
skipped; setting ``min_document_tokens`` to the longest length scores every length on the
same documents. Windows are taken document by document, in order, until the requested number
of tokens is scored; fewer available is an error naming the length, not a short score.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from posx.core.errors import PosxError


@dataclass
class Plan:
    """Where the windows of one length start, and what they cover."""

    starts: list[int]  # window offsets in the held-out split, in order
    documents: int  # distinct documents the windows come from
    tokens: int  # scored tokens (len(starts) * stride)


def spans(doc_starts: np.ndarray, n_tokens: int, separator: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of each document: it ends where the next document's separator begins."""
    starts = np.asarray(doc_starts, dtype=np.int64)
    ends = np.append(starts[1:] - separator, n_tokens)  # (D,)
    return starts, np.maximum(ends, starts)


def plan(
    doc_starts: np.ndarray, n_tokens: int, length: int, stride: int, scored: int, min_document_tokens: int = 0
) -> Plan:
    """Windows of ``length`` every ``stride`` tokens inside documents, scoring ``scored`` tokens."""
    needed = scored // stride  # windows
    starts, ends = spans(doc_starts, n_tokens)
    shortest = max(length + 1, min_document_tokens)
    out: list[int] = []
    documents = 0
    for a, b in zip(starts.tolist(), ends.tolist()):
        if b - a < shortest:
            continue
        room = (b - a - length - 1) // stride + 1  # windows that fit in [a, b)
        take = min(room, needed - len(out))
        out.extend(range(a, a + take * stride, stride))
        documents += 1
        if len(out) == needed:
            return Plan(out, documents, scored)
    usable = int(((ends - starts) >= shortest).sum())
    raise PosxError(
        f"eval.within_documents: {usable} held-out documents have at least {shortest} tokens and give "
        f"{len(out) * stride} of the {scored} tokens eval.tokens asks for at length {length}; lower eval.tokens, "
        "eval.factors or eval.min_document_tokens, or use a corpus with longer documents"
    )
