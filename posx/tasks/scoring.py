"""Scoring of task samples, and their summary per depth bucket (docs/evaluation.md).

Teacher-forced (``score_samples``): per sample the answer tokens' mean NLL, token accuracy and
whether all are right (what greedy decoding reproduces when the separators are given). RULER's way
(``generate_samples``, Hsieh et al. 2024): greedy decoding from the question, exact when the span
from the first answer token to the last is; a sample of several questions (MQAR) is given each one.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from posx.core.device import autocast
from posx.tasks.base import Sample
from posx.tasks.interval import wilson


@torch.no_grad()
def score_samples(model, samples: list[Sample], batch_tokens: int, device: torch.device) -> dict:
    """{"nll", "token_accuracy", "exact"}: one value per sample (arrays)."""
    nll, token_acc, exact = [], [], []
    for b, x, logits in batch_logits(model, [s.tokens for s in samples], batch_tokens, device):
        for i, s in enumerate(samples[b : b + len(x)]):
            at = torch.from_numpy(s.answer).to(device)  # (k,)
            one = answer_stats(logits[i, at - 1], x[i, at])  # (k, vocab), (k,)
            for values, value in zip((nll, token_acc, exact), one):
                values.append(value)
    return result_of(nll, token_acc, exact)


def batch_logits(model, seqs: list[np.ndarray], batch_tokens: int, device: torch.device):
    """(index of the first sequence, x (B, L) int64, float logits (B, L, vocab)) of each batch of
    ``seqs`` (all of one length L), ``batch_tokens`` // L sequences a forward pass."""
    per_batch = max(1, batch_tokens // len(seqs[0])) if seqs else 1
    for b in range(0, len(seqs), per_batch):
        x = torch.stack([torch.from_numpy(s).long() for s in seqs[b : b + per_batch]]).to(device)
        with autocast(device):
            logits = model(x)[0].float()
        yield b, x, logits


SCORINGS = ("teacher_forced", "generate")  # eval.task_scoring


@torch.no_grad()
def generate_samples(model, samples: list[Sample], batch_tokens: int, device: torch.device) -> dict:
    """``score_samples``' result with ``exact`` and ``token_accuracy`` from greedy decoding."""
    result = score_samples(model, samples, batch_tokens, device)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, s in enumerate(samples):  # spans at the same positions decode together
        for span in decoded_spans(s):
            groups.setdefault(span, []).append(i)
    hits: list[list[bool]] = [[] for _ in samples]  # per sample: each answer token generated right
    spans_right = [True] * len(samples)
    for (start, end), idx in groups.items():
        truth = torch.stack([torch.from_numpy(samples[i].tokens) for i in idx]).to(device)  # (n, L)
        made = greedy(model, truth[:, :start], end + 1 - start)  # (n, end + 1 - start)
        hit = made == truth[:, start : end + 1]
        for row, i in enumerate(idx):
            answer = samples[i].answer
            at = torch.from_numpy(answer[(answer >= start) & (answer <= end)] - start).to(device)
            spans_right[i] = spans_right[i] and bool(hit[row].all())
            hits[i].extend(hit[row, at].tolist())
    for i, h in enumerate(hits):
        result["exact"][i] = spans_right[i]
        result["token_accuracy"][i] = sum(h) / len(h)
    return result


def decoded_spans(s: Sample) -> list[tuple[int, int]]:
    """(first, last) index of each span greedy decoding generates: from the first answer token, and
    from each later question's answer (``Sample.asked``), to the last answer token before the next."""
    starts = [int(s.answer[0]), *(int(a) for a in s.asked)]
    ends = [int(s.answer[s.answer < nxt][-1]) for nxt in starts[1:]] + [int(s.answer[-1])]
    return list(zip(starts, ends))


def greedy(model, prefix: torch.Tensor, steps: int) -> torch.Tensor:
    """``steps`` tokens (n, steps) decoded greedily after ``prefix`` (n, p), one full pass each."""
    x = prefix
    for _ in range(steps):
        with autocast(x.device):
            nxt = model(x)[0][:, -1].float().argmax(-1, keepdim=True)  # (n, 1)
        x = torch.cat([x, nxt], dim=1)
    return x[:, prefix.shape[1] :]


def answer_stats(pred: torch.Tensor, target: torch.Tensor) -> tuple[float, float, bool]:
    """(mean NLL, token accuracy, exact) of logits ``pred`` (k, vocab) for answer tokens ``target`` (k,)."""
    hit = pred.argmax(-1) == target
    return F.cross_entropy(pred, target).item(), hit.float().mean().item(), bool(hit.all())


def result_of(nll: list, token_accuracy: list, exact: list) -> dict:
    """``score_samples``' result from per-sample values."""
    return {"nll": np.array(nll), "token_accuracy": np.array(token_accuracy), "exact": np.array(exact, dtype=bool)}


def empty_row(bucket: int, buckets: int, status: str) -> dict:
    return {
        "depth_lo": bucket / buckets, "depth_hi": (bucket + 1) / buckets, "trials": 0, "accuracy": math.nan,
        "accuracy_lo": math.nan, "accuracy_hi": math.nan, "token_accuracy": math.nan, "answer_nll": math.nan,
        "answer_nll_se": math.nan, "answer_tokens": math.nan, "status": status,
    }  # fmt: skip


def summarize(samples: list[Sample], result: dict | None, buckets: int, status: str = "ok") -> list[dict]:
    """One row per depth bucket; ``result`` None (a cell that was not scored): ``status`` in every row."""
    rows = []
    for bucket in range(buckets):
        idx = [i for i, s in enumerate(samples) if s.depth_bucket == bucket]
        if result is None or not idx:
            why = status if result is None else "too_short" if not samples else "no_trials"
            rows.append(empty_row(bucket, buckets, why))
            continue
        nll = result["nll"][idx]
        if not np.isfinite(nll).all():
            rows.append(empty_row(bucket, buckets, "nonfinite"))
            continue
        hits, n = float(result["exact"][idx].sum()), len(idx)
        lo, hi = wilson(hits, n)
        se = float(nll.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
        rows.append({
            **empty_row(bucket, buckets, "ok"), "trials": n, "accuracy": hits / n, "accuracy_lo": lo,
            "accuracy_hi": hi, "token_accuracy": float(result["token_accuracy"][idx].mean()),
            "answer_nll": float(nll.mean()), "answer_nll_se": se,
            "answer_tokens": float(np.mean([len(samples[i].answer) for i in idx])),
        })  # fmt: skip
    return rows
