"""StreamingLLM (posx.model.windowed.Sinks) against a float64 transcription of how the authors
score a text (mit-han-lab/streaming-llm: examples/eval_long_ppl.py feeds one token at a time;
kv_cache.StartRecentKVCache trims the cache to the first S and the last R entries once it
holds more than S + R; pos_shift/modify_llama.py keeps keys unrotated in the cache, rotates
them at their places 0 .. n - 1 on every step and the query at n - 1). posx scores the whole
window at once with a mask, so agreement checks the eviction and the positions together."""

from __future__ import annotations

import math

import pytest
import torch

from posx import rope
from posx.core.errors import PosxError
from posx.model.rescale import method_window
from posx.model.rotary import Rotary, XPos
from posx.model.windowed import Sinks
from posx.schema.config import EvalConfig

from helpers.attention import BASE, HD, plain_attention, qkv, rotate_complex, windowed_attend


def authors_streaming(q, k, v, sinks: int, recent: int) -> torch.Tensor:
    """One token at a time through a start-and-recent cache of unrotated keys and values."""
    q, k, v = q.double(), k.double(), v.double()
    cache: list[int] = []  # the tokens whose keys and values the cache holds, in order
    rows = []
    for t in range(q.shape[-2]):
        held = [*cache, t]  # the past and the current token's own key
        places = torch.arange(len(held), dtype=torch.float64)
        keys = rotate_complex(k[:, :, held], places)
        query = rotate_complex(q[:, :, t : t + 1], places[-1:])
        weights = torch.softmax(query @ keys.transpose(-1, -2) / math.sqrt(HD), dim=-1)
        rows.append(weights @ v[:, :, held])
        cache = held if len(held) <= sinks + recent else held[:sinks] + held[len(held) - recent :]
    return torch.cat(rows, dim=2)


# (S, R): the authors' 4 sinks; no sinks (a sliding window); more sinks than recent; a cache
# as long as the sequence (nothing evicted)
@pytest.mark.parametrize("sinks, recent", [(4, 11), (0, 7), (6, 3), (1, 1), (4, 40)])
def test_matches_the_authors_token_by_token_scoring(sinks, recent):
    q, k, v = qkv(40, seed=9)
    ours = windowed_attend(q, k, v, Sinks(sinks, recent))
    torch.testing.assert_close(ours.double(), authors_streaming(q, k, v, sinks, recent), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("encoding", [Rotary(HD, BASE), XPos(HD, BASE)], ids=["rope", "xpos"])
def test_a_cache_that_never_evicts_is_plain_attention(encoding):
    q, k, v = qkv(24, seed=10)
    plain = plain_attention(q, k, v, encoding)
    torch.testing.assert_close(windowed_attend(q, k, v, Sinks(4, 19), encoding), plain, atol=1e-5, rtol=1e-5)


def test_positions_that_do_not_start_at_zero_count_from_the_first_token():
    """Shifted positions give the same output: the exact branch depends on differences, the sinks on token indices."""
    q, k, v = qkv(30, seed=11)
    method = Sinks(3, 8)
    torch.testing.assert_close(
        windowed_attend(q, k, v, method, offset=17), windowed_attend(q, k, v, method), atol=1e-5, rtol=1e-4
    )


def test_defaults_fill_the_trained_context():
    ev = EvalConfig()
    assert method_window("streaming_llm", ev, 128) == Sinks(4, 123)
    ev.streaming_llm.sinks, ev.streaming_llm.recent = 0, 64
    assert method_window("streaming_llm", ev, 128) == Sinks(0, 64) and Sinks(0, 64).reach(128) is None
    inv, att = rope.frequencies("streaming_llm", HD, base=BASE, sinks=4, recent=None)
    assert torch.equal(inv, rope.base_inv_freq(HD, BASE)) and att == 1.0


@pytest.mark.parametrize("params", [{"sinks": -1}, {"sinks": 1.5}, {"recent": 0}, {"recent": True}])
def test_bad_parameters_are_refused(params):
    with pytest.raises(PosxError, match="streaming_llm"):
        rope.check_params("streaming_llm", **params)


@pytest.mark.parametrize("sinks, recent", [(4, 124), (130, None), (10, 200)])
def test_a_cache_past_the_trained_context_is_refused(sinks, recent):
    with pytest.raises(PosxError, match="does not fit the trained context T=128"):
        Sinks.resolve(sinks, recent, 128)
