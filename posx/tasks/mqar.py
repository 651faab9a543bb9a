"""Multi-query associative recall, after zoology (Arora et al., ICLR 2024, arXiv 2312.04927).

The sequence is key-value pairs ``<key>:<value> `` (keys distinct lowercase words, values
random numbers, repeats allowed) as many as fit (and as there are keys of ``key_letters``),
then ``queries`` of them again: each query gives the key and the colon, and the value's tokens
are scored. ``separator`` stands for the colon; with none (``''``) the pairs are zoology's,
``<key><value> ``, where the key's last token is followed by the value, so one token of context
finds it, while a colon after the key asks a model to match the two tokens before it.
There is no haystack: the pairs are the context, so a longer
sequence holds more pairs and each query has more to choose from (the zoology setting, with the
number of pairs growing with the length). The first query asks for the pair at the sample's
depth (its index over the number of pairs; with few pairs that index moves the depth into
another bucket, and the bucket of the depth it has is the one recorded), the others for distinct pairs drawn at random.
Spaces at the start make up the tokens that no whole pair fills. Greedy decoding
(``eval.task_scoring=generate``) is given each query and decodes its value (``Sample.asked``):
no model can generate the next query's key.
"""

from __future__ import annotations

import numpy as np

from posx.tasks.base import Context, Sample, depth_of, numbers, words


def pair(ctx: Context, key: str, value: str, separator: str = ":") -> tuple[np.ndarray, np.ndarray]:
    """(the key and ``separator``, the value and space) of one pair."""
    head = np.concatenate([ctx.encode(key), ctx.encode(separator)]) if separator else ctx.encode(key)
    return head, np.concatenate([ctx.encode(value), ctx.encode(" ")])


def pairs_that_fit(ctx: Context, length: int, opts) -> list[tuple[np.ndarray, np.ndarray]]:
    """Pairs, drawn until one more (and the queries' room) would not fit; fewer than ``queries``: []."""
    out, used, longest = [], 0, 0
    per_pair = opts.key_letters + len(opts.separator) + opts.digits + 1  # bytes of a pair
    budget = min(max(1, length // per_pair), 26**opts.key_letters)  # keys are distinct
    keys, values = words(ctx.rng, budget, opts.key_letters), numbers(ctx.rng, budget, opts.digits, distinct=False)
    for key, value in zip(keys, values):
        head, rest = pair(ctx, key, value, opts.separator)
        size = len(head) + len(rest)
        if used + size + opts.queries * max(longest, size) > length:
            break
        out.append((head, rest))
        used, longest = used + size, max(longest, size)
    return out if len(out) >= opts.queries else []


def mqar(ctx: Context, length: int, trial: int, opts, buckets: int) -> Sample | None:
    depth, _ = depth_of(ctx.rng, trial, buckets)
    pairs = pairs_that_fit(ctx, length, opts)
    if not pairs:
        return None
    first = min(len(pairs) - 1, int(depth * len(pairs)))
    others = [i for i in ctx.rng.permutation(len(pairs)) if i != first][: opts.queries - 1]
    asked = [first, *(int(i) for i in others)]
    used = sum(len(h) + len(r) for h, r in pairs) + sum(len(pairs[i][0]) + len(pairs[i][1]) for i in asked)
    pad = np.full(length - used, ctx.encode(" ")[0], dtype=np.int64)
    parts, needles, at = [pad], [], len(pad)
    for head, rest in pairs:
        needles.append((at, np.concatenate([head, rest])))
        parts += [head, rest]
        at += len(head) + len(rest)
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
