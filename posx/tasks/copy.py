"""Copying a span seen earlier, and selective copying (Gu & Dao 2023, arXiv 2312.00752, with text for
noise). Random letters cannot be predicted from their context, so only a model that finds the earlier
occurrence (an induction head, Olsson et al. 2022) scores; the haystack never holds the cue or ``@``.
"""

from __future__ import annotations

import numpy as np

from posx.tasks.base import Context, Sample, answers, depth_of, later_depths, sample, varied, words


def copy(ctx: Context, length: int, trial: int, opts, buckets: int) -> Sample | None:
    depth, bucket = depth_of(ctx.rng, trial, buckets)
    letters = int(ctx.rng.integers(min(opts.cue + 1, opts.span), opts.span + 1)) if varied(opts) else opts.span
    span = ctx.encode(words(ctx.rng, 1, letters)[0])
    cue = min(opts.cue, len(span) - 1)
    tail = [(span[:cue], False), (span[cue:], True)]
    return sample(ctx, length, [(depth, span)], tail, depth, bucket, avoid=(span[:cue],))


def selective_copy(ctx: Context, length: int, trial: int, opts, buckets: int) -> Sample | None:
    depth, bucket = depth_of(ctx.rng, trial, buckets)
    items = words(ctx.rng, opts.answers, opts.key_letters)
    depths = [depth, *later_depths(ctx.rng, depth, opts.answers - 1)]
    needles = [(d, np.concatenate([ctx.encode("@"), ctx.encode(w)])) for d, w in zip(depths, items)]
    tail = answers(ctx, ctx.encode("\n@@"), items, " ")
    return sample(ctx, length, needles, tail, depth, bucket, avoid=(ctx.encode("@"),))
