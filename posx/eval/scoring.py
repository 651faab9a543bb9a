"""Scoring protocols: which tokens are scored, with how much context (docs/evaluation.md).

Per window position, the summed NLL and count of scored tokens, so the per-position curve and the
overall NLL come from the same numbers (float32 NLLs summed in float64). ``sliding`` scores each
token once with at least L - S of context, the first window included (unlike the PI and YaRN code).
The interval treats windows as independent draws: how much the number moves with the text scored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from scipy import stats

from posx.core.device import autocast
from posx.core.errors import PosxError, unknown
from posx.data.corpus import as_long, require_tokens
from posx.eval.tables import perplexity
from posx.schema.config import EvalConfig, evaluated_length, rope_scale

PROTOCOLS = ("nonoverlapping", "sliding")


@dataclass
class Scores:
    """Summed NLL and scored-token count at each position of the window."""

    nll_sum: np.ndarray  # (L,) float64
    count: np.ndarray  # (L,) int64
    window_sum: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (n_windows,) summed NLL per window

    @property
    def total(self) -> float:
        return float(self.nll_sum.sum())

    @property
    def tokens(self) -> int:
        return int(self.count.sum())

    def interval(self) -> "Interval":
        """Standard error of the mean NLL over windows and the 95% perplexity interval."""
        return interval(self.window_sum, self.tokens)


def t95(windows: int) -> float:
    """The two-sided 95% quantile of Student's t with windows - 1 degrees of freedom (scipy.stats):
    with few windows (long lengths at a small eval.tokens) the interval widens honestly."""
    return float(stats.t.ppf(0.975, windows - 1))


@dataclass
class Interval:
    nll_se: float  # standard error of the mean NLL (nats), over windows
    ppl_lo: float  # exp(nll - q se), q the 95% t quantile with windows - 1 degrees of freedom
    ppl_hi: float  # exp(nll + q se)
    windows: int  # windows the NLL averages over


def interval(window_sum: np.ndarray, tokens: int) -> Interval:
    """The interval of a mean NLL from its windows' summed NLLs; NaN with under two windows or a non-finite NLL."""
    n = len(window_sum)
    if n < 2 or tokens <= 0 or not np.isfinite(window_sum).all():
        return Interval(math.nan, math.nan, math.nan, n)
    per_window = np.asarray(window_sum, dtype=np.float64) / (tokens / n)
    nll = float(per_window.mean())
    se = float(per_window.std(ddof=1) / math.sqrt(n))
    q = t95(n)
    return Interval(se, perplexity(nll - q * se), perplexity(nll + q * se), n)


def eval_lengths(factors, train_context: int) -> list[int]:
    """The lengths round(factor x T), in order; two factors of one length are refused."""
    lengths: dict[int, float] = {}
    for f in factors:
        L = evaluated_length(f, train_context)
        if L in lengths:
            raise PosxError(
                f"eval.factors {lengths[L]:g} and {f:g} both give length {L} at T={train_context}; "
                "give factors whose lengths differ"
            )
        lengths[L] = f
    return list(lengths)


def eval_rows(ev: EvalConfig, train_context: int) -> list[tuple[float, int]]:
    """(RoPE scale, length) of each length an evaluation scores."""
    return [(rope_scale(ev.scale, L, train_context), L) for L in eval_lengths(ev.factors, train_context)]


