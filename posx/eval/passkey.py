"""Passkey retrieval sized for small byte-level models (after Mohtashami & Jaggi 2023; variants:
docs/evaluation.md). With a tokenizer the mark and the key are encoded on their own.

Scoring is one teacher-forced pass per trial: greedy decoding reproduces the key exactly when,
and only when, the argmax at every scored position is the key's token (if the first i generated
tokens are right, the context for token i+1 is the teacher-forced one; tests/test_passkey.py
checks it against real decoding). The same pass gives the task suite's ``passkey`` rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from posx.core.errors import PosxError
from posx.tasks import scoring
from posx.tasks.base import Context, depth_of, encoder, haystack, numbers
from posx.tasks.niah import PASSKEY_MARK

VARIANTS = ("prompt", "copy")
MARK = PASSKEY_MARK  # the statement and the question both start with it


@dataclass
class Trial:
    tokens: np.ndarray  # (L,) the whole sequence: uint8 bytes, or int64 ids of a tokenizer
    key: str  # the planted digits
    depth: float  # share of the filler before the planted key, in [0, 1)
    depth_bucket: int  # 0 .. depth_buckets - 1
    key_start: int  # index of the planted key's first digit
    scored: int  # the last `scored` tokens of the sequence are the scored key tokens
    filler_offset: int  # where in the held-out split the filler starts


def overhead(variant: str, digits: int) -> int:
    """Bytes of a sequence that are not filler (byte tokenizer; at most this many tokens otherwise)."""
    if variant == "prompt":
        return 2 * len(MARK) + 2 * digits + 1  # MARK key \n ... MARK key
    return 2 * digits


def _parts(variant: str, key_ids: np.ndarray, mark: np.ndarray, newline: np.ndarray):
    """(planted, tail, offset of the key in planted, scored key tokens) of one trial."""
    if variant == "prompt":
        return np.concatenate([mark, key_ids, newline]), np.concatenate([mark, key_ids]), len(mark), len(key_ids)
    return key_ids, key_ids, 0, len(key_ids) - 1


def make_trials(
    val: torch.Tensor,
    length: int,
    variant: str,
    trials: int,
    digits: int,
    depth_buckets: int,
    seed: int,
    tokenizer=None,
) -> list[Trial]:
    """``trials`` sequences of ``length`` tokens seeded by (seed, length, variant); [] when none fits."""
    if overhead(variant, digits) >= length:  # the byte overhead bounds any tokenizer's
        return []
    rng = np.random.default_rng([seed, length, VARIANTS.index(variant)])
    source = val.numpy() if isinstance(val, torch.Tensor) else np.asarray(val)
    dtype = np.uint8 if tokenizer is None else np.int64
    encode = encoder(tokenizer)
    mark, newline = encode(MARK), encode("\n")
    out = []
    for t in range(trials):
        depth, bucket = depth_of(rng, t, depth_buckets)
        key = numbers(rng, 1, digits)[0]
        while variant == "copy" and len(encode(key)) < 2:  # the copy cue needs a second token to score
            key = numbers(rng, 1, digits)[0]
        planted, tail, key_at, scored = _parts(variant, encode(key), mark, newline)
        filler_len = length - len(planted) - len(tail)
        if len(source) < filler_len:
            raise PosxError(
                f"the held-out split has {len(source)} tokens, too few for passkey filler of "
                f"{filler_len}; use more data or set eval.passkey.enabled=false"
            )
        avoid = (planted[:1],) if variant == "copy" else (mark,)  # the cue, the question: once each
        offset, filler = haystack(Context(source, encode, rng), filler_len, avoid)
        cut = min(filler_len, int(depth * filler_len))
        seq = np.concatenate([filler[:cut], planted, filler[cut:], tail]).astype(dtype)  # (L,)
        assert len(seq) == length, (len(seq), length)
        out.append(Trial(seq, key, depth, bucket, cut + key_at, scored, offset))
    return out


@dataclass
class Scored:
    """The trials of one cell scored once: passkey.csv's numbers and the task suite's."""

    nll: np.ndarray  # (trials,) mean NLL of the scored key tokens (nats)
    exact: np.ndarray  # (trials,) whether greedy decoding reproduces the key
    as_task: dict | None  # the same logits judged as task samples (``score_samples``' result); None unless asked


@torch.no_grad()
def score(model, trials: list[Trial], batch_tokens: int, device: torch.device, as_task: bool = False) -> Scored:
    """passkey.csv's per-trial numbers from one forward pass per batch and, with ``as_task``, the task
    suite's from the same logits (no second pass over the prompt trials)."""
    nlls, exact, task = [], [], ([], [], [])
    for b, x, logits in scoring.batch_logits(model, [t.tokens for t in trials], batch_tokens, device):
        batch, length = trials[b : b + len(x)], x.shape[1]
        k = max(t.scored for t in batch)
        # logits at positions L-k-1 .. L-2 predict tokens L-k .. L-1
        pred = logits[:, length - k - 1 : length - 1]  # (B, k, vocab)
        target = x[:, length - k :]  # (B, k)
        nll = F.cross_entropy(pred.flatten(0, 1), target.flatten(), reduction="none").view(len(batch), k)
        hit = pred.argmax(-1) == target  # (B, k)
        for i, t in enumerate(batch):
            nlls.append(nll[i, k - t.scored :].mean().item())
            exact.append(bool(hit[i, k - t.scored :].all()))
            if as_task:
                answer = torch.arange(length - t.scored, length, device=device)  # as the suite indexes a sample
                for values, value in zip(task, scoring.answer_stats(logits[i, answer - 1], x[i, answer])):
                    values.append(value)
    return Scored(np.array(nlls), np.array(exact, dtype=bool), scoring.result_of(*task) if as_task else None)


def summarize(
    trials: list[Trial], nll: np.ndarray | None, exact: np.ndarray | None, depth_buckets: int, status: str = "ok"
) -> list[dict]:
    """One dict per depth bucket; ``nll`` None (an unscored cell): ``status`` in every row."""
    rows = []
    for bucket in range(depth_buckets):
        idx = [] if nll is None else [i for i, t in enumerate(trials) if t.depth_bucket == bucket]
        row = {
            "depth_lo": bucket / depth_buckets,
            "depth_hi": (bucket + 1) / depth_buckets,
            "trials": len(idx),
            "accuracy": math.nan,
            "key_nll": math.nan,
            "status": status if nll is None else "ok",
        }
        if nll is not None and not idx:
            row["status"] = "too_short" if not trials else "no_trials"
        elif idx and not np.isfinite(nll[idx]).all():
            row["status"] = "nonfinite"
        elif idx:
            row["accuracy"] = float(exact[idx].mean())
            row["key_nll"] = float(nll[idx].mean())
        rows.append(row)
    return rows
