"""Task sequences mixed into training batches (``data.task_mix``, ``data.mix_tasks``).

With probability ``task_mix`` each sequence of a training batch is replaced by a generated task
sequence of the same length (T + 1 tokens: the inputs and their shifted targets), built by the
generators the evaluation scores (``posx.tasks.registry``) with the sizes of
``data.task_options`` (its ``trials`` and ``seed`` are not read: the draws come from the run's
seed and the step), from the *training* split as the haystack; the task is drawn uniformly
from ``data.mix_tasks``. With ``data.mix_loss=all`` the model learns from the whole sequence,
as from any other; with ``answers`` only the answer tokens of a task sequence are targets (the
others get ``IGNORE``, cross-entropy's ignore index), as zoology trains MQAR (Arora et al. 2023)
and the synthetic-task studies their models. Training on such sequences at length T and
measuring the same tasks at 1x-8x T is the protocol of the length-generalisation studies
(Kazemnejad et al., NeurIPS 2023, arXiv 2305.19466; Ruoss et al., ACL 2023, arXiv 2305.16843).

Generating a sequence costs about a millisecond of Python, as much as a small model's step on
the CPU takes per few sequences; ``data.task_pool=N`` generates N sequences once, when the run
sets up (seeded by the run's seed), and the mix then draws its rows from them (as zoology trains
on a fixed set of MQAR examples). The pool is the same on every resume.

Deterministic from the seed: the draws of step s come from a numpy generator seeded by
(seed, s), apart from the batch generator, so a resumed run mixes as an uninterrupted one and
``task_mix=0`` draws nothing (its batches are exactly those of a run without the mix). A task
that cannot fit in T + 1 tokens leaves its sequence unchanged.
"""

from __future__ import annotations

import numpy as np
import torch

from posx.tasks.base import Context, Sample, TaskError, encoder
from posx.tasks.registry import GENERATORS

MIX_LOSSES = ("all", "answers")  # data.mix_loss
IGNORE = -100  # torch's cross-entropy ignore_index: a target that adds nothing to the loss
MIX_STREAM = 7919  # keeps the mix's random stream apart from other (seed, step)-seeded streams
POOL_STREAM = 7907  # the pool's (data.task_pool) stream, drawn once per run


def mix_rows(batch: int, p: float, seed: int, step: int) -> tuple[np.ndarray, np.random.Generator]:
    """(which of the ``batch`` sequences are replaced, the generator that then draws the tasks)."""
    rng = np.random.default_rng([seed, step, MIX_STREAM])
    return np.flatnonzero(rng.random(batch) < p), rng


def mix_batch(x: torch.Tensor, y: torch.Tensor, data_cfg, source, seed: int, step: int, tokenizer=None, pool=None):
    """``x, y`` (B, T) with a ``data.task_mix`` share of their rows replaced by task sequences;
    also returns how many were replaced. ``source``: the training split's token ids. ``pool``:
    the (inputs, targets) of ``make_pool``, whose rows are drawn instead of generated; None:
    each sequence generated when it is drawn."""
    p = float(data_cfg.task_mix)
    if p <= 0:
        return x, y, 0
    rows, rng = mix_rows(x.shape[0], p, seed, step)
    if len(rows) == 0:
        return x, y, 0
    x, y = x.clone(), y.clone()
    if pool is not None:
        take = torch.from_numpy(rng.integers(len(pool[0]), size=len(rows)))
        index = torch.from_numpy(rows)
        x[index], y[index] = pool[0][take].to(x.device), pool[1][take].to(y.device)
        return x, y, len(rows)
    replaced = 0
    for i, made in zip(
        rows, draw(data_cfg, x.shape[1] + 1, Context(np.asarray(source), encoder(tokenizer), rng), len(rows))
    ):
        if made is not None:
            x[i], y[i] = task_rows(made, str(data_cfg.mix_loss) == "answers", x.device)
            replaced += 1
    return x, y, replaced


def draw(data_cfg, length: int, ctx: Context, n: int):
    """``n`` task sequences of ``length`` tokens (None where the drawn task does not fit), each
    of a task drawn uniformly from ``data.mix_tasks`` at a random depth bucket."""
    tasks, opts = [str(t) for t in data_cfg.mix_tasks], data_cfg.task_options
    for _ in range(n):
        task = tasks[int(ctx.rng.integers(len(tasks)))]
        trial = int(ctx.rng.integers(opts.depth_buckets))
        try:
            made = GENERATORS[task](ctx, length, trial, opts, opts.depth_buckets)
        except TaskError as exc:
            raise exc.of("data.") from None
        yield made


def make_pool(data_cfg, T: int, source, seed: int, tokenizer=None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``data.task_pool`` task sequences generated once, as (inputs, targets) (N, T), seeded by
    (seed, POOL_STREAM); None when the mix is off or the pool is 0 (sequences generated as drawn)."""
    if data_cfg.task_mix <= 0 or data_cfg.task_pool <= 0:
        return None
    ctx = Context(np.asarray(source), encoder(tokenizer), np.random.default_rng([seed, POOL_STREAM]))
    answers_only = str(data_cfg.mix_loss) == "answers"
    rows = [task_rows(m, answers_only, "cpu") for m in draw(data_cfg, T + 1, ctx, data_cfg.task_pool) if m is not None]
    if not rows:
        return None
    return torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows])


def task_rows(made: Sample, answers_only: bool, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) (T,) of a task sequence of T + 1 tokens; with ``answers_only`` every
    target but the answer tokens is ``IGNORE``."""
    seq = torch.from_numpy(made.tokens)
    y = seq[1:].clone()
    if answers_only:
        keep = torch.from_numpy(made.answer - 1)  # target t predicts token t + 1
        y = torch.full_like(y, IGNORE).index_copy_(0, keep, y[keep])
    return seq[:-1].to(device), y.to(device)
