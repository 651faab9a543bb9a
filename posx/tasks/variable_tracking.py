"""Variable tracking, after RULER (Hsieh et al. 2024, arXiv 2404.06654): a chain of ``hops`` + 1
assignments and a distractor chain; the answer is the chain's names in assignment order (RULER
accepts any order; teacher forcing needs one, and this is the order a reader meets them).
"""

from __future__ import annotations

import numpy as np

from posx.tasks.base import Context, Sample, answers, depth_of, later_depths, numbers, sample, words


def statement(ctx: Context, name: str, bound: str) -> np.ndarray:
    e = ctx.encode
    return np.concatenate([e("\n"), e(name), e("="), e(bound), e("\n")])


def chain(names: list[str], value: str) -> list[tuple[str, str]]:
    """(name, what it is bound to) of each assignment: the value, then the previous name."""
    return [(name, value if i == 0 else names[i - 1]) for i, name in enumerate(names)]


def variable_tracking(ctx: Context, length: int, trial: int, opts, buckets: int) -> Sample | None:
    depth, bucket = depth_of(ctx.rng, trial, buckets)
    n = opts.hops + 1  # names in a chain: one per assignment, the one bound to the value included
    names = words(ctx.rng, 2 * n, opts.key_letters)
    value, other = numbers(ctx.rng, 2, opts.digits)
    depths = [depth, *later_depths(ctx.rng, depth, n - 1)]
    needles = [(d, statement(ctx, name, b)) for d, (name, b) in zip(depths, chain(names[:n], value))]
    distractor = chain(names[n:], other)
    needles += [(d, statement(ctx, name, b)) for d, (name, b) in zip(sorted(ctx.rng.random(n)), distractor)]
    asked = np.concatenate([ctx.encode("\n?"), ctx.encode(value), ctx.encode(":")])
    return sample(ctx, length, needles, answers(ctx, asked, names[:n], " "), depth, bucket)
