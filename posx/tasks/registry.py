"""The task registry: name -> generator, and drawing a task's samples.

A generator is ``f(ctx, length, trial, opts, depth_buckets) -> Sample | None`` (None: the
length cannot hold the task). ``opts`` is ``eval.task_options`` (``TaskOptions`` in
``posx.config.schema``), shared by evaluation and by the training mix (``posx.tasks.mix``).
In an evaluation ``passkey`` is the prompt variant of ``posx.eval.passkey`` with the same trials (the same
seed gives the same keys, depths and filler), so its tasks.csv rows match passkey.csv's
prompt rows; its key has ``digits`` digits.
"""

from __future__ import annotations

import numpy as np

from posx.eval import passkey as passkey_mod
from posx.tasks import copy, mqar, niah, variable_tracking
from posx.tasks.base import Context, Sample, encoder


def passkey_samples(source, length: int, trials: int, opts, buckets: int, seed: int, tokenizer) -> list[Sample]:
    """The passkey prompt trials as samples (``posx.eval.passkey.make_trials``)."""
    made = passkey_mod.make_trials(source, length, "prompt", trials, opts.digits, buckets, seed, tokenizer)
    return [
        Sample(t.tokens.astype(np.int64), np.arange(length - t.scored, length), t.depth, t.depth_bucket,
               [(t.key_start, t.tokens[t.key_start : t.key_start + t.scored].astype(np.int64))])
        for t in made
    ]  # fmt: skip


GENERATORS = {
    "passkey": niah.passkey,  # the training mix's; the evaluation scores passkey_samples
    "niah": niah.niah,
    "niah_multikey": niah.niah_multikey,
    "niah_multivalue": niah.niah_multivalue,
    "variable_tracking": variable_tracking.variable_tracking,
    "mqar": mqar.mqar,
    "copy": copy.copy,
    "selective_copy": copy.selective_copy,
}
TASKS = tuple(GENERATORS)  # eval.tasks: posx.config.schema.Task lists these


def make_samples(task: str, source, length: int, trials: int, opts, seed: int, tokenizer=None) -> list[Sample]:
    """``trials`` samples of ``task`` at ``length`` from ``source`` (token ids), seeded by (seed,
    length, task); [] when the length cannot hold the task."""
    buckets = opts.depth_buckets
    if task == "passkey":
        return passkey_samples(source, length, trials, opts, buckets, seed, tokenizer)
    generate = GENERATORS[task]
    rng = np.random.default_rng([seed, length, TASKS.index(task)])
    ctx = Context(np.asarray(source), encoder(tokenizer), rng)
    out = []
    for t in range(trials):
        made = generate(ctx, length, t, opts, buckets)
        if made is None:
            return []
        out.append(made)
    return out
