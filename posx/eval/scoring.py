"""Scoring protocols for evaluation: which tokens are scored, with how much context.

Both protocols run windows of ``length`` tokens through the model and keep, for every
position inside the window, the summed NLL and the count of the tokens scored there, so a
per-position curve and the overall NLL come from the same numbers.

* ``nonoverlapping``: windows ``[0, L), [L, 2L), ...``; every token of every window is scored.
  A token at window position p has p tokens of context (ALiBi paper, lm-evaluation-harness).
* ``sliding``: windows start every ``stride`` tokens, ``[0, L), [S, S+L), ...``; each window
  scores only its last ``stride`` positions, ``L - S .. L - 1``. The scored targets of
  successive windows are contiguous and disjoint, so each token is scored exactly once, and
  each with at least ``L - S`` tokens of context, the first window included (the PI and YaRN
  papers use S = 256; their code also scores the whole first window, which this does not).
  With ``stride = L`` it is the non-overlapping protocol.

The NLL is averaged over tokens. Per-token NLLs are computed in float32 and summed in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from posx.data.corpus import as_long, require_tokens
from posx.core.errors import PosxError
from posx.core.device import autocast

PROTOCOLS = ("nonoverlapping", "sliding")


@dataclass
class Scores:
    """Summed NLL and scored-token count at each position of the window."""

    nll_sum: np.ndarray  # (L,) float64
    count: np.ndarray  # (L,) int64

    @property
    def total(self) -> float:
        return float(self.nll_sum.sum())

    @property
    def tokens(self) -> int:
        return int(self.count.sum())


def stride_for(protocol: str, stride: int | None, train_context: int, length: int) -> int:
    """Tokens scored per window: L for nonoverlapping; eval.stride (null: T/2) for sliding."""
    if protocol == "nonoverlapping":
        return length
    if protocol != "sliding":
        raise PosxError(f"eval.protocol={protocol} is unknown; choose one of {', '.join(PROTOCOLS)}")
    s = stride if stride is not None else max(1, train_context // 2)
    if not 1 <= s <= length:
        raise PosxError(f"eval.stride={s} must be between 1 and the evaluation length {length}; "
                        f"use a stride of at most T={train_context}")
    return s


def tokens_for(protocol: str, requested: int, lengths: list[int], strides: list[int]) -> int:
    """Scored tokens per length, the same at every length: a multiple of every window step."""
    steps = lengths if protocol == "nonoverlapping" else strides
    step = math.lcm(*steps)
    tokens = -(-requested // step) * step
    if tokens > 64 * max(requested, max(steps)):
        raise PosxError(f"the window steps {steps} have a common multiple ({step}) far above eval.tokens; "
                        "use factors (or an eval.stride) whose lengths share divisors, e.g. [1,2,4,8]")
    return tokens


def tokens_needed(length: int, stride: int, n_tokens: int) -> int:
    """Held-out tokens read: the last window starts at n_tokens - stride, plus its target."""
    return n_tokens - stride + length + 1


@torch.no_grad()
def score(model, tokens: torch.Tensor, length: int, stride: int, n_tokens: int, batch_tokens: int,
          device: torch.device, starts: list[int] | None = None) -> Scores:
    """Score ``n_tokens`` targets of ``tokens`` with windows of ``length`` every ``stride`` tokens.

    Window k covers tokens[k*S : k*S + L] and scores its positions L-S .. L-1, whose targets
    are tokens[k*S + L-S + 1 .. k*S + L]. ``n_tokens`` must be a multiple of ``stride``.
    ``starts``: the windows' offsets instead of k*S (``posx.eval.documents``: windows inside
    documents).
    """
    if n_tokens % stride:
        raise PosxError(f"{n_tokens} scored tokens is not a multiple of the stride {stride}")
    if starts is None:
        needed = tokens_needed(length, stride, n_tokens)
        starts = list(range(0, n_tokens, stride))
    else:
        needed = max(starts) + length + 1
    require_tokens(tokens, needed, f"the held-out split for {n_tokens} tokens at length {length}")
    first = length - stride  # first scored window position
    per_batch = max(1, batch_tokens // length)
    nll_sum = torch.zeros(length, dtype=torch.float64)
    count = torch.zeros(length, dtype=torch.int64)
    for b in range(0, len(starts), per_batch):
        batch = starts[b:b + per_batch]
        w = torch.stack([as_long(tokens[s:s + length + 1]) for s in batch])  # (B, L + 1)
        x, y = w[:, :-1].to(device), w[:, 1:].to(device)  # (B, L) each
        with autocast(device):
            logits = model(x)  # (B, L, vocab)
        nll = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none")  # (B*L,)
        nll = nll.view(len(batch), length)[:, first:]  # (B, S): the scored positions only
        nll_sum[first:] += nll.double().sum(0).cpu()
        count[first:] += len(batch)
    return Scores(nll_sum.numpy(), count.numpy())


def bucket_width_for(width: int | None, train_context: int) -> int:
    """eval.bucket_width, or T/8 when it is null."""
    return width if width is not None else max(1, train_context // 8)


def buckets(scores: Scores, width: int) -> list[tuple[int, int, float, int]]:
    """(start, end, nll_sum, count) for each bucket [start, end) of window positions that
    holds scored tokens; every scored position falls in exactly one bucket."""
    out = []
    length = len(scores.count)
    for start in range(0, length, width):
        end = min(start + width, length)
        n = int(scores.count[start:end].sum())
        if n:
            out.append((start, end, float(scores.nll_sum[start:end].sum()), n))
    return out
