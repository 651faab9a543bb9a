"""The task sections of the schema: ``TaskOptions`` (``data.task_options``, ``eval.task_options``)
and ``PasskeyConfig`` (``eval.passkey``), each value's rules beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from posx.schema.fields import (
    MAX_COUNT,
    MAX_PIECE,
    MAX_SEPARATOR,
    MAX_SIZE,
    MAX_SPAN,
    MAX_TRIALS,
    Layout,
    Variant,
    at_least,
    bound,
    positive,
)

SEED = dict(lo=0, hi=2**63 - 1, interval=True)  # a seed numpy takes


@dataclass
class TaskOptions:
    trials: int = positive(16, MAX_TRIALS)  # samples per (length, task), the same ones for every method
    depth_buckets: int = positive(4, MAX_TRIALS)  # samples are spread evenly over this many depth ranges
    seed: int = bound(0, **SEED)  # seeds keys, values, depths and haystack offsets
    digits: int = positive(5, MAX_PIECE)  # digits of a value (niah, variable_tracking, mqar) and of the passkey
    key_letters: int = positive(4, MAX_PIECE)  # letters of a key or variable name
    distractors: int = at_least(3, 0, MAX_COUNT)  # niah_multikey: needles with other keys
    answers: int = positive(3, MAX_COUNT)  # niah_multivalue: values of the one key; selective_copy: words to copy
    hops: int = at_least(2, 0, MAX_COUNT)  # variable_tracking: name-to-name links, RULER's num_hops (hops + 1 names)
    queries: int = positive(4, MAX_COUNT)  # mqar: keys asked for at the end
    separator: str = ":"  # mqar: between a key and its value ('': none, zoology's pairs)
    span: int = at_least(16, 2, MAX_SPAN, " (a cue and a scored letter)")  # copy: letters of the copied span
    cue: int = positive(4, MAX_SPAN)  # copy: tokens of the repeat that are given before scoring starts
    layout: Layout = Layout.fixed  # fixed: one layout per length; varied: counts and lengths drawn from ranges
    min_pairs: int = at_least(0, 0, MAX_SPAN, " (0: queries)")  # mqar, varied layout: fewest pairs
    pairs: int = at_least(0, 0, MAX_SPAN, " (0: as many as fit)")  # mqar, varied layout: most pairs
    base_length: int = at_least(0, 0, MAX_SIZE, " (0: none)")  # mqar_more: has mqar's pairs at it, more past it

    def check(self, at: str = "") -> Optional[str]:
        if len(self.separator) > MAX_SEPARATOR:
            return f"{at}separator has {len(self.separator)} characters; give at most {MAX_SEPARATOR}"
        if self.trials < self.depth_buckets:
            return (
                f"{at}trials={self.trials} is fewer than {at}depth_buckets={self.depth_buckets}; "
                "every depth bucket needs a sample"
            )
        if self.pairs and self.min_pairs > self.pairs:
            return f"{at}min_pairs={self.min_pairs} is more than {at}pairs={self.pairs}; lower it or raise pairs"
        return None


@dataclass
class PasskeyConfig:
    enabled: bool = True  # passkey retrieval in eval-extrapolate (writes passkey.csv)
    variants: List[Variant] = bound(
        factory=lambda: ["prompt", "copy"], unique=True
    )  # prompt: key asked for; copy: repeated
    trials: int = positive(16, MAX_TRIALS)  # sequences per (length, variant), the same ones for every method
    digits: int = positive(5, MAX_PIECE)  # length of the random key
    depth_buckets: int = positive(4, MAX_TRIALS)  # trials are spread evenly over this many depth ranges
    seed: int = bound(0, **SEED)  # seeds keys, depths and filler offsets

    def check(self, at: str = "") -> Optional[str]:
        if self.enabled and not self.variants:
            return f"{at}variants is empty; give prompt, copy or both, or set {at}enabled=false"
        if "copy" in self.variants and self.digits < 2:
            return f"{at}digits={self.digits}: the copy variant needs at least 2 digits (the first is the cue)"
        if self.trials < self.depth_buckets:
            return (
                f"{at}trials={self.trials} is fewer than {at}depth_buckets={self.depth_buckets}; "
                "every depth bucket needs a trial"
            )
        return None
