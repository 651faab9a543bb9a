"""Model and positional-encoding invariants: the article's exercise, causality, tables."""

from __future__ import annotations

import pytest
import torch

from posx import rope
from posx.core.errors import PosxError
from posx.model.blocks import ShortConv
from posx.model.encodings import ENCODINGS
from posx.model.gpt import GPT
from posx.model.positional import PositionOutOfRange
from posx.model.rotary import Rotary, rotate_pairs

from helpers.model import spec


# --- the background article's RoPE code, verbatim in behaviour, as a reference ---------------
def article_rope_angles(head_dim, seq_len, base=10000.0):
    freqs = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
    return torch.outer(torch.arange(seq_len).float(), freqs)


def article_apply_rope(x, angles):
    x1, x2 = x[..., ::2], x[..., 1::2]
    cos, sin = angles.cos(), angles.sin()
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


def test_rotation_matches_the_article_implementation():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 50, 16, dtype=torch.float64)
    rotary = Rotary(head_dim=16, base=10000.0)
    cos, sin = rotary.cos_sin(torch.arange(50))
    ours = rotate_pairs(x, cos.double(), sin.double())
    ref = article_apply_rope(x, article_rope_angles(16, 50).double())
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-6)


def _score(rotary: Rotary, q: torch.Tensor, k: torch.Tensor, i: int, j: int) -> float:
    positions = torch.arange(max(i, j) + 1)
    cos, sin = rotary.cos_sin(positions)
    q_rot = rotate_pairs(q.double(), cos[i].double(), sin[i].double())
    k_rot = rotate_pairs(k.double(), cos[j].double(), sin[j].double())
    return float(q_rot @ k_rot)


@pytest.mark.parametrize("same_vector", [True, False])
def test_article_exercise_rope_scores_depend_only_on_offset(same_vector):
    """(3,3) == (13,13) and (3,103) == (13,113): only i - j matters."""
    torch.manual_seed(1)
    rotary = Rotary(head_dim=8, base=10000.0)
    q = torch.randn(8)
    k = q.clone() if same_vector else torch.randn(8)
    assert _score(rotary, q, k, 3, 3) == pytest.approx(
        _score(rotary, q, k, 13, 13), rel=1e-5, abs=1e-6
    )  # float32 angles
    assert _score(rotary, q, k, 3, 103) == pytest.approx(
        _score(rotary, q, k, 13, 113), rel=1e-5, abs=1e-6
    )  # float32 angles
    # and the two distances really give different scores, so the check can fail
    assert _score(rotary, q, k, 3, 3) != pytest.approx(_score(rotary, q, k, 3, 103), rel=1e-3)


def test_attention_factor_scales_logits_by_its_square():
    rotary = Rotary(head_dim=16, base=10000.0)
    q, k = torch.randn(1, 1, 5, 16), torch.randn(1, 1, 5, 16)
    q0, k0 = rotary.rotate(q, k, torch.arange(5))
    inv_freq, _ = rope.frequencies("none", 16)
    rotary.set_frequencies(inv_freq, 1.5)
    q1, k1 = rotary.rotate(q, k, torch.arange(5))
    torch.testing.assert_close(q1 @ k1.transpose(-1, -2), 2.25 * (q0 @ k0.transpose(-1, -2)))
    rotary.reset()
    assert rotary.attention_factor == 1.0


def tiny(pos: str, **kw) -> GPT:
    torch.manual_seed(0)
    return GPT(spec(n_layer=2, n_head=2, d_model=32, pos=pos, max_positions=64, **kw)).eval()


@pytest.mark.parametrize(
    "pos,kw",
    [(p, {}) for p in sorted(ENCODINGS)] + [("t5", {"per_layer": True}), ("rope", {"short_conv": 3})],
)
def test_causality_changing_a_later_token_leaves_earlier_logits(pos, kw):
    model = tiny(pos, **kw)
    idx = torch.randint(0, 256, (2, 40))
    changed = idx.clone()
    changed[:, 25] = (changed[:, 25] + 1) % 256
    with torch.no_grad():
        a, b = model(idx)[0], model(changed)[0]
    torch.testing.assert_close(a[:, :25], b[:, :25])
    assert not torch.allclose(a[:, 25:], b[:, 25:])


def test_short_conv_adds_the_weighted_sum_of_the_last_k_positions_per_channel():
    torch.manual_seed(0)
    conv = ShortConv(6, 3)
    x = torch.randn(2, 9, 6)
    w = conv.conv.weight[:, 0, :]  # (C, k): tap j multiplies position t - (k - 1 - j)
    expected = x.clone()
    for t in range(9):
        for j in range(3):
            s = t - (2 - j)
            if s >= 0:
                expected[:, t] += w[:, j] * x[:, s]
    with torch.no_grad():
        torch.testing.assert_close(conv(x), expected)


def test_short_conv_is_off_by_default_and_adds_one_kernel_per_block():
    plain, conv = tiny("rope"), tiny("rope", short_conv=4)
    assert not any("conv" in name for name, _ in plain.named_parameters())
    assert conv.num_params() - plain.num_params() == 2 * 32 * 4  # n_layer x d_model x kernel


def test_learned_absolute_has_no_row_past_its_table():
    model = tiny("absolute")
    with torch.no_grad():
        model(torch.zeros(1, 64, dtype=torch.long))  # exactly the table: fine
        with pytest.raises(PositionOutOfRange, match="past the learned table of 64 rows"):
            model(torch.zeros(1, 65, dtype=torch.long))


def test_rope_model_runs_past_training_length_and_angles_stay_float32_under_autocast():
    model = tiny("rope")
    idx = torch.randint(0, 256, (1, 300))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits, _ = model(idx)
        cos, _ = model.pos.cos_sin(torch.arange(300))
    assert cos.dtype == torch.float32
    assert torch.isfinite(logits.float()).all()


def test_unknown_encoding_is_a_clear_error():
    with pytest.raises(PosxError, match="unknown positional encoding 'bogus'"):
        GPT(spec(pos="bogus"))


def test_frequencies_are_not_saved_in_the_state_dict():
    model = tiny("rope")
    assert not any("inv_freq" in key for key in model.state_dict())
    assert model.lm_head.weight is model.tok_emb.weight


def test_forward_returns_the_float32_cross_entropy_of_its_logits_and_no_loss_without_targets():
    model = tiny("rope")
    idx = torch.randint(0, 256, (2, 20), generator=torch.Generator().manual_seed(0))
    targets = torch.randint(0, 256, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, loss = model(idx, targets)
        alone, none = model(idx)
    assert none is None and torch.equal(logits, alone)
    log_p = torch.log_softmax(logits.double(), -1)  # the reference: mean NLL of each target, by hand
    want = -log_p.gather(-1, targets[..., None]).mean()
    assert loss.dtype == torch.float32 and loss.item() == pytest.approx(want.item(), rel=1e-6)
