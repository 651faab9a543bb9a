"""Variable tracking, after RULER (Hsieh et al. 2024, arXiv 2404.06654).

A chain ``\\n<a>=<value>\\n``, ``\\n<b>=<a>\\n``, ... of ``hops`` + 1 assignments is planted in held-out
text, the first at the sample's depth and the others after it in order; a distractor chain of
the same length binds a different value (its statements at random depths). Hops are numbered as
RULER's ``num_hops``: the assignments of a name to a name, so ``hops`` = 2 is three names
(a = value, b = a, c = b), and ``hops`` = 0 one name bound to the value (RULER's default is 4).
The question ``\\n?<value>:`` asks for every name bound to the value; the answer is the chain's names in the
order they were assigned, separated by spaces (spaces given, names scored). RULER accepts the
names in any order; teacher-forced scoring needs one, and assignment order is the one a reader
of the text meets.
"""

from __future__ import annotations

import numpy as np

from posx.tasks.base import Context, Sample, depth_of, later_depths, numbers, sample, words


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
    tail = [(np.concatenate([ctx.encode("\n?"), ctx.encode(value), ctx.encode(":")]), False)]
    for i, name in enumerate(names[:n]):
        if i:
            tail.append((ctx.encode(" "), False))
        tail.append((ctx.encode(name), True))
    return sample(ctx, length, needles, tail, depth, bucket)
