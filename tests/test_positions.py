"""Positional encodings beyond RoPE: ALiBi slopes and bias, T5 buckets, sinusoidal, NoPE,
the bias masks the attention block receives, and learned absolute past its table."""

from __future__ import annotations

import math

import pytest
import torch

from posx.configure.compose import compose, config_dir
from posx.core.errors import PosxError
from posx.model.encodings import (
    BEYOND,
    ENCODINGS,
    ALiBi,
    LearnedAbsolute,
    Sinusoidal,
    T5Bias,
    alibi_slopes,
    encoding_names,
    t5_buckets,
)
from posx.model.gpt import GPT
from posx.model.positional import PositionOutOfRange, causal_toeplitz

from helpers.model import spec

# Press et al.'s slopes (arXiv 2108.12409, section 3 and its reference code get_slopes): 2^(-8h/n)
# for powers of two; for 6 and 12 heads the 4 / 8 power-of-two slopes followed by every other slope of the 8 / 16 set.
SLOPES = {
    4: [2**-2, 2**-4, 2**-6, 2**-8],
    6: [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3],
    8: [2**-h for h in range(1, 9)],
    12: [2**-h for h in range(1, 9)] + [0.707107, 0.353553, 0.176777, 0.088388],
}

# T5 causal buckets, 32 buckets, max_distance 128 (Raffel et al. 2020; transformers
# T5Attention._relative_position_bucket with bidirectional=False), worked out by hand.
T5_DISTANCES = [0, 1, 7, 15, 16, 17, 20, 24, 31, 32, 45, 64, 90, 127, 128, 1000]
T5_BUCKETS = [0, 1, 7, 15, 16, 16, 17, 19, 21, 21, 23, 26, 29, 31, 31, 31]


def tiny(pos: str, **kw) -> GPT:
    torch.manual_seed(0)
    return GPT(spec(n_layer=2, n_head=2, d_model=32, pos=pos, max_positions=64, **kw)).eval()


def test_every_encoding_has_a_yaml_and_every_yaml_an_encoding():
    """One registry (posx.model.encodings.ENCODINGS, and custom); the pos/ config group mirrors it."""
    yamls = {p.stem for p in (config_dir() / "pos").glob("*.yaml")}
    assert yamls == set(encoding_names())
    for name in ENCODINGS:  # each option selects its own encoding (the file may hold only a comment)
        assert compose([f"pos={name}"]).pos.name == name
    with pytest.raises(PosxError, match="pos=custom needs pos.impl=module:Class"):  # custom names a class
        compose(["pos=custom"])


@pytest.mark.parametrize("n_head", sorted(SLOPES))
def test_alibi_slopes_match_the_paper(n_head):
    assert alibi_slopes(n_head) == pytest.approx(SLOPES[n_head], abs=5e-7)


def test_alibi_bias_is_minus_slope_times_distance_and_future_is_masked():
    alibi = ALiBi(6)
    L = 9
    mask = alibi.attn_masks(L, 1, torch.float32, torch.device("cpu"))[0]
    assert mask.shape == (1, 6, L, L)  # shared by the batch, never (B, H, L, L)
    i = torch.arange(L).view(L, 1)
    j = torch.arange(L).view(1, L)
    for h, m in enumerate(SLOPES[6]):
        expected = torch.where(j <= i, -m * (i - j).float(), torch.tensor(float("-inf")))
        torch.testing.assert_close(mask[0, h], expected, rtol=1e-6, atol=1e-6)


def test_alibi_mask_is_built_once_per_length_and_shared_by_layers():
    alibi = ALiBi(4)
    cpu = torch.device("cpu")
    a = alibi.attn_masks(16, 3, torch.float32, cpu)
    assert a[0] is a[1] is a[2]
    assert alibi.attn_masks(16, 3, torch.float32, cpu)[0] is a[0]  # cached
    b = alibi.attn_masks(32, 3, torch.float32, cpu)[0]
    assert b.shape == (1, 4, 32, 32) and b is not a[0]
    torch.testing.assert_close(b[..., :16, :16], a[0])  # the same bias, just longer


def test_causal_toeplitz_matches_a_direct_construction():
    torch.manual_seed(0)
    by_distance = torch.randn(3, 7)
    mask = causal_toeplitz(by_distance)[0]
    for i in range(7):
        for j in range(7):
            want = by_distance[:, i - j] if j <= i else torch.full((3,), float("-inf"))
            assert torch.equal(mask[:, i, j], want)


def test_t5_bucket_table_matches_the_references():
    buckets = t5_buckets(torch.tensor(T5_DISTANCES), num_buckets=32, max_distance=128)
    assert buckets.tolist() == T5_BUCKETS


def test_t5_bias_looks_up_its_table_by_bucket_of_distance():
    t5 = T5Bias(n_head=2, n_layer=2, num_buckets=8, max_distance=20)
    torch.nn.init.normal_(t5.tables[0].weight)
    L = 30
    mask = t5.attn_masks(L, 2, torch.float32, torch.device("cpu"))
    assert mask[0] is mask[1]  # shared across layers, as in T5
    table = t5.tables[0].weight  # (buckets, H)
    for i, j in [(0, 0), (5, 1), (29, 0), (29, 28), (12, 3)]:
        bucket = int(t5_buckets(torch.tensor([i - j]), 8, 20))
        torch.testing.assert_close(mask[0][0, :, i, j], table[bucket])
    assert torch.isinf(mask[0][0, :, 3, 4]).all()


