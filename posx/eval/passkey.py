"""Passkey retrieval sized for small byte-level models (after Mohtashami & Jaggi 2023).

Each trial is one sequence of exactly L tokens (bytes with the byte tokenizer; with another,
the mark and the key are encoded on their own and the key's tokens are planted and scored):
filler text cut from the held-out split with a random key of ``digits`` digits planted at a
depth that varies over trials. Two variants:

* ``prompt``: the filler holds the statement ``\\npasskey = <key>\\n``; the sequence ends by
  asking ``\\npasskey = `` and the model must answer with the key.
* ``copy``: no prompt at all. The key sits once in the filler and the sequence ends with it
  repeated; the repeat's first digit is the cue and the remaining ``digits - 1`` are scored.
  The filler never holds the cue digit (each one in the window becomes the window's most
  frequent other token), so the cue points at the planted key alone.
  Even a model that never saw a question-and-answer prompt can copy (induction), so this
  gives a signal where the prompted variant gives none.

Depth is the share of the filler before the planted key: 0 puts it at the start of the
sequence (farthest from the question), near 1 right before it. Trials are stratified over
``depth_buckets`` equal depth ranges, so each bucket gets the same number of trials.

Scoring is one teacher-forced forward pass per trial: the NLL of each scored key token, and
whether the argmax at every scored position is the key's token. Greedy decoding reproduces
the key exactly when, and only when, that holds: if the first i generated tokens are right,
the context for token i+1 is the teacher-forced one. So the exact match below is what greedy
decoding would give, without one forward pass per generated token (tests/test_passkey.py
checks this against real autoregressive decoding). The same pass also gives the task suite's
numbers for its ``passkey`` task (``posx.eval.suite``): the prompt trials are scored once per
cell for passkey.csv and tasks.csv.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from posx.core.device import autocast
from posx.core.errors import PosxError
from posx.tasks import scoring
from posx.tasks.base import Context, haystack
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
    """``trials`` sequences of ``length`` tokens; empty when the length cannot hold any filler.

    Seeded by (seed, length, variant): every method evaluated at a length sees the same trials.
    ``tokenizer`` (posx.data.tokenizer; None: bytes) encodes the mark and the key: the key's own
    tokens are planted and scored, so a BPE that merges digits scores fewer, longer tokens.
    """
    if overhead(variant, digits) >= length:  # the byte overhead bounds any tokenizer's
        return []
    rng = np.random.default_rng([seed, length, VARIANTS.index(variant)])
    source = val.numpy() if isinstance(val, torch.Tensor) else np.asarray(val)
    dtype = np.uint8 if tokenizer is None else np.int64
    encode = (lambda text: np.frombuffer(text.encode(), dtype=np.uint8)) if tokenizer is None else tokenizer.encode
    mark, newline = encode(MARK), encode("\n")
    out = []
    for t in range(trials):
        bucket = t % depth_buckets
        depth = (bucket + rng.random()) / depth_buckets
        key = "".join(str(d) for d in rng.integers(0, 10, digits))
        while variant == "copy" and len(encode(key)) < 2:  # the copy cue needs a second token to score
            key = "".join(str(d) for d in rng.integers(0, 10, digits))
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
    """One forward pass per batch of trials; from its logits passkey.csv's per-trial numbers and,
    with ``as_task`` (the suite's ``passkey`` task is these prompt trials), ``posx.tasks.scoring``'s,
    so tasks.csv's passkey rows need no second pass over the same sequences."""
    nlls, exact, task = [], [], ([], [], [])
    if not trials:
        return Scored(np.zeros(0), np.zeros(0, dtype=bool), scoring.result_of(*task) if as_task else None)
    length = len(trials[0].tokens)
    per_batch = max(1, batch_tokens // length)
    for b in range(0, len(trials), per_batch):
        batch = trials[b : b + per_batch]
        x = torch.stack([torch.from_numpy(t.tokens).long() for t in batch]).to(device)  # (B, L)
        with autocast(device):
            logits = model(x)[0].float()  # (B, L, vocab)
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
    return Scored(np.array(nlls), np.array(exact), scoring.result_of(*task) if as_task else None)


def summarize(trials: list[Trial], nll: np.ndarray, exact: np.ndarray, depth_buckets: int) -> list[dict]:
    """One dict per depth bucket: trials, accuracy, key_nll, status."""
    rows = []
    for bucket in range(depth_buckets):
        idx = [i for i, t in enumerate(trials) if t.depth_bucket == bucket]
        row = {
            "depth_lo": bucket / depth_buckets,
            "depth_hi": (bucket + 1) / depth_buckets,
            "trials": len(idx),
            "accuracy": math.nan,
            "key_nll": math.nan,
            "status": "ok",
        }
        if not idx:
            row["status"] = "too_short" if not trials else "no_trials"
        elif not np.isfinite(nll[idx]).all():
            row["status"] = "nonfinite"
        else:
            row["accuracy"] = float(exact[idx].mean())
            row["key_nll"] = float(nll[idx].mean())
        rows.append(row)
    return rows
