"""Copying a span seen earlier, and selective copying.

* ``copy``: a random string of ``span`` lowercase letters is planted in held-out text at the
  sample's depth and repeated at the end of the sequence; the repeat's first ``cue`` tokens are
  given and the rest scored. Random letters cannot be predicted from the text around them, so
  only a model that finds the earlier occurrence (an induction head, Olsson et al. 2022) and
  copies from it scores well; the haystack never holds the cue, so the cue points at one place.
  The passkey's copy variant is the case of digits with one cue token. With the varied layout
  the span has a number of letters drawn uniformly from ``cue + 1`` .. ``span`` (so the filler
  length varies too); the fixed layout's has ``span``.
* ``selective_copy``: ``answers`` random words, each marked ``@<word>``, are planted at
  increasing depths (the first at the sample's depth); the sequence ends with ``\\n@@`` and the
  words in order, separated by spaces (scored: the words). The model must pick the marked words
  out of the haystack and keep their order, as in the selective-copying task of Gu & Dao 2023
  (Mamba, arXiv 2312.00752), here with text instead of noise tokens. The haystack holds no ``@``
  of its own (one in the window, a decorator in Python source, is replaced by the window's
  most frequent other character).
"""

from __future__ import annotations

import numpy as np

from posx.tasks.base import Context, Sample, depth_of, later_depths, sample, varied, words


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
    tail = [(ctx.encode("\n@@"), False)]
    for i, w in enumerate(items):
        if i:
            tail.append((ctx.encode(" "), False))
        tail.append((ctx.encode(w), True))
    return sample(ctx, length, needles, tail, depth, bucket, avoid=(ctx.encode("@"),))
