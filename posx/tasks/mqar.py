"""Multi-query associative recall, after zoology (Arora et al., ICLR 2024, arXiv 2312.04927).

Key-value pairs, then ``queries`` of the keys again, each value scored; no haystack, so a longer
sequence holds more pairs. With no ``separator`` one token of context finds the value (zoology's
setting); a colon asks a model to match the two tokens before it. The first query asks for the
pair at the sample's depth (the bucket of the depth it gets is recorded). Layouts and
``mqar_more``: docs/evaluation.md. Greedy decoding is given each query (``Sample.asked``).
"""

from __future__ import annotations

import numpy as np

from posx.tasks.base import Context, Sample, depth_of, numbers, varied, words


def pair(ctx: Context, key: str, value: str, separator: str = ":") -> tuple[np.ndarray, np.ndarray]:
    """(the key and ``separator``, the value and space) of one pair."""
    head = np.concatenate([ctx.encode(key), ctx.encode(separator)]) if separator else ctx.encode(key)
    return head, np.concatenate([ctx.encode(value), ctx.encode(" ")])


def per_pair(opts) -> int:
    """Bytes of one pair: key, separator, value and space (a tokenizer's pieces are no longer)."""
    return opts.key_letters + len(opts.separator) + opts.digits + 1


def room(length: int, opts) -> int:
    """The most pairs that fit ``length`` bytes beside the queries' room (and that the keys allow)."""
    return min(length // per_pair(opts) - opts.queries, 26**opts.key_letters)


def pair_range(length: int, opts) -> tuple[int, int]:
    """(fewest, most) pairs of a varied-layout sample: ``min_pairs`` (at least the queries) ..
    ``pairs`` (0: as many as fit), within what fits; fewest > most: none fits."""
    lo = max(opts.queries, opts.min_pairs)
    return lo, room(length, opts) if not opts.pairs else min(opts.pairs, room(length, opts))


def scaled_range(length: int, opts) -> tuple[int, int]:
    """``mqar_more``'s (fewest, most) pairs: ``pair_range`` at ``base_length`` scaled by length / base_length."""
    base = opts.base_length or length
    lo, hi = pair_range(min(base, length), opts)
    scale = max(1.0, length / base)
    return max(opts.queries, round(lo * scale)), min(room(length, opts), round(hi * scale))


def pairs_that_fit(ctx: Context, length: int, opts) -> list[tuple[np.ndarray, np.ndarray]]:
    """Pairs, drawn until one more (and the queries' room) would not fit; fewer than ``queries``: []."""
    out, used, longest = [], 0, 0
    budget = min(max(1, length // per_pair(opts)), 26**opts.key_letters)  # keys are distinct
    keys, values = words(ctx.rng, budget, opts.key_letters), numbers(ctx.rng, budget, opts.digits, distinct=False)
    for key, value in zip(keys, values):
        head, rest = pair(ctx, key, value, opts.separator)
        size = len(head) + len(rest)
        if used + size + opts.queries * max(longest, size) > length:
            break
        out.append((head, rest))
        used, longest = used + size, max(longest, size)
    return out if len(out) >= opts.queries else []


def drawn_pairs(ctx: Context, length: int, opts, span: tuple[int, int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Pairs, their number drawn uniformly from ``span``; [] when none fits."""
    lo, hi = span
    if lo > hi:
        return []
    n = int(ctx.rng.integers(lo, hi + 1))
    keys, values = words(ctx.rng, n, opts.key_letters), numbers(ctx.rng, n, opts.digits, distinct=False)
    return [pair(ctx, k, v, opts.separator) for k, v in zip(keys, values)]


def gaps(rng: np.random.Generator, pad: int, n: int) -> np.ndarray:
    """``n + 1`` gap lengths >= 0 summing to ``pad``: before each of ``n`` pairs and after the last."""
    cuts = np.sort(rng.integers(0, pad + 1, n))
    return np.diff(np.concatenate([[0], cuts, [pad]]))


def mqar(ctx: Context, length: int, trial: int, opts, buckets: int) -> Sample | None:
    span = pair_range(length, opts) if varied(opts) else None
    return build(ctx, length, trial, opts, buckets, span)


def mqar_more(ctx: Context, length: int, trial: int, opts, buckets: int) -> Sample | None:
    span = scaled_range(length, opts) if varied(opts) else None
    return build(ctx, length, trial, opts, buckets, span)


def build(ctx: Context, length: int, trial: int, opts, buckets: int, span) -> Sample | None:
    """One sample: the fixed layout's pairs (``span`` None) or ``span``'s, then the queries."""
    depth, _ = depth_of(ctx.rng, trial, buckets)
    pairs = pairs_that_fit(ctx, length, opts) if span is None else drawn_pairs(ctx, length, opts, span)
    if not pairs:
        return None
    first = min(len(pairs) - 1, int(depth * len(pairs)))
    others = [i for i in ctx.rng.permutation(len(pairs)) if i != first][: opts.queries - 1]
    asked = [first, *(int(i) for i in others)]
    used = sum(len(h) + len(r) for h, r in pairs) + sum(len(pairs[i][0]) + len(pairs[i][1]) for i in asked)
    if used > length:  # a tokenizer's pieces longer than their bytes
        return None
    space = ctx.encode(" ")[0]
    spread = gaps(ctx.rng, length - used, len(pairs)) if span is not None else [length - used] + [0] * len(pairs)
    parts, needles, at = [], [], 0
    for gap, (head, rest) in zip(spread, pairs):
        parts.append(np.full(gap, space, dtype=np.int64))
        at += gap
        needles.append((at, np.concatenate([head, rest])))
        parts += [head, rest]
        at += len(head) + len(rest)
    parts.append(np.full(spread[-1], space, dtype=np.int64))
    at += spread[-1]
    answer, starts = [], []
    for i in asked:
        head, rest = pairs[i]
        value_len = len(rest) - len(ctx.encode(" "))
        starts.append(at + len(head))
        answer.extend(range(at + len(head), at + len(head) + value_len))
        parts += [head, rest]
        at += len(head) + len(rest)
    tokens = np.concatenate(parts).astype(np.int64)
    assert len(tokens) == length, (len(tokens), length)
    actual = first / len(pairs)  # the depth the pairs allow; its bucket, not the drawn one, is recorded
    bucket = min(buckets - 1, int(actual * buckets))
    return Sample(tokens, np.asarray(answer, dtype=np.int64), actual, bucket, needles, tuple(starts[1:]))
