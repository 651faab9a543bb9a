"""The checks of the task settings: ``eval.task_options``, ``data.task_options`` and the mix.

A training mix is refused when none of its tasks fits a training sequence (T + 1 tokens) with
the mix's task options: every sequence would stay corpus text, and the run would train on
something else than it says. Fitting is tried with the byte encoding, which gives every piece
at least as many tokens as a subword tokenizer, so with another tokenizer a task the check
passes fits too (and one it refuses might fit; the check is made for bytes only).
"""

from __future__ import annotations

import numpy as np

from posx.core.errors import PosxError
from posx.tasks.base import Context, byte_encode
from posx.tasks.registry import GENERATORS

POSITIVE = ("trials", "depth_buckets", "digits", "key_letters", "answers", "queries", "span", "cue")
NONNEGATIVE = ("distractors", "hops")


def check_options(opts, where: str) -> None:
    """Sizes of the task options ``opts`` at the config key ``where`` (``eval.task_options``)."""
    for key in POSITIVE:
        if opts[key] is None or opts[key] <= 0:
            raise PosxError(f"{where}.{key} must be positive, got {opts[key]}; set {where}.{key}=<a positive number>")
    for key in NONNEGATIVE:
        if opts[key] < 0:
            raise PosxError(f"{where}.{key}={opts[key]} must be 0 or more")
    if opts.trials < opts.depth_buckets:
        raise PosxError(
            f"{where}.trials={opts.trials} is fewer than {where}.depth_buckets="
            f"{opts.depth_buckets}; every depth bucket needs a sample"
        )
    if opts.span < 2:
        raise PosxError(f"{where}.span={opts.span} must be at least 2 (a cue and a scored letter)")


def fits(task: str, length: int, opts) -> bool:
    """Whether ``task`` with ``opts`` fits in ``length`` byte tokens (a haystack of spaces)."""
    ctx = Context(np.full(length, 32, dtype=np.int64), byte_encode, np.random.default_rng(0))
    return all(GENERATORS[task](ctx, length, trial, opts, opts.depth_buckets) is not None for trial in range(4))


def check_mix(data, T: int) -> None:
    """``data.task_mix``, ``data.mix_tasks``, ``data.task_options``: a mix some task of which fits."""
    if not 0.0 <= data.task_mix <= 1.0:
        raise PosxError(f"data.task_mix={data.task_mix} must be in [0.0, 1.0]")
    seen: set = set()
    for task in data.mix_tasks:
        if task in seen:
            raise PosxError(f"data.mix_tasks lists {task} twice; give each value once")
        seen.add(task)
    check_options(data.task_options, "data.task_options")
    if data.task_pool < 0:
        raise PosxError(f"data.task_pool={data.task_pool} must be 0 (generate each sequence) or more")
    if data.task_mix == 0:
        return
    if not data.mix_tasks:
        raise PosxError("data.mix_tasks is empty; name the tasks to mix in, or set data.task_mix=0")
    tasks = [str(t) for t in data.mix_tasks]
    if str(data.tokenizer) == "byte" and not any(fits(t, T + 1, data.task_options) for t in tasks):
        raise PosxError(
            f"no task of data.mix_tasks ({', '.join(tasks)}) fits in a training sequence of T + 1 = {T + 1} "
            "tokens with data.task_options; raise train.context_length or make the tasks smaller "
            "(data.task_options.queries, digits, key_letters, span, hops, ...)"
        )
