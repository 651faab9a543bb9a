"""Needle in a haystack with key-value needles ``\\n<key>=<value>\\n``, after RULER (Hsieh et al. 2024,
arXiv 2404.06654), short enough for a model trained at 128 bytes; ``passkey`` is the passkey's
prompt format as the training mix (or a varied layout's evaluation) draws it. docs/evaluation.md.
"""

from __future__ import annotations

import numpy as np

from posx.tasks.base import Context, Sample, answers, depth_of, later_depths, numbers, sample, varied, words

PASSKEY_MARK = "\npasskey = "  # the passkey's statement and question start with it (posx.eval.passkey)


def needle(ctx: Context, key: str, value: str) -> np.ndarray:
    e = ctx.encode
    return np.concatenate([e("\n"), e(key), e("="), e(value), e("\n")])


def question(ctx: Context, key: str) -> np.ndarray:
    return np.concatenate([ctx.encode("\n"), ctx.encode(key), ctx.encode("=")])


def niah(ctx: Context, length: int, trial: int, opts, buckets: int) -> Sample | None:
    depth, bucket = depth_of(ctx.rng, trial, buckets)
    key, value = words(ctx.rng, 1, opts.key_letters)[0], numbers(ctx.rng, 1, opts.digits)[0]
    tail = [(question(ctx, key), False), (ctx.encode(value), True)]
    return sample(ctx, length, [(depth, needle(ctx, key, value))], tail, depth, bucket)


def distractors(ctx: Context, opts) -> int:
    """``distractors``, or with the varied layout a number drawn uniformly from 1 .. ``distractors``."""
    if not varied(opts) or opts.distractors == 0:
        return opts.distractors
    return int(ctx.rng.integers(1, opts.distractors + 1))


def niah_multikey(ctx: Context, length: int, trial: int, opts, buckets: int) -> Sample | None:
    depth, bucket = depth_of(ctx.rng, trial, buckets)
    n = 1 + distractors(ctx, opts)
    keys, values = words(ctx.rng, n, opts.key_letters), numbers(ctx.rng, n, opts.digits)
    needles = [(depth, needle(ctx, keys[0], values[0]))]
    needles += [(float(ctx.rng.random()), needle(ctx, k, v)) for k, v in zip(keys[1:], values[1:])]
    tail = [(question(ctx, keys[0]), False), (ctx.encode(values[0]), True)]
    return sample(ctx, length, needles, tail, depth, bucket)


def niah_multivalue(ctx: Context, length: int, trial: int, opts, buckets: int) -> Sample | None:
    depth, bucket = depth_of(ctx.rng, trial, buckets)
    key, values = words(ctx.rng, 1, opts.key_letters)[0], numbers(ctx.rng, opts.answers, opts.digits)
    depths = [depth, *later_depths(ctx.rng, depth, opts.answers - 1)]
    needles = [(d, needle(ctx, key, v)) for d, v in zip(depths, values)]
    return sample(ctx, length, needles, answers(ctx, question(ctx, key), values, ","), depth, bucket)


def passkey(ctx: Context, length: int, trial: int, opts, buckets: int) -> Sample | None:
    depth, bucket = depth_of(ctx.rng, trial, buckets)
    if varied(opts):  # the key and ``distractors`` other numbers of as many digits, at random depths
        drawn = numbers(ctx.rng, 1 + opts.distractors, opts.digits)
        key, others = ctx.encode(drawn[0]), [ctx.encode(f"\n{d}\n") for d in drawn[1:]]
    else:
        key, others = ctx.encode(numbers(ctx.rng, 1, opts.digits)[0]), []
    mark = ctx.encode(PASSKEY_MARK)
    needles = [(depth, np.concatenate([mark, key, ctx.encode("\n")]))]
    needles += [(float(ctx.rng.random()), d) for d in others]
    return sample(ctx, length, needles, [(mark, False), (key, True)], depth, bucket)
