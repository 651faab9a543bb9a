"""Chance level of a task's exact answers from its options and the length alone: one of the planted
candidates picked uniformly per question (docs/evaluation.md, "Chance levels"); NaN where none is stated."""

from __future__ import annotations

import math

import numpy as np

from posx.tasks import mqar
from posx.tasks.base import LETTERS, varied


def chance(task: str, opts, length: int) -> float:
    """The chance level of ``task`` at ``length`` with ``opts``."""
    rule = RULES.get(task)
    return math.nan if rule is None else rule(opts, length)


def _uniform_mean(lo: int, hi: int, f) -> float:
    """The mean of ``f`` over lo .. hi, each equally likely; NaN when the range is empty."""
    return math.nan if lo > hi else float(np.mean([f(n) for n in range(lo, hi + 1)]))


def _mqar(span_of):
    def rule(opts, length: int) -> float:
        if varied(opts):
            lo, hi = span_of(length, opts)
        else:
            lo = hi = mqar.room(length, opts)
            lo = lo if lo >= opts.queries else hi + 1
        return _uniform_mean(lo, hi, lambda n: n ** -float(opts.queries))

    return rule


def _niah_multikey(opts, length: int) -> float:
    d = opts.distractors
    lo = 1 if varied(opts) and d > 0 else d
    return _uniform_mean(lo, d, lambda k: 1 / (1 + k))


def _passkey(opts, length: int) -> float:
    return 1 / (1 + opts.distractors) if varied(opts) else 1.0


def _copy(opts, length: int) -> float:
    lo = min(opts.cue + 1, opts.span) if varied(opts) else opts.span
    return _uniform_mean(lo, opts.span, lambda k: float(len(LETTERS)) ** -(k - min(opts.cue, k - 1)))


RULES = {
    "mqar": _mqar(mqar.pair_range),
    "mqar_more": _mqar(mqar.scaled_range),
    "niah_multikey": _niah_multikey,
    "niah": lambda opts, length: 1.0,
    "passkey": _passkey,
    "copy": _copy,
}