def test_t5_per_layer_tables_differ_and_learn():
    model = tiny("t5", per_layer=True).train()
    assert len(model.pos.tables) == 2
    masks = model.pos.attn_masks(10, 2, torch.float32, torch.device("cpu"))
    assert masks[0] is not masks[1] and not torch.equal(masks[0], masks[1])
    idx = torch.randint(0, 256, (2, 20))
    model(idx, idx)[1].backward()
    assert all(t.weight.grad is not None and t.weight.grad.abs().sum() > 0 for t in model.pos.tables)


@pytest.mark.parametrize("pos", ["alibi", "t5"])
def test_biased_attention_equals_explicit_softmax(pos):
    """The attention block with the shared (1, H, L, L) mask equals softmax(qk/sqrt(d) + bias)."""
    model = tiny(pos)
    if pos == "t5":
        torch.nn.init.normal_(model.pos.tables[0].weight)
    attn = model.blocks[0].attn
    torch.manual_seed(3)
    B, L, C, H = 3, 24, 32, 2
    x = torch.randn(B, L, C)
    mask = model.pos.attn_masks(L, 2, torch.float32, torch.device("cpu"))[0]
    with torch.no_grad():
        got = attn(x, model.pos, torch.arange(L), mask)
        q, k, v = attn.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, L, H, C // H).transpose(1, 2).double() for t in (q, k, v))  # (B, H, L, hd)
        bias = (
            torch.stack([model.pos.distance_bias(0, L)[:, max(i - j, 0)] for i in range(L) for j in range(L)], dim=-1)
            .view(H, L, L)
            .double()
        )
        future = torch.ones(L, L, dtype=torch.bool).triu(1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(C // H) + bias
        y = scores.masked_fill(future, float("-inf")).softmax(-1) @ v  # (B, H, L, hd)
        want = attn.proj(y.transpose(1, 2).reshape(B, L, C).float())
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_sinusoidal_is_defined_past_any_length():
    enc = Sinusoidal(32)
    assert enc.max_length() is None
    positions = torch.tensor([0, 1, 50_000, 1_000_000])
    table = enc.table(positions)
    assert torch.isfinite(table).all()
    # Vaswani et al.: PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(...)
    for row, p in enumerate(positions.tolist()):
        for i in (0, 3, 15):
            angle = p / 10000 ** (2 * i / 32)
            assert float(table[row, 2 * i]) == pytest.approx(math.sin(angle), abs=1e-6)
            assert float(table[row, 2 * i + 1]) == pytest.approx(math.cos(angle), abs=1e-6)
    model = tiny("sinusoidal")
    with torch.no_grad():
        logits, _ = model(torch.randint(0, 256, (1, 500)), offset=100_000)
    assert torch.isfinite(logits).all()


def test_nope_is_invariant_to_any_position_offset():
    idx = torch.randint(0, 256, (2, 30))
    with torch.no_grad():
        nope = tiny("nope")
        base, _ = nope(idx)
        for offset in (1, 37, 10_000):
            torch.testing.assert_close(nope(idx, offset=offset)[0], base, rtol=0, atol=0)
        rope = tiny("rope")  # the same check can fail: RoPE sees absolute positions of q and k
        assert not torch.allclose(rope(idx)[0], rope(idx, offset=37)[0])


def test_absolute_clamp_and_interpolate_past_the_table():
    enc = LearnedAbsolute(8, 4)
    x = torch.zeros(1, 20, 4)
    rows = enc.table.weight
    assert enc.max_length() == 8  # the bound GPT.forward checks before embedding
    with torch.no_grad():
        enc.set_beyond("clamp")
        assert enc.max_length() is None
        clamped = enc.embed(x, torch.arange(20))[0]
        torch.testing.assert_close(clamped[:8], rows)
        assert all(torch.equal(clamped[p], rows[7]) for p in range(8, 20))
        enc.set_beyond("interpolate")
        inter = enc.embed(x, torch.arange(20))[0]  # 0..19 mapped onto rows 0..7
        torch.testing.assert_close(inter[0], rows[0])
        torch.testing.assert_close(inter[19], rows[7])
        t = 10 * 7 / 19  # position 10 lands between rows 3 and 4
        torch.testing.assert_close(inter[10], (1 - (t - 3)) * rows[3] + (t - 3) * rows[4])
        # inside the table every mode is the plain lookup
        torch.testing.assert_close(enc.embed(x[:, :8], torch.arange(8))[0], rows)
    with pytest.raises(PosxError, match="absolute_beyond=bogus"):
        enc.set_beyond("bogus")


def test_absolute_bound_is_checked_from_python_numbers_and_embed_never_syncs():
    """The table's bound is checked from the offset and the length before the forward (also
    at an offset); embed itself is tensor operations only: it compiles as one graph with no
    break (``int(positions.max())`` would be a graph break and a device sync), in every mode."""
    model = tiny("absolute")
    rows = model.pos.max_length()
    with torch.no_grad(), pytest.raises(PositionOutOfRange, match=f"position {rows} is past the learned table"):
        model(torch.zeros(1, 10, dtype=torch.long), offset=rows - 9)
    x = torch.randn(2, rows + 5, 4)
    for mode in BEYOND[1:]:
        enc = LearnedAbsolute(rows, 4)
        enc.set_beyond(mode)
        torch._dynamo.reset()
        compiled = torch.compile(enc.embed, backend="eager", fullgraph=True)
        with torch.no_grad():
            for length in (rows // 2, rows + 5):  # inside the table and past it
                positions = torch.arange(length)
                torch.testing.assert_close(compiled(x[:, :length], positions), enc.embed(x[:, :length], positions))
