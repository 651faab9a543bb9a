"""Passkey generator and scoring: the key is planted where the trial says, and scored there."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from posx.configure.compose import compose
from posx.core.errors import PosxError
from posx.eval import passkey
from posx.eval.passkey import MARK

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def val() -> torch.Tensor:
    text = "".join(f"def f{i}(x):\n    return x + {i}  # comment\n" for i in range(400)).encode()
    return torch.from_numpy(np.frombuffer(text, dtype=np.uint8).copy())


@pytest.mark.parametrize("variant", passkey.VARIANTS)
@pytest.mark.parametrize("length", [64, 200])
def test_the_key_is_planted_where_the_trial_says(val, variant, length):
    digits = 4
    trials = passkey.make_trials(val, length, variant, trials=12, digits=digits, depth_buckets=4, seed=3)
    assert len(trials) == 12
    filler_len = length - passkey.overhead(variant, digits)
    source = val.numpy().tobytes()
    for t in trials:
        seq = t.tokens.tobytes()
        assert len(seq) == length
        assert len(t.key) == digits and t.key.isdigit()
        assert seq[t.key_start : t.key_start + digits] == t.key.encode()
        if variant == "prompt":
            assert seq[t.key_start - len(MARK) : t.key_start] == MARK.encode()
            assert seq[t.key_start + digits : t.key_start + digits + 1] == b"\n"
            assert seq[-digits - len(MARK) :] == (MARK + t.key).encode()
            assert t.scored == digits
            planted_at, planted_len = t.key_start - len(MARK), len(MARK) + digits + 1
        else:
            assert seq[-digits:] == t.key.encode()
            assert t.scored == digits - 1  # the repeat's first digit is the cue
            planted_at, planted_len = t.key_start, digits
        # what is left once the planted statement and the tail are cut out is held-out text
        filler = seq[:planted_at] + seq[planted_at + planted_len : length - (planted_len - (variant == "prompt"))]
        window = source[t.filler_offset : t.filler_offset + filler_len]
        if variant == "prompt":
            assert filler == window
        else:  # held-out text with the cue digit taken out: it differs only where the cue stood
            cue = t.key.encode()[0]
            assert cue not in filler and all(f == w or w == cue for f, w in zip(filler, window))
        # the depth says where the key went, and lies in its bucket
        assert planted_at == int(t.depth * filler_len)
        assert t.depth_bucket / 4 <= t.depth < (t.depth_bucket + 1) / 4
    assert [sum(t.depth_bucket == b for t in trials) for b in range(4)] == [3, 3, 3, 3]


def test_trials_are_seeded_and_too_short_lengths_get_none(val):
    a = passkey.make_trials(val, 80, "prompt", 6, 5, 3, seed=1)
    b = passkey.make_trials(val, 80, "prompt", 6, 5, 3, seed=1)
    c = passkey.make_trials(val, 80, "prompt", 6, 5, 3, seed=2)
    assert [t.tokens.tobytes() for t in a] == [t.tokens.tobytes() for t in b]
    assert [t.key for t in a] != [t.key for t in c]
    assert passkey.make_trials(val, passkey.overhead("prompt", 5), "prompt", 6, 5, 3, seed=1) == []
    assert len(passkey.make_trials(val, passkey.overhead("copy", 5) + 1, "copy", 6, 5, 3, seed=1)) == 6


class Oracle(nn.Module):
    """Predicts the true next token of its input with a wide margin, except at ``wrong``
    positions, where it predicts a byte that never occurs (0)."""

    def __init__(self, wrong=()):
        super().__init__()
        self.wrong = list(wrong)

    def forward(self, x):
        B, L = x.shape
        logits = torch.zeros(B, L, 256)
        nxt = torch.cat([x[:, 1:], torch.zeros(B, 1, dtype=torch.long)], dim=1)  # (B, L)
        logits.scatter_(2, nxt[..., None], 20.0)
        for p in self.wrong:
            logits[:, p] = 0.0
            logits[:, p, 0] = 20.0
        return logits, None  # as GPT.forward without targets


def _score(model, trials, batch_tokens, device):
    """Per trial: the mean NLL of the scored key tokens and whether greedy decoding reproduces them."""
    scored = passkey.score(model, trials, batch_tokens, device)
    return scored.nll, scored.exact


@pytest.mark.parametrize("variant", passkey.VARIANTS)
def test_scoring_reads_exactly_the_key_positions(val, variant):
    L, digits = 96, 5
    trials = passkey.make_trials(val, L, variant, 8, digits, 4, seed=0)
    k = trials[0].scored
    nll, exact = _score(Oracle(), trials, batch_tokens=3 * L, device=CPU)
    assert exact.all() and (nll < 1e-6).all()
    # wrong everywhere except the positions that predict the scored key tokens: still exact
    before = list(range(0, L - k - 1))
    nll, exact = _score(Oracle(before), trials, 3 * L, CPU)
    assert exact.all() and (nll < 1e-6).all()
    # wrong at the prediction of the last key token: no trial is exact, NLL up by 20/k
    nll, exact = _score(Oracle([L - 2]), trials, 3 * L, CPU)
    assert not exact.any()
    assert nll == pytest.approx(np.full(len(trials), 20.0 / k), rel=1e-4)
    # the position predicting the first digit of the repeat is scored by prompt, not by copy
    nll, exact = _score(Oracle([L - digits - 1]), trials, 3 * L, CPU)
    assert exact.all() == (variant == "copy")


class Induction(nn.Module):
    """A causal rule-based model: predicts the byte that followed the longest earlier match
    of the current suffix (the most recent on ties); 0 when nothing matches."""

    def forward(self, x):
        B, L = x.shape
        logits = torch.zeros(B, L, 256)
        for b in range(B):
            s = x[b].tolist()
            for p in range(L):
                best, guess = 0, 0
                for j in range(p - 1, -1, -1):
                    k = 0
                    while k <= j and s[j - k] == s[p - k]:
                        k += 1
                    if k > best:
                        best, guess = k, s[j + 1]
                logits[b, p, guess] = 1.0
        return logits, None  # as GPT.forward without targets


def greedy(model, prefix: torch.Tensor, n: int) -> list[int]:
    """Real autoregressive greedy decoding, one forward pass per generated token."""
    seq = prefix.tolist()
    for _ in range(n):
        seq.append(int(model(torch.tensor([seq]))[0][0, -1].argmax()))
    return seq[len(prefix) :]


def test_teacher_forced_exact_match_is_greedy_decoding(val):
    model, outcomes = Induction(), []
    for variant in passkey.VARIANTS:
        trials = passkey.make_trials(val, 72, variant, 8, 3, 2, seed=5)
        for t in trials[1::2]:  # the planted key's last digit changed: induction copies the wrong key
            t.tokens[t.key_start + 2] = ord("0") + (t.tokens[t.key_start + 2] - ord("0") + 1) % 10
        _, exact = _score(model, trials, 1000, CPU)
        for t, hit in zip(trials, exact):
            prompt = torch.from_numpy(t.tokens[: -t.scored]).long()
            generated = greedy(model, prompt, t.scored)
            assert (generated == t.tokens[-t.scored :].tolist()) == bool(hit)
            outcomes.append(bool(hit))
    assert any(outcomes) and not all(outcomes)  # both outcomes occur: the check can fail


def test_summarize_by_depth_bucket(val):
    trials = passkey.make_trials(val, 64, "copy", 6, 3, 3, seed=0)
    nll = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    exact = np.array([True, False, False, False, True, True])
    rows = passkey.summarize(trials, nll, exact, 3)
    assert [r["trials"] for r in rows] == [2, 2, 2]
    # trial t is in bucket t % 3
    assert [r["accuracy"] for r in rows] == [0.5, 0.5, 0.5]
    assert [r["key_nll"] for r in rows] == [2.5, 3.5, 4.5]
    assert [(r["depth_lo"], r["depth_hi"]) for r in rows] == [(0, 1 / 3), (1 / 3, 2 / 3), (2 / 3, 1)]
    nll[0] = math.inf
    assert passkey.summarize(trials, nll, exact, 3)[0]["status"] == "nonfinite"
    assert all(r["status"] == "too_short" for r in passkey.summarize([], nll[:0], exact[:0], 3))


BAD_EVAL = [
    ("eval.protocol=bogus", "eval.protocol=bogus is unknown"),
    ("eval.stride=0", "eval.stride must be positive"),
    ("eval.bucket_width=-4", "eval.bucket_width must be positive"),
    ("eval.passkey.trials=0", "eval.passkey.trials must be positive"),
    ("eval.passkey.digits=1", "copy variant needs at least 2 digits"),
    ("eval.passkey.variants=[prompt,bogus]", "eval.passkey.variants has unknown value 'bogus'"),
    ("eval.passkey.depth_buckets=32", "fewer than eval.passkey.depth_buckets"),
]


@pytest.mark.parametrize("override,needle", BAD_EVAL, ids=[o for o, _ in BAD_EVAL])
def test_meaningless_eval_settings_are_rejected(override, needle):
    with pytest.raises(PosxError, match=needle.replace("[", r"\[")):
        compose([override])
    compose(["eval.passkey.digits=1", "eval.passkey.variants=[prompt]"])  # prompt alone: 1 digit is fine
