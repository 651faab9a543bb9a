"""Evaluation windows inside one document (``eval.within_documents``), as the PI and YaRN papers
score PG19 books; too few documents is an error naming the length, not a short score (docs/data.md)."""

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


def plan(
    doc_starts: np.ndarray, n_tokens: int, length: int, stride: int, scored: int, min_document_tokens: int = 0
) -> Plan:
    """Windows of ``length`` every ``stride`` tokens inside documents, scoring ``scored`` tokens."""
    needed = scored // stride  # windows
    starts = np.asarray(doc_starts, dtype=np.int64)
    ends = np.maximum(np.append(starts[1:] - 1, n_tokens), starts)  # a document ends at the next one's separator
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
