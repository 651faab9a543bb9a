"""Task sequences mixed into training batches (docs/evaluation.md, "Training on the tasks").

With probability ``data.task_mix`` a sequence is replaced by a generated task sequence of T + 1
tokens, the training split as haystack; ``data.mix_loss=answers`` keeps only the answers as targets
(zoology's MQAR training, Arora et al. 2023). ``data.task_pool=N`` generates N once (a sequence
costs about a millisecond of Python). Step s draws from (seed, s), apart from the batch generator:
a resumed run mixes as an uninterrupted one, and ``task_mix=0`` draws nothing.
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
    """``x, y`` with a ``data.task_mix`` share of rows replaced by task sequences (from ``pool`` if given)."""
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
    """``n`` sequences of ``length`` tokens (None: did not fit) of tasks drawn from ``data.mix_tasks``."""
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
    """``data.task_pool`` sequences as (inputs, targets) (N, T); None when there is no pool."""
    if data_cfg.task_mix <= 0 or data_cfg.task_pool <= 0:
        return None
    ctx = Context(np.asarray(source), encoder(tokenizer), np.random.default_rng([seed, POOL_STREAM]))
    answers_only = str(data_cfg.mix_loss) == "answers"
    rows = [task_rows(m, answers_only, "cpu") for m in draw(data_cfg, T + 1, ctx, data_cfg.task_pool) if m is not None]
    if not rows:
        return None
    return torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows])


def task_rows(made: Sample, answers_only: bool, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) (T,) of a sequence of T + 1; ``answers_only``: the others ``IGNORE``."""
    seq = torch.from_numpy(made.tokens)
    y = seq[1:].clone()
    if answers_only:
        keep = torch.from_numpy(made.answer - 1)  # target t predicts token t + 1
        y = torch.full_like(y, IGNORE).index_copy_(0, keep, y[keep])
    return seq[:-1].to(device), y.to(device)
