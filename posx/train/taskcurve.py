"""Accuracy at T on a fixed held-out task set, recorded during training (task_curve.csv).

A run with a task mix (``data.task_mix`` > 0) draws, once, ``data.task_options.trials`` samples
of every task of ``data.mix_tasks`` at the training length T, from the *held-out* split, seeded
by ``data.task_options.seed`` and the validation stream (``registry.VALIDATION``: the same set
for every run of that data and those options, and never the samples an evaluation scores,
whatever its seed; the fixed layout's passkey trials have no stream); at
every validation it scores them teacher-forced (``posx.tasks.scoring``: exact answers, answer
tokens right, answer NLL) and appends one row per task to task_curve.csv with the step and the
training tokens seen. So a report tells a model that has not learned a task yet (the curve
still low at 1x) from one that learned it and fails past T (the curve high, the 2x-8x cells
low). Rows past a resumed checkpoint's step are dropped on resume: the curve is the one an
uninterrupted run writes.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from posx.core import files
from posx.eval import tables
from posx.eval.suite import samples_of
from posx.eval.tables import perplexity
from posx.runs.paths import TASK_CURVE
from posx.tasks import scoring
from posx.tasks.base import TaskError
from posx.tasks.registry import VALIDATION

CURVE = TASK_CURVE
COLUMNS = tuple(tables.CURVE_COLUMNS)


def held_out(data_cfg, T: int, val, tokenizer) -> dict:
    """{task: [Sample]} at T for every mixed task; {} without a mix (nothing is recorded)."""
    if data_cfg.task_mix <= 0:
        return {}
    opts = data_cfg.task_options
    try:
        return {str(t): samples_of(str(t), val, T, opts, tokenizer, VALIDATION) for t in data_cfg.mix_tasks}
    except TaskError as exc:
        raise exc.of("data.") from None


@torch.no_grad()
def score(model, held: dict, step: int, tokens: int, batch_tokens: int, device: torch.device) -> list[dict]:
    """One row per task of ``held``: the model's answers now, in eval mode (as evaluation scores)."""
    was_training = model.training
    model.eval()
    rows = []
    for task, samples in held.items():
        result = scoring.score_samples(model, samples, batch_tokens, device)
        n = len(samples)
        rows.append(
            {
                "step": step,
                "tokens": tokens,
                "task": task,
                "trials": n,
                "accuracy": float(result["exact"].mean()) if n else math.nan,
                "token_accuracy": float(result["token_accuracy"].mean()) if n else math.nan,
                "answer_nll": float(result["nll"].mean()) if n else math.nan,
            }
        )
    model.train(was_training)
    return rows


def latest(rows: list[dict]) -> list[dict]:
    """The rows of the last scored step (one per task); [] without any."""
    if not rows:
        return []
    last = max(r["step"] for r in rows)
    return [r for r in rows if r["step"] == last]


def brief(rows: list[dict]) -> str:
    """The progress line's task part: the exact share per task at the last scored step
    (``exact copy 99% mqar 3%``); "" before the first validation or without a mix."""
    shown = [f"{r['task']} {r['accuracy']:.0%}" for r in latest(rows) if r["accuracy"] == r["accuracy"]]
    return f"exact {' '.join(shown)}" if shown else ""


def summary(rows: list[dict]) -> str:
    """The done line's task part: exact answers per task on the held-out set at T at the last
    scored step (``copy 127/128 (99.2%)``); "" without any."""
    last = latest(rows)
    if not last:
        return ""
    cells = [
        f"{r['task']} {round(r['accuracy'] * r['trials'])}/{r['trials']} ({r['accuracy']:.1%})"
        for r in last
        if r["accuracy"] == r["accuracy"]
    ]
    if not cells:
        return ""
    return f"exact answers at T on the held-out task set (step {last[0]['step']}): {', '.join(cells)}"


def done_scores(cfg, val_loss: float, rows: list[dict]) -> str:
    """The done line's scores: a run with a task mix first states its exact answers at T
    (``summary``); the text loss follows, said to be of text that a task-only run never saw."""
    text = (
        f"val loss {val_loss:.4f} (ppl {perplexity(val_loss):.2f} "
        f"over {cfg.train.eval_batches} batches of random held-out windows)"
    )
    if float(cfg.data.task_mix) >= 1:
        text = f"text {text}, a text this run never trained on (data.task_mix=1)"
    tasks = summary(rows)
    return f"{tasks}; {text}" if tasks else text


def write(run_dir: Path, rows: list[dict]) -> None:
    """task_curve.csv with every row so far, replaced atomically (none: no file)."""
    if rows:
        with files.atomic_path(run_dir / CURVE) as tmp:
            pd.DataFrame(rows, columns=list(COLUMNS)).to_csv(tmp, index=False)


def read(run_dir: Path, up_to: int | None = None) -> list[dict]:
    """The rows of a run's task_curve.csv (at or before step ``up_to``: a resumed run's checkpoint),
    each checked (``posx.eval.tables.read_table``: a damaged curve is one line naming the file
    and the row, never carried on); [] without one."""
    path = run_dir / CURVE
    if not path.exists() and not path.is_symlink():
        return []
    frame = tables.read_table(path)[list(COLUMNS)]
    if up_to is not None:
        frame = frame[frame["step"] <= up_to]
    frame = frame.astype({"step": "int64", "tokens": "int64", "trials": "int64"})
    records = frame.to_dict("records")
    return [{k: (v.item() if isinstance(v, np.generic) else v) for k, v in row.items()} for row in records]
