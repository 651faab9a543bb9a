"""xPos, partial rotation (p-RoPE) and Resonance RoPE against their papers' definitions."""

from __future__ import annotations

import math

import pytest
import torch

from posx import rope
from posx.model import xpos
from posx.model.gpt import GPT
from posx.model.randomized import pose_positions, random_positions
from posx.model.rotary import Rotary, XPos

from helpers.model import spec

HD, BASE = 16, 10000.0


def _model(**kw) -> GPT:
    torch.manual_seed(0)
    return GPT(spec(n_layer=2, n_head=2, d_model=2 * HD, **kw)).eval()


def _same_weights(a: GPT, b: GPT) -> None:
    b.load_state_dict(a.state_dict())


# --------------------------------------------------------------------------- xPos


def test_xpos_zeta_is_torchscales_formula():
    d = 64
    expected = (torch.arange(0, d, 2, dtype=torch.float64) + 0.4 * d) / (1.4 * d)
    assert torch.equal(xpos.xpos_zeta(d), expected)
    assert (xpos.xpos_zeta(d) > 0).all() and (xpos.xpos_zeta(d) < 1).all()


def _logits(enc, q, k, positions) -> torch.Tensor:
    """q, k: (hd,) the same vector at every position -> (T, T) logits q_n . k_m."""
    T = len(positions)
    qr, kr = enc.rotate(q.expand(1, 1, T, HD), k.expand(1, 1, T, HD), positions)
    return (qr[0, 0] @ kr[0, 0].T).double()


def test_xpos_logits_depend_only_on_the_distance_and_decay_by_zeta():
    torch.manual_seed(1)
    enc = XPos(HD, BASE, scale_base=8.0)  # a small B makes the decay visible within 24 positions
    q, k = torch.randn(HD), torch.randn(HD)
    a = _logits(enc, q, k, torch.arange(24))
    b = _logits(enc, q, k, torch.arange(100, 124))  # shifted window: the same logits
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    for n in (3, 10, 23):  # every entry at distance n - m is one function of n - m
        torch.testing.assert_close(torch.diagonal(a, -n), a[n, 0].expand(24 - n), rtol=1e-4, atol=1e-5)
    # against the formula: pair i rotated by (n - m) theta_i and scaled by zeta_i^((n - m)/B)
    zeta, theta = xpos.xpos_zeta(HD), rope.base_inv_freq(HD, BASE).double()
    n, m = 17, 4
    qd, kd = q.double().view(-1, 2), k.double().view(-1, 2)
    ang = (n - m) * theta
    # q^T R(-(n - m) theta) k for each pair
    dot = (qd * kd).sum(-1) * ang.cos() + (qd[:, 0] * kd[:, 1] - qd[:, 1] * kd[:, 0]) * ang.sin()
    expected = (dot * zeta ** ((n - m) / 8.0)).sum()
    torch.testing.assert_close(a[n, m], expected, rtol=1e-4, atol=1e-5)


def test_xpos_takes_rope_rescaling():
    enc = XPos(HD, BASE)
    assert enc.uses_rope and enc.kind == "xpos"
    inv, att = rope.frequencies("pi", HD, base=BASE, factor=4.0)
    enc.set_frequencies(inv, att)
    assert torch.equal(enc.inv_freq, inv)
    enc.reset()
    assert torch.equal(enc.inv_freq, rope.base_inv_freq(HD, BASE))


# --------------------------------------------------------------------------- partial rotation


