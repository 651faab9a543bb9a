"""Bits per byte: the scored tokens' NLL in bits over the UTF-8 bytes they cover, which does not
depend on the tokenizer (docs/evaluation.md). The end-of-document token counts one byte, the
``\\n`` between the byte tokenizer's documents, so both score the same text.
"""

from __future__ import annotations

import math

import numpy as np
from tokenizers import decoders

LN2 = math.log(2)


def token_bytes(tokenizer) -> np.ndarray:
    """(vocab_size,) int64: bytes of text each token id covers."""
    hf = None if tokenizer is None else tokenizer.hf
    if hf is None:
        return np.ones(256, dtype=np.int64)
    counts = np.zeros(tokenizer.vocab_size, dtype=np.int64)
    byte_level = isinstance(hf.decoder, decoders.ByteLevel)
    added = {i for i in hf.get_added_tokens_decoder()}
    for i in range(tokenizer.vocab_size):
        piece = hf.id_to_token(i) or ""
        if i == tokenizer.eod:
            counts[i] = 1
        elif byte_level and i not in added:
            counts[i] = len(piece)
        else:
            counts[i] = len(hf.decode([i], skip_special_tokens=False).encode("utf-8"))
    return counts


def scored_bytes(
    tokens, length: int, stride: int, n_tokens: int, counts: np.ndarray, starts: list[int] | None = None
) -> int:
    """Bytes covered by the targets ``posx.eval.scoring.score`` scores with the same arguments."""
    offsets = starts if starts is not None else range(0, n_tokens, stride)
    total = 0
    for s in offsets:
        targets = np.asarray(tokens[s + length - stride + 1 : s + length + 1], dtype=np.int64)
        total += int(counts[targets].sum())
    return total
