"""Whether every task of the training mix fits T + 1 tokens (else it would never be trained on or
measured), tried with the byte encoding, which gives every piece at least as many tokens as a
subword tokenizer, at most at ``TASK_FIT_LENGTH`` (where every task fits), so the cost is bounded."""

from __future__ import annotations

import numpy as np

from posx.core.errors import PosxError
from posx.schema.fields import MAX_POOL_TOKENS, TASK_FIT_LENGTH
from posx.tasks.base import Context, TaskError, byte_encode
from posx.tasks.registry import GENERATORS

TRIES = 4  # samples drawn to tell whether a task fits (the depths of the first buckets)


def fits(task: str, length: int, opts) -> bool:
    """Whether ``task`` with ``opts`` fits in ``length`` byte tokens (a haystack of spaces)."""
    length = min(length, TASK_FIT_LENGTH)
    ctx = Context(np.full(length, 32, dtype=np.int64), byte_encode, np.random.default_rng(0))
    return all(GENERATORS[task](ctx, length, trial, opts, opts.depth_buckets) is not None for trial in range(TRIES))


def check_mix(data, T: int) -> None:
    """A training mix every task of which fits, and a task pool within MAX_POOL_TOKENS."""
    if data.task_mix == 0:
        return
    if data.task_pool * (T + 1) > MAX_POOL_TOKENS:
        raise PosxError(
            f"data.task_pool={data.task_pool} sequences of T + 1 = {T + 1} tokens is more than {MAX_POOL_TOKENS:,} "
            f"tokens to generate before training; set data.task_pool to at most {MAX_POOL_TOKENS // (T + 1)}, "
            "or 0 to generate each sequence as it is drawn"
        )
    if str(data.tokenizer) != "byte":
        return
    for task in (str(t) for t in data.mix_tasks):
        try:
            fitted = fits(task, T, data.task_options)
        except TaskError as exc:
            raise exc.of("data.") from None
        if not fitted:
            raise PosxError(
                f"data.mix_tasks: {task} does not fit in T = {T} tokens (the held-out curve's length) with "
                "data.task_options, so it would never be trained on or measured; raise train.context_length, "
                f"make it smaller (data.task_options.queries, digits, key_letters, span, hops, ...), or take {task} "
                "out of data.mix_tasks"
            )
