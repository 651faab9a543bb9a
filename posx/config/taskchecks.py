"""Whether a task of the training mix fits a training sequence (the tasks' sizes are the schema's).

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


def fits(task: str, length: int, opts) -> bool:
    """Whether ``task`` with ``opts`` fits in ``length`` byte tokens (a haystack of spaces)."""
    ctx = Context(np.full(length, 32, dtype=np.int64), byte_encode, np.random.default_rng(0))
    return all(GENERATORS[task](ctx, length, trial, opts, opts.depth_buckets) is not None for trial in range(4))


def check_mix(data, T: int) -> None:
    """A training mix (``data.task_mix``, ``data.mix_tasks``, ``data.task_options``) some task of which fits."""
    if data.task_mix == 0:
        return
    tasks = [str(t) for t in data.mix_tasks]
    if str(data.tokenizer) == "byte" and not any(fits(t, T + 1, data.task_options) for t in tasks):
        raise PosxError(
            f"no task of data.mix_tasks ({', '.join(tasks)}) fits in a training sequence of T + 1 = {T + 1} "
            "tokens with data.task_options; raise train.context_length or make the tasks smaller "
            "(data.task_options.queries, digits, key_letters, span, hops, ...)"
        )
