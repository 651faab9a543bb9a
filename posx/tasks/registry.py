"""The task registry: name -> generator, and drawing a task's samples.

A generator is ``f(ctx, length, trial, opts, depth_buckets) -> Sample | None`` (None: the
length cannot hold the task); ``opts`` is a ``TaskOptions``, evaluation's or the training mix's.
"""

from __future__ import annotations

import numpy as np

from posx.tasks import copy, mqar, niah, variable_tracking
from posx.tasks.base import Context, Sample, encoder

GENERATORS = {
    "passkey": niah.passkey,  # the training mix's; an evaluation scores posx.eval.passkey's trials
    "niah": niah.niah,
    "niah_multikey": niah.niah_multikey,
    "niah_multivalue": niah.niah_multivalue,
    "variable_tracking": variable_tracking.variable_tracking,
    "mqar": mqar.mqar,
    "copy": copy.copy,
    "selective_copy": copy.selective_copy,
    "mqar_more": mqar.mqar_more,  # the harder MQAR past T: pairs that grow with the length
}
TASKS = tuple(GENERATORS)  # eval.tasks: posx.schema.fields.Task lists these
VALIDATION = 1  # make_samples' stream of a training run's held-out task set (posx.train.taskcurve)


def make_samples(
    task: str, source, length: int, trials: int, opts, seed: int, tokenizer=None, stream: int = 0
) -> list[Sample]:
    """``trials`` samples of ``task`` at ``length``, seeded by (seed, length, task) and a non-zero
    ``stream`` (``VALIDATION``); [] when the length cannot hold the task."""
    rng = np.random.default_rng([seed, length, TASKS.index(task), *([stream] if stream else [])])
    ctx = Context(np.asarray(source), encoder(tokenizer), rng)
    out = []
    for t in range(trials):
        made = GENERATORS[task](ctx, length, t, opts, opts.depth_buckets)
        if made is None:
            return []
        out.append(made)
    return out
