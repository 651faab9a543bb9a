"""Dual Chunk Attention (posx.model.windowed.DualChunk) against a float64 transcription of the
authors' prompt path (HKUNLP/ChunkLlama, chunkllama_attn_replace.py): the first chunk attends
causally to itself; every later chunk makes up to three flash-attention calls (itself causally
with the query at i mod c, the chunk before with the query at min(i mod c + c, s), all earlier
chunks with the query at the successive position of index c - 1), and the calls are merged by
their log-sum-exps. posx builds one softmax over chosen logits instead, so agreement checks
the position maps and the merge at once. Then its invariants: a sequence within one chunk is
plain attention, a shift by whole chunks changes nothing, no distance passes s."""

from __future__ import annotations

import math

import pytest
import torch

from posx import rope
from posx.core.errors import PosxError
from posx.model.rescale import method_window
from posx.model.rotary import Rotary, XPos
from posx.model.windowed import DualChunk
from posx.schema.config import EvalConfig

from helpers.attention import BASE, HD, plain_attention, qkv, rotate_complex, windowed_attend


def _flash(q, k, v, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """flash_attn_func(..., return_attn_probs=True) in float64: the output and each row's log-sum-exp."""
    logits = q @ k.transpose(-1, -2) / math.sqrt(HD)
    if causal:  # q and k of equal length here, as in every causal call of the authors' loop
        logits = logits + torch.full(logits.shape[-2:], float("-inf"), dtype=torch.float64).triu(1)
    return torch.softmax(logits, dim=-1) @ v, torch.logsumexp(logits, dim=-1)


def _merge(parts) -> torch.Tensor:
    """merge_attn_outputs for one chunk: outputs weighted by exp(lse) / sum of exp(lse)."""
    weights = torch.softmax(torch.stack([lse for _, lse in parts]), dim=0)
    return (torch.stack([out for out, _ in parts]) * weights[..., None]).sum(dim=0)


def authors_dca(q, k, v, chunk_size: int, local_window: int) -> torch.Tensor:
    """The authors' prompt path (no KV cache, scaling factor 1), chunk by chunk."""
    L, c = q.shape[-2], chunk_size - local_window
    q_t = torch.arange(c, dtype=torch.float64)  # intra positions, indexed by i mod c
    qc_t = (q_t + c).clamp(max=chunk_size)  # successive positions, indexed alike
    mod = torch.arange(L) % c
    keys, v = rotate_complex(k, mod), v.double()  # every key at j mod c

    def query(begin: int, end: int, table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return rotate_complex(q[:, :, begin:end], table[index])

    outputs = [_flash(query(0, min(c, L), q_t, mod[:c]), keys[:, :, :c], v[:, :, :c], True)[0]]
    for begin in range(c, L, c):
        end = min(begin + c, L)
        parts = [
            _flash(query(begin, end, q_t, mod[begin:end]), keys[:, :, begin:end], v[:, :, begin:end], True),
            _flash(
                query(begin, end, qc_t, mod[begin:end]),
                keys[:, :, begin - c : begin],
                v[:, :, begin - c : begin],
                False,
            ),
        ]
        if begin - c > 0:
            last = torch.full((end - begin,), c - 1)
            parts.append(_flash(query(begin, end, qc_t, last), keys[:, :, : begin - c], v[:, :, : begin - c], False))
        outputs.append(_merge(parts))
    return torch.cat(outputs, dim=2)


# (s, w): c = 10 with a short last chunk; inter at s; w = 0; inter at 2c - 1 < s; one chunk only
@pytest.mark.parametrize("chunk_size, local_window", [(12, 2), (9, 3), (5, 0), (7, 4), (50, 5)])
def test_matches_the_authors_attention(chunk_size, local_window):
    q, k, v = qkv(40, seed=6)
    ours = windowed_attend(q, k, v, DualChunk(chunk_size, local_window))
    torch.testing.assert_close(ours.double(), authors_dca(q, k, v, chunk_size, local_window), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("encoding", [Rotary(HD, BASE), XPos(HD, BASE)], ids=["rope", "xpos"])
def test_one_chunk_is_plain_attention_and_whole_chunks_shift_freely(encoding):
    q, k, v = qkv(24, seed=7)
    plain = plain_attention(q, k, v, encoding)
    torch.testing.assert_close(windowed_attend(q, k, v, DualChunk(30, 6), encoding), plain, atol=1e-5, rtol=1e-5)
    method = DualChunk(9, 2)  # c = 7
    torch.testing.assert_close(
        windowed_attend(q, k, v, method, encoding, offset=21),
        windowed_attend(q, k, v, method, encoding),
        atol=1e-5,
        rtol=1e-4,
    )


@pytest.mark.parametrize("chunk_size, local_window", [(96, 8), (7, 4), (5, 0)])
def test_every_distance_stays_at_or_below_the_chunk_size(chunk_size, local_window):
    """At 8x a trained context of 128: each causal pair's distance is in [0, s], exact within a chunk."""
    method, positions = DualChunk(chunk_size, local_window), torch.arange(1024)
    choice = method.select(positions, positions)
    distance = torch.zeros(1024, 1024)
    for b, (q_pos, k_pos) in enumerate(method.branches(positions)):
        distance = torch.where(choice == b, q_pos[:, None] - k_pos[None, :], distance)
    causal = positions[:, None] >= positions[None, :]
    assert distance[causal].min() >= 0 and distance[causal].max() <= chunk_size
    same = (choice == 0) & causal
    assert torch.equal(distance[same], (positions[:, None] - positions[None, :]).float()[same])
    assert method.reach(128) is None


def test_defaults_follow_the_authors():
    """replace_with_chunkllama(pretraining_length): s = 3T/4, w = T/16."""
    ev = EvalConfig()
    assert method_window("dca", ev, 128) == DualChunk(96, 8) and DualChunk(96, 8).chunk == 88
    assert method_window("dca", ev, 4096) == DualChunk(3072, 256)
    ev.dca.chunk_size, ev.dca.local_window = 64, 0
    assert method_window("dca", ev, 128) == DualChunk(64, 0)
    inv, att = rope.frequencies("dca", HD, base=BASE, chunk_size=64, local_window=0)
    assert torch.equal(inv, rope.base_inv_freq(HD, BASE)) and att == 1.0


@pytest.mark.parametrize(
    "params",
    [{"chunk_size": 0}, {"chunk_size": 2.5}, {"local_window": -1}, {"chunk_size": 8, "local_window": 8}],
)
def test_bad_parameters_are_refused(params):
    with pytest.raises(PosxError, match="dca"):
        rope.check_params("dca", **params)


@pytest.mark.parametrize(
    "chunk_size, local_window, message",
    [(200, None, "chunk_size 200 is past the trained context T=128"), (4, None, "local_window 8 must be below")],
)
def test_parameters_that_do_not_fit_the_trained_context_are_refused(chunk_size, local_window, message):
    with pytest.raises(PosxError, match=message):
        DualChunk.resolve(chunk_size, local_window, 128)
