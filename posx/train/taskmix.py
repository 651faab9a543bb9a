"""Task sequences mixed into training batches (``data.task_mix``, ``data.mix_tasks``).

With probability ``task_mix`` each sequence of a training batch is replaced by a generated task
sequence of the same length (T + 1 tokens: the inputs and their shifted targets), built by the
generators the evaluation scores (``posx.tasks.registry``) with the default
``eval.task_options`` sizes, from the *training* split as the haystack; the task is drawn
uniformly from ``data.mix_tasks``. The model learns from the whole sequence, as from any other
(the loss is not restricted to the answer). Training on such sequences at length T and
measuring the same tasks at 1x-8x T is the protocol of the length-generalisation studies
(Kazemnejad et al., NeurIPS 2023, arXiv 2305.19466; Ruoss et al., ACL 2023, arXiv 2305.16843).

Deterministic from the seed: the draws of step s come from a numpy generator seeded by
(seed, s), apart from the batch generator, so a resumed run mixes as an uninterrupted one and
``task_mix=0`` draws nothing (its batches are exactly those of a run without the mix). A task
that cannot fit in T + 1 tokens leaves its sequence unchanged.
"""

from __future__ import annotations

import numpy as np
import torch

from posx.schema import TaskOptions
from posx.tasks.base import Context, encoder
from posx.tasks.registry import GENERATORS

MIX_STREAM = 7919  # keeps the mix's random stream apart from other (seed, step)-seeded streams


def mix_rows(batch: int, p: float, seed: int, step: int) -> tuple[np.ndarray, np.random.Generator]:
    """(which of the ``batch`` sequences are replaced, the generator that then draws the tasks)."""
    rng = np.random.default_rng([seed, step, MIX_STREAM])
    return np.flatnonzero(rng.random(batch) < p), rng


def mix_batch(x: torch.Tensor, y: torch.Tensor, data_cfg, source, seed: int, step: int, tokenizer=None):
    """``x, y`` (B, T) with a ``data.task_mix`` share of their rows replaced by task sequences;
    also returns how many were replaced. ``source``: the training split's token ids."""
    p = float(data_cfg.task_mix)
    if p <= 0:
        return x, y, 0
    rows, rng = mix_rows(x.shape[0], p, seed, step)
    if len(rows) == 0:
        return x, y, 0
    tasks = [str(t) for t in data_cfg.mix_tasks]
    opts = TaskOptions()
    ctx = Context(np.asarray(source), encoder(tokenizer), rng)
    x, y, replaced = x.clone(), y.clone(), 0
    for i in rows:
        task = tasks[int(rng.integers(len(tasks)))]
        trial = int(rng.integers(opts.depth_buckets))
        made = GENERATORS[task](ctx, x.shape[1] + 1, trial, opts, opts.depth_buckets)
        if made is None:
            continue
        seq = torch.from_numpy(made.tokens)
        x[i], y[i] = seq[:-1].to(x.device), seq[1:].to(y.device)
        replaced += 1
    return x, y, replaced