@pytest.mark.parametrize("fraction, rotating", [(0.0, 0), (0.25, 2), (0.5, 4), (1.0, 8)])
def test_rotating_pairs_are_the_highest_frequencies(fraction, rotating):
    mask = xpos.rotation_mask(HD, fraction)
    assert xpos.rotating_pairs(HD, fraction) == rotating
    assert mask.tolist() == [1.0] * rotating + [0.0] * (HD // 2 - rotating)


def test_partial_rotation_leaves_the_low_frequency_pairs_as_they_are():
    torch.manual_seed(2)
    enc = Rotary(HD, BASE, rotary_fraction=0.5)
    q, k = torch.randn(1, 1, 10, HD), torch.randn(1, 1, 10, HD)
    qr, kr = enc.rotate(q, k, torch.arange(10))
    assert torch.equal(qr[..., HD // 2 :], q[..., HD // 2 :]) and torch.equal(kr[..., HD // 2 :], k[..., HD // 2 :])
    full_q, _ = Rotary(HD, BASE).rotate(q, k, torch.arange(10))
    assert torch.equal(qr[..., : HD // 2], full_q[..., : HD // 2])


@pytest.mark.parametrize("pos", ["rope", "xpos"])
def test_fraction_one_is_the_encoding_and_zero_is_nope_exactly(pos):
    idx = torch.randint(0, 256, (2, 40))
    full, one = _model(pos=pos), _model(pos=pos, rotary_fraction=1.0)
    _same_weights(full, one)
    none, zero = _model(pos="nope"), _model(pos=pos, rotary_fraction=0.0)
    _same_weights(none, zero)
    with torch.no_grad():
        assert torch.equal(full(idx)[0], one(idx)[0])
        assert torch.equal(none(idx)[0], zero(idx)[0])
        assert not torch.equal(full(idx)[0], zero(idx)[0])


def test_partial_rotation_applies_after_rescaling():
    enc = Rotary(HD, BASE, rotary_fraction=0.5)
    inv, _ = rope.frequencies("pi", HD, base=BASE, factor=2.0)
    enc.set_frequencies(inv)
    cos, sin = enc.cos_sin(torch.arange(5))
    still = slice(HD // 4, None)  # pairs 4..7 do not rotate
    assert torch.equal(sin[:, still], torch.zeros(5, HD // 4)) and torch.equal(cos[:, still], torch.ones(5, HD // 4))
    torch.testing.assert_close(sin[:, 0], (torch.arange(5) * inv[0]).sin())


# --------------------------------------------------------------------------- Resonance RoPE


@pytest.mark.parametrize("d, T", [(16, 64), (32, 128), (64, 2048)])
def test_resonance_rounds_short_wavelengths_and_keeps_the_rest(d, T):
    theta = rope._theta(d, BASE)
    out = rope.resonance_round(theta, T)
    wl = 2 * math.pi / theta
    short = wl < T
    assert short.any() and (~short).any()
    assert torch.equal(out[~short], theta[~short])  # wavelength >= T: untouched
    new_wl = 2 * math.pi / out[short]
    torch.testing.assert_close(new_wl, new_wl.round(), rtol=0, atol=1e-9)  # integer wavelengths
    assert ((new_wl - wl[short]).abs() <= 0.5 + 1e-9).all()  # the nearest integer
    # the phase repeats exactly after one wavelength: positions p and p + lambda rotate alike
    p = torch.arange(50, dtype=torch.float64)
    lam = new_wl.round()[:, None]
    torch.testing.assert_close(torch.cos(p * out[short][:, None]), torch.cos((p + lam) * out[short][:, None]))


def test_resonance_methods_through_the_registry():
    T = 128
    inv, att = rope.frequencies("resonance", 32, base=BASE, factor=4.0, original_context=T)
    assert att == 1.0 and torch.equal(inv, rope.resonance_round(rope._theta(32, BASE), T).float())
    yarn, yarn_att = rope.frequencies("yarn", 32, base=BASE, factor=4.0, original_context=T)
    res, res_att = rope.frequencies("resonance_yarn", 32, base=BASE, factor=4.0, original_context=T)
    assert res_att == yarn_att == pytest.approx(0.1 * math.log(4) + 1)
    torch.testing.assert_close(res, rope.resonance_round(yarn.double(), T).float(), rtol=1e-6, atol=0)
    keep = 2 * math.pi / yarn.double() >= T
    assert torch.equal(res[keep], yarn[keep])
    with pytest.raises(Exception, match="original_context"):
        rope.frequencies("resonance", 32)


# --------------------------------------------------------------------------- randomized positions


def test_randomized_positions_are_a_sorted_subset_drawn_from_the_seed():
    torch.manual_seed(5)
    a = random_positions(32, 256, torch.device("cpu"))
    torch.manual_seed(5)
    b = random_positions(32, 256, torch.device("cpu"))
    assert torch.equal(a, b) and len(set(a.tolist())) == 32
    assert (a[1:] > a[:-1]).all() and a.min() >= 0 and a.max() < 256


@pytest.mark.parametrize("pos", ["rope", "xpos", "sinusoidal", "absolute"])
def test_randomized_training_draws_positions_and_evaluation_uses_plain_ones(pos):
    idx = torch.randint(0, 256, (2, 24))
    plain = _model(pos=pos, max_positions=256)
    rand = _model(pos=pos, max_positions=256, randomized=True, randomized_max=256)
    _same_weights(plain, rand)
    with torch.no_grad():
        assert torch.equal(rand(idx)[0], plain(idx)[0])  # eval: positions 0 .. n-1
        rand.train(), plain.train()
        assert not torch.equal(rand(idx)[0], plain(idx)[0])  # training: a random subset


# --------------------------------------------------------------------------- PoSE


@pytest.mark.parametrize("length, target", [(32, 128), (33, 64), (2, 9), (16, 16)])
def test_pose_ids_are_two_contiguous_chunks_with_a_skip_inside_the_target(length, target):
    torch.manual_seed(6)
    firsts, skips, largest = set(), set(), 0
    for _ in range(2000):  # each end of the skip range has probability 1/97 per draw at most
        ids = pose_positions(length, target, torch.device("cpu"))
        steps = ids[1:] - ids[:-1]
        jumps = (steps != 1).nonzero().flatten()
        assert len(ids) == length and ids[0] == 0 and (steps >= 1).all() and ids[-1] < target
        assert len(jumps) <= 1  # two chunks, each contiguous
        first = int(jumps[0]) + 1 if len(jumps) else None
        skip = int(steps[jumps[0]]) - 1 if len(jumps) else 0
        assert first is None or 1 <= first <= (length + 1) // 2  # l_0 ~ U{1 .. ceil(T/2)}
        assert 0 <= skip <= target - length  # u ~ U{0 .. L_t - T}
        firsts.add(first), skips.add(skip)
        largest = max(largest, int(ids[-1]))
    assert largest == target - 1  # the ids reach the end of [0, L_t)
    if target > length:
        assert 0 in skips and target - length in skips  # both ends of the skip's range occur


def test_pose_changes_training_only():
    idx = torch.randint(0, 256, (2, 24))
    plain = _model(pos="rope")
    pose = _model(pos="rope", pose_length=96)
    _same_weights(plain, pose)
    with torch.no_grad():
        assert torch.equal(pose(idx)[0], plain(idx)[0])