def stride_for(protocol: str, stride: int | None, train_context: int, length: int) -> int:
    """Tokens scored per window: L for nonoverlapping; eval.stride (null: T/2) for sliding."""
    if protocol == "nonoverlapping":
        return length
    if protocol != "sliding":
        raise unknown("eval.protocol", protocol, PROTOCOLS)
    s = stride if stride is not None else max(1, train_context // 2)
    if not 1 <= s <= length:
        raise PosxError(
            f"eval.stride={s} must be between 1 and the evaluation length {length}; "
            f"use a stride of at most T={train_context}"
        )
    return s


def tokens_for(protocol: str, requested: int, lengths: list[int], strides: list[int]) -> int:
    """Scored tokens per length, the same at every length: a multiple of every window step."""
    steps = lengths if protocol == "nonoverlapping" else strides
    step = math.lcm(*steps)
    tokens = -(-requested // step) * step
    if tokens > 64 * max(requested, max(steps)):
        raise PosxError(
            f"the window steps {steps} have a common multiple ({step}) far above eval.tokens; "
            "use factors (or an eval.stride) whose lengths share divisors, e.g. [1,2,4,8]"
        )
    return tokens


def require_held_out(val, n_tokens: int, needed: int) -> None:
    """A one-line error when ``val`` has fewer than the ``needed`` tokens an evaluation reads."""
    if len(val) < needed:
        raise PosxError(
            f"the held-out split has {len(val)} tokens but eval.tokens asks for {n_tokens} "
            f"at each length ({needed} read); lower eval.tokens or use more data"
        )


def tokens_needed(length: int, stride: int, n_tokens: int) -> int:
    """Held-out tokens read: the last window starts at n_tokens - stride, plus its target."""
    return n_tokens - stride + length + 1


def held_out_needed(
    protocol: str, stride: int | None, requested: int, train_context: int, lengths: list[int]
) -> tuple[int, int]:
    """(scored tokens per length, held-out tokens read) of an evaluation at ``lengths``."""
    strides = [stride_for(protocol, stride, train_context, L) for L in lengths]
    n_tokens = tokens_for(protocol, requested, lengths, strides)
    return n_tokens, max(tokens_needed(L, s, n_tokens) for L, s in zip(lengths, strides))


NLL_CHUNK = 8192  # positions whose logits are upcast to float32 at once (token_nll)


def token_nll(logits: torch.Tensor, targets: torch.Tensor, chunk: int = NLL_CHUNK) -> torch.Tensor:
    """Float32 NLL (B*L,) of logits (B, L, vocab) against targets (B, L), upcast ``chunk`` positions at a
    time (a large vocabulary's bf16 logits upcast at once would more than double in memory)."""
    flat, y = logits.flatten(0, 1), targets.flatten()
    spans = range(0, len(y), chunk)
    return torch.cat([F.cross_entropy(flat[i : i + chunk].float(), y[i : i + chunk], reduction="none") for i in spans])


@torch.no_grad()
def score(
    model,
    tokens: torch.Tensor,
    length: int,
    stride: int,
    n_tokens: int,
    batch_tokens: int,
    device: torch.device,
    starts: list[int] | None = None,
) -> Scores:
    """Score ``n_tokens`` (a multiple of ``stride``) targets of ``tokens``: window k covers
    tokens[k*S : k*S + L] and scores positions L-S .. L-1. ``starts``: the windows' offsets instead
    of k*S (``posx.eval.documents``)."""
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
    window_sum = torch.zeros(len(starts), dtype=torch.float64)
    for b in range(0, len(starts), per_batch):
        batch = starts[b : b + per_batch]
        w = torch.stack([as_long(tokens[s : s + length + 1]) for s in batch])  # (B, L + 1)
        x, y = w[:, :-1].to(device), w[:, 1:].to(device)  # (B, L) each
        with autocast(device):
            logits, _ = model(x)  # (B, L, vocab)
        nll = token_nll(logits, y)  # (B*L,)
        nll = nll.view(len(batch), length)[:, first:]  # (B, S): the scored positions only
        nll_sum[first:] += nll.double().sum(0).cpu()
        window_sum[b : b + len(batch)] = nll.double().sum(1).cpu()
        count[first:] += len(batch)
    return Scores(nll_sum.numpy(), count.numpy(), window_sum.numpy())


def bucket_width_for(width: int | None, train_context: int) -> int:
    """eval.bucket_width, or T/8 when it is null."""
    return width if width is not None else max(1, train_context // 8)


def buckets(scores: Scores, width: int) -> list[tuple[int, int, float, int]]:
    """(start, end, nll_sum, count) of each bucket of window positions that holds scored tokens."""
    out = []
    length = len(scores.count)
    for start in range(0, length, width):
        end = min(start + width, length)
        n = int(scores.count[start:end].sum())
        if n:
            out.append((start, end, float(scores.nll_sum[start:end].sum()), n))
    return out
