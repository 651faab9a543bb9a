"""Accuracy at T on a fixed held-out task set, scored at every validation (task_curve.csv): it tells
a model that has not learned a task from one that fails only past T. The set is drawn once from
the held-out split on the validation stream (never an evaluation's samples); a resume drops the
rows past its checkpoint.
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
from posx.tasks.chance import chance
from posx.tasks.registry import VALIDATION

SCORED = {"accuracy": "exact", "token_accuracy": "token_accuracy", "answer_nll": "nll"}  # column: score_samples' key


def held_out(data_cfg, T: int, val, tokenizer) -> dict:
    """{task: ([Sample], its chance level)} at T for every mixed task; {} without a mix (nothing is recorded)."""
    if data_cfg.task_mix <= 0:
        return {}
    opts = data_cfg.task_options
    try:
        return {str(t): (samples_of(str(t), val, T, opts, tokenizer, VALIDATION), chance(str(t), opts, T))
                for t in data_cfg.mix_tasks}  # fmt: skip
    except TaskError as exc:
        raise exc.of("data.") from None


@torch.no_grad()
def score(model, held: dict, step: int, tokens: int, batch_tokens: int, device: torch.device) -> list[dict]:
    """One row per task of ``held``: the model's answers now, in eval mode (as evaluation scores)."""
    was_training = model.training
    model.eval()
    rows = []
    for task, (samples, level) in held.items():
        result = scoring.score_samples(model, samples, batch_tokens, device)
        n = len(samples)
        means = {column: float(result[key].mean()) if n else math.nan for column, key in SCORED.items()}
        rows.append({"step": step, "tokens": tokens, "task": task, "trials": n, **means, "chance": level})
    model.train(was_training)
    return rows


def latest(rows: list[dict]) -> list[dict]:
    """The rows of the last scored step (one per task) that scored a trial; [] without any."""
    last = max((r["step"] for r in rows), default=None)
    return [r for r in rows if r["step"] == last and r["accuracy"] == r["accuracy"]]


def summary(rows: list[dict]) -> str:
    """The done line's task part (``copy 127/128 (99.2%)``); "" without any."""
    last = latest(rows)
    cells = [f"{r['task']} {round(r['accuracy'] * r['trials'])}/{r['trials']} ({r['accuracy']:.1%})" for r in last]
    return f"exact answers at T on the held-out task set (step {last[0]['step']}): {', '.join(cells)}" if last else ""


def done_scores(cfg, val_loss: float, rows: list[dict]) -> str:
    """The done line's scores: exact answers at T first, then the text loss (of text a task-only run never saw)."""
    text = (f"val loss {val_loss:.4f} (ppl {perplexity(val_loss):.2f} "
            f"over {cfg.train.eval_batches} batches of random held-out windows)")  # fmt: skip
    if float(cfg.data.task_mix) >= 1:
        text = f"text {text}, a text this run never trained on (data.task_mix=1)"
    tasks = summary(rows)
    return f"{tasks}; {text}" if tasks else text


def write(run_dir: Path, rows: list[dict]) -> None:
    """task_curve.csv with every row so far, replaced atomically (none: no file)."""
    if rows:
        with files.atomic_path(run_dir / TASK_CURVE) as tmp:
            pd.DataFrame(rows, columns=tables.CURVE_COLUMNS).to_csv(tmp, index=False)


def read(run_dir: Path, up_to: int | None = None) -> list[dict]:
    """The checked rows of a run's task_curve.csv, up to step ``up_to`` (a resumed checkpoint's); [] without one."""
    path = run_dir / TASK_CURVE
    if not path.exists() and not path.is_symlink():
        return []
    frame = tables.read_table(path)[tables.CURVE_COLUMNS]
    if up_to is not None:
        frame = frame[frame["step"] <= up_to]
    frame = frame.astype({"step": "int64", "tokens": "int64", "trials": "int64"})
    records = frame.to_dict("records")
    return [{k: (v.item() if isinstance(v, np.generic) else v) for k, v in row.items()} for row in records]
