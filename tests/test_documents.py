"""Tests for posx.eval.documents: evaluation windows that never cross a document boundary."""

import numpy as np
import pytest
import torch

from posx.core.errors import PosxError
from posx.eval import documents, scoring


def _layout(lengths, sep=1):
    """Document starts and total length for documents of ``lengths`` joined by one separator."""
    starts = np.cumsum([0] + [n + sep for n in lengths[:-1]])
    return starts, int(starts[-1] + lengths[-1])


def _inside_one_document(starts, lengths, s, L):
    """Window [s, s + L] (L + 1 tokens: inputs and targets) lies inside the document holding s."""
    i = int(np.searchsorted(starts, s, side="right")) - 1
    return i >= 0 and s + L + 1 <= starts[i] + lengths[i]


@pytest.mark.parametrize("seed", range(5))
def test_windows_never_cross_a_boundary(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 400, 60).tolist()
    starts, n = _layout(lengths)
    for L, stride in ((16, 16), (32, 32), (64, 32), (128, 128)):
        usable = sum(max(0, (d - L - 1) // stride + 1) for d in lengths if d >= L + 1)
        scored = min(usable, 20) * stride
        plan = documents.plan(starts, n, L, stride, scored)
        assert len(plan.starts) * stride == plan.tokens == scored
        assert all(_inside_one_document(starts, lengths, s, L) for s in plan.starts)
        assert plan.documents == len({int(np.searchsorted(starts, s, side="right")) for s in plan.starts})


def test_short_documents_are_skipped_and_min_document_tokens():
    starts, n = _layout([10, 100, 40, 300])
    plan = documents.plan(starts, n, 32, 32, 32 * 5)
    doc_of = [int(np.searchsorted(starts, s, side="right")) - 1 for s in plan.starts]
    assert 0 not in doc_of and plan.documents == 3  # 10 tokens: no window of 33 fits
    long_only = documents.plan(starts, n, 32, 32, 32 * 5, min_document_tokens=200)
    assert {int(np.searchsorted(starts, s, side="right")) - 1 for s in long_only.starts} == {3}


def test_too_few_documents_is_one_clear_line():
    starts, n = _layout([50, 50, 50])
    with pytest.raises(PosxError, match="3 held-out documents have at least 33 tokens and give 96 of the 320") as info:
        documents.plan(starts, n, 32, 32, 320)
    assert "\n" not in str(info.value)
    with pytest.raises(PosxError, match="0 held-out documents"):
        documents.plan(starts, n, 64, 64, 64)


class _Bigram(torch.nn.Module):
    """A fixed random bigram model: the NLL of a token depends on the one before only."""

    def __init__(self, vocab=50):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(0)))

    def forward(self, x):
        return self.table[x], None  # (B, L, vocab); no loss, as GPT.forward without targets


def test_score_with_window_starts_matches_a_hand_sum():
    model = _Bigram()
    tokens = torch.randint(0, 50, (2000,), generator=torch.Generator().manual_seed(1))
    starts, n = _layout([300, 20, 700, 500, 470])
    plan = documents.plan(starts, n, 64, 64, 64 * 12)
    got = scoring.score(model, tokens, 64, 64, plan.tokens, 256, torch.device("cpu"), plan.starts)
    logp = torch.log_softmax(model.table, -1)
    want = sum(-logp[tokens[s + i], tokens[s + i + 1]].item() for s in plan.starts for i in range(64))
    assert got.tokens == 64 * 12 and got.total == pytest.approx(want, rel=1e-5)
    default = scoring.score(model, tokens, 64, 64, 640, 256, torch.device("cpu"))
    explicit = scoring.score(model, tokens, 64, 64, 640, 256, torch.device("cpu"), list(range(0, 640, 64)))
    assert np.array_equal(default.nll_sum, explicit.nll_sum)
