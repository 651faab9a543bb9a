"""The synthetic task suite in an evaluation: samples per (length, task), scored per cell, one
tasks.csv row per (task, depth bucket) (docs/evaluation.md, "The task suite"). The ``passkey``
task's samples are passkey.csv's prompt trials when ``shares_passkey``: each cell scores them once.
"""

from __future__ import annotations

import numpy as np
import torch

from posx.eval import passkey
from posx.schema.config import EvalConfig
from posx.tasks import registry, scoring
from posx.tasks.base import Sample, varied
from posx.tasks.chance import chance


def passkey_samples(source, length: int, opts, tokenizer) -> list[Sample]:
    """The passkey's prompt trials as samples, drawn with ``eval.task_options``: where those equal
    ``eval.passkey``'s (``shares_passkey``), the very trials of passkey.csv."""
    made = passkey.make_trials(
        source, length, "prompt", opts.trials, opts.digits, opts.depth_buckets, opts.seed, tokenizer
    )
    return [
        Sample(t.tokens.astype(np.int64), np.arange(length - t.scored, length), t.depth, t.depth_bucket,
               [(t.key_start, t.tokens[t.key_start : t.key_start + t.scored].astype(np.int64))])
        for t in made
    ]  # fmt: skip


def samples_of(task: str, val, length: int, opts, tokenizer, stream: int = 0) -> list[Sample]:
    """The samples of one task at one length; the fixed layout's passkey samples are its own trials."""
    if task == "passkey" and not varied(opts):
        return passkey_samples(val, length, opts, tokenizer)
    return registry.make_samples(task, val, length, opts.trials, opts, opts.seed, tokenizer, stream)


def make_suite(val, lengths: list[int], ev: EvalConfig, tokenizer) -> dict:
    """{(length, task): [Sample]} for every length and task of ``eval.tasks``."""
    opts = ev.task_options
    return {(L, str(task)): samples_of(str(task), val, L, opts, tokenizer) for L in lengths for task in ev.tasks}


def shares_passkey(ev: EvalConfig) -> bool:
    """Whether the suite's ``passkey`` samples are passkey.csv's prompt trials (scored once for both)."""
    pk, opts = ev.passkey, ev.task_options
    drawn = [(c.trials, c.digits, c.depth_buckets, c.seed) for c in (pk, opts)]
    forced = str(ev.task_scoring) == "teacher_forced"  # passkey.csv is teacher-forced
    return (
        forced
        and not varied(opts)
        and "passkey" in ev.tasks
        and pk.enabled
        and "prompt" in pk.variants
        and drawn[0] == drawn[1]
    )


def score_suite(
    model, suite: dict, length: int, batch_tokens: int, device: torch.device, done: dict, generate: bool = False
) -> dict:
    """{task: per-sample results} at ``length``, but for the tasks ``done``; ``generate``: greedy decoding."""
    score = scoring.generate_samples if generate else scoring.score_samples
    return {
        task: done[task] if task in done else score(model, samples, batch_tokens, device)
        for (L, task), samples in suite.items()
        if L == length
    }


def suite_rows(keys: dict, status: str, suite: dict, length: int, results: dict | None, opts) -> list[dict]:
    """tasks.csv rows of one cell, each with its task's chance level at ``length`` under ``opts``
    (``eval.task_options``); ``results`` None when the cell was not scored (``status`` says why)."""
    rows = []
    for (L, task), samples in suite.items():
        if L != length:
            continue
        result = None if results is None else results.get(task)
        level = chance(task, opts, length)
        for r in scoring.summarize(samples, result, opts.depth_buckets, status):
            rows.append({**keys, "task": task, **r, "chance": level})
    return rows
