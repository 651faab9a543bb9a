"""Scoring protocols: per-position buckets, the sliding window, checked against brute force."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from posx.core.errors import PosxError
from posx.eval import scoring
from posx.model.gpt import GPT

from helpers.model import spec

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def model() -> GPT:
    torch.manual_seed(0)
    m = GPT(spec(n_layer=2, n_head=2, d_model=32, pos="rope")).eval()
    return m


@pytest.fixture(scope="module")
def tokens() -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 256, (4000,), generator=g, dtype=torch.uint8)


def _windows_reference(model, tokens, L, n_windows):
    """Each window on its own, its NLL summed by hand: (total, count)."""
    total = 0.0
    with torch.no_grad():
        for w in range(n_windows):
            x = tokens[w * L : (w + 1) * L].long()[None]
            y = tokens[w * L + 1 : (w + 1) * L + 1].long()
            total -= F.log_softmax(model(x)[0][0].double(), dim=-1)[torch.arange(L), y].sum().item()
    return total, n_windows * L


def test_nonoverlapping_matches_the_window_nll_reference(model, tokens):
    L, n = 48, 480
    scores = scoring.score(model, tokens, L, L, n, batch_tokens=100, device=CPU)
    total, count = _windows_reference(model, tokens, L, n // L)
    assert scores.tokens == count == n
    assert (scores.count == n // L).all()  # every position of every window, once
    assert scores.total == pytest.approx(total, rel=1e-5)


@pytest.fixture(scope="module")
def scores48(model, tokens) -> scoring.Scores:
    return scoring.score(model, tokens, 48, 48, 480, batch_tokens=200, device=CPU)


@pytest.mark.parametrize("width", [1, 5, 8, 48, 100])
def test_buckets_cover_every_scored_token_once_and_average_back(scores48, width):
    L, n, scores = 48, 480, scores48
    bks = scoring.buckets(scores, width)
    covered = [p for start, end, _, _ in bks for p in range(start, end)]
    assert covered == list(range(L))  # contiguous, disjoint, complete
    assert sum(c for *_, c in bks) == n
    mean_of_buckets = sum((s / c) * c for _, _, s, c in bks) / sum(c for *_, c in bks)
    assert mean_of_buckets == pytest.approx(scores.total / scores.tokens, rel=1e-9)
    assert all(end - start == width for start, end, _, _ in bks[:-1])


def brute_force_sliding(model, tokens, L, stride, n_tokens):
    """Each window run alone; every target recorded with its absolute index and context."""
    scored = {}
    start = 0
    while len(scored) < n_tokens:
        window = tokens[start : start + L + 1].long()
        logits = model(window[None, :-1])[0][0]  # (L, vocab)
        nll = F.cross_entropy(logits, window[1:], reduction="none")
        for p in range(L - stride, L):
            target = start + p + 1
            assert target not in scored, f"token {target} scored twice"
            scored[target] = (p + 1, nll[p].item(), p)  # (context, nll, window position)
        start += stride
    return scored


@pytest.mark.parametrize("L,stride", [(40, 10), (40, 40), (64, 16), (33, 7)])
def test_sliding_scores_each_token_once_with_enough_context(model, tokens, L, stride):
    n = 7 * stride * 4
    scores = scoring.score(model, tokens, L, stride, n, batch_tokens=3 * L, device=CPU)
    ref = brute_force_sliding(model, tokens, L, stride, n)
    assert sorted(ref) == list(range(L - stride + 1, L - stride + 1 + n))  # contiguous targets
    assert min(ctx for ctx, _, _ in ref.values()) >= L - stride
    assert scores.tokens == n
    assert scores.total == pytest.approx(sum(v for _, v, _ in ref.values()), rel=1e-5)
    for p in range(L):
        at_p = [v for _, v, q in ref.values() if q == p]
        assert scores.count[p] == len(at_p)
        assert scores.nll_sum[p] == pytest.approx(sum(at_p), rel=1e-5, abs=1e-9)


def test_a_sliding_token_depends_only_on_its_context(model, tokens):
    # The NLL of a scored token equals running the model on exactly its context: the window
    # from its window's start up to the token (causality, no leakage from later tokens).
    L, stride = 40, 10
    scores = scoring.score(model, tokens, L, stride, 40, batch_tokens=1000, device=CPU)
    ref = 0.0
    for k in range(4):  # windows start at 0, 10, 20, 30; targets at k*10 + 31 .. k*10 + 40
        for target in range(k * stride + L - stride + 1, k * stride + L + 1):
            ctx = tokens[k * stride : target].long()
            logit = model(ctx[None])[0][0, -1]
            ref += F.cross_entropy(logit[None], tokens[target].long()[None]).item()
    assert scores.total == pytest.approx(ref, rel=1e-5)


def test_sliding_with_stride_equal_to_length_is_nonoverlapping(model, tokens):
    L, n = 32, 320
    a = scoring.score(model, tokens, L, L, n, 256, CPU)
    b = scoring.score(model, tokens, L, scoring.stride_for("sliding", L, 32, L), n, 64, CPU)
    assert a.total == pytest.approx(b.total, rel=1e-6) and (a.count == b.count).all()


def test_stride_and_token_rules():
    assert scoring.stride_for("nonoverlapping", 7, 128, 512) == 512
    assert scoring.stride_for("sliding", None, 128, 512) == 64  # T/2
    with pytest.raises(PosxError, match="eval.stride"):
        scoring.stride_for("sliding", 300, 128, 256)
    assert scoring.tokens_for("nonoverlapping", 1000, [128, 256], [128, 256]) == 1024
    assert scoring.tokens_for("sliding", 1000, [128, 256], [64, 64]) == 1024
    assert scoring.bucket_width_for(None, 128) == 16 and scoring.bucket_width_for(5, 128) == 5


def test_chunked_nll_equals_the_nll_of_one_call():
    """token_nll upcasts a few positions at a time; each position's NLL is the unchunked one."""
    torch.manual_seed(0)
    logits = (4 * torch.randn(3, 50, 1000)).to(torch.bfloat16)
    targets = torch.randint(0, 1000, (3, 50))
    whole = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    for chunk in (1, 7, 64, 150, 10_000):
        got = scoring.token_nll(logits, targets, chunk=chunk)
        assert got.dtype == torch.float32 and got.shape == (150,)
        torch.testing.assert_close(got, whole, rtol=1e-6, atol=1e-6)
