"""FIRE, log-n and Scalable-Softmax logit scales, and hybrid NoPE layers, against their papers'
definitions; each through both attentions and both blocks where it applies."""

from __future__ import annotations

import math

import pytest
import torch

from posx.model import scaling
from posx.model.fire import FireMLP
from posx.model.gpt import GPT

from helpers.model import spec


def _model(**kw) -> GPT:
    torch.manual_seed(0)
    return GPT(spec(n_layer=4, n_head=2, d_model=32, **kw)).eval()


def _twin(a: GPT, **kw) -> GPT:
    b = _model(**kw)
    missing, unexpected = b.load_state_dict(a.state_dict(), strict=False)
    assert not unexpected and all(k.startswith("pos.") for k in missing)  # b's own encoding may add weights
    return b


IDX = torch.randint(0, 256, (2, 48), generator=torch.Generator().manual_seed(3))


# --------------------------------------------------------------------------- FIRE


def _fire(threshold: float) -> FireMLP:
    torch.manual_seed(4)
    return FireMLP(n_head=3, hidden=32, threshold=threshold)


def test_fire_below_the_threshold_depends_only_on_the_distance():
    with torch.no_grad():
        bias = _fire(threshold=512.0).causal_bias(40, torch.device("cpu"))[0]  # (H, L, L), every i < L
    for n in range(40):
        diag = torch.diagonal(bias, -n, dim1=1, dim2=2)  # (H, 40 - n): i - j = n
        torch.testing.assert_close(diag, diag[:, :1].expand_as(diag), rtol=1e-5, atol=1e-6)
    assert torch.isinf(bias.triu(1)[bias.triu(1) != 0]).all()  # -inf above the diagonal


def test_fire_past_the_threshold_interpolates():
    fire = _fire(threshold=4.0)
    with torch.no_grad():
        bias = fire.causal_bias(40, torch.device("cpu"))[0]
        x = fire.normalized(torch.arange(40.0)[:, None], torch.arange(40.0)[None, :]).tril()
    assert (x >= 0).all() and (x <= 1 + 1e-6).all()  # every visible distance maps into [0, 1]
    # the first key of any query i >= L sits at normalised distance psi(i)/psi(i) = 1: one bias
    first = bias[:, 4:, 0]
    torch.testing.assert_close(first, first[:, :1].expand_as(first), rtol=1e-5, atol=1e-5)
    # and the bias is not a function of i - j alone there
    assert not torch.allclose(bias[:, 30, 20], bias[:, 20, 10])
    psi = lambda v: math.log(0.1 * v + 1)  # noqa: E731
    assert x[30, 20].item() == pytest.approx(psi(10) / (psi(30) + 1e-6), rel=1e-5)


@pytest.mark.parametrize("block", ["gpt2", "llama"])
def test_fire_flex_score_mod_equals_the_sdpa_mask(block):
    sdpa = _model(pos="fire", block=block)
    flex = _twin(sdpa, pos="fire", block=block, attention="flex")
    with torch.no_grad():
        torch.testing.assert_close(flex(IDX)[0], sdpa(IDX)[0], rtol=1e-4, atol=1e-4)


def test_fire_learns_c_and_the_threshold():
    model = _model(pos="fire").train()
    model(IDX, IDX)[1].backward()
    fire = model.pos.fire
    assert fire.c.grad is not None and fire.up.weight.grad.abs().sum() > 0
    assert {"pos.fire.c", "pos.fire.multiplier"} <= set(model.state_dict())


# --------------------------------------------------------------------------- logit scales


@pytest.mark.parametrize("attention", ["sdpa", "flex"])
def test_logn_is_the_identity_at_and_below_T(attention):
    plain = _model(pos="alibi", attention=attention, attn_scale_length=48)
    logn = _twin(plain, pos="alibi", attention=attention, attn_scale="logn", attn_scale_length=48)
    long = torch.randint(0, 256, (2, 96))
    with torch.no_grad():
        assert torch.equal(logn(IDX)[0], plain(IDX)[0])  # L = T
        assert torch.equal(logn(IDX[:, :20])[0], plain(IDX[:, :20])[0])
        assert not torch.allclose(logn(long)[0], plain(long)[0])  # past T it scales


def test_logn_factor_is_log_base_T_of_n_past_T():
    f = scaling.logn_factor(100, 10)
    assert torch.equal(f[:10], torch.ones(10))
    torch.testing.assert_close(f[10:], torch.tensor([math.log(n, 10) for n in range(11, 101)]), rtol=1e-6, atol=0)


def test_ssmax_scales_each_row_by_s_log_n_and_learns_s():
    scale = scaling.LogitScale("ssmax", n_head=2, trained=16)
    q = torch.randn(3, 2, 20, 8)
    out = scale(q)
    torch.testing.assert_close(out[:, :, 15], q[:, :, 15])  # s = 1/ln T: unscaled at n = T
    torch.testing.assert_close(out[:, :, 4], q[:, :, 4] * math.log(5) / math.log(16))
    assert torch.equal(out[:, :, 0], torch.zeros_like(q[:, :, 0]))  # ln 1 = 0: one key, any logit
    model = _model(attn_scale="ssmax").train()
    model(IDX, IDX)[1].backward()
    assert model.blocks[0].attn.logit_scale.s.grad is not None


@pytest.mark.parametrize("kind", ["logn", "ssmax"])
@pytest.mark.parametrize("block", ["gpt2", "llama"])
def test_logit_scales_run_with_both_attentions(kind, block):
    sdpa = _model(pos="t5", block=block, attn_scale=kind, attn_scale_length=16)
    flex = _twin(sdpa, pos="t5", block=block, attn_scale=kind, attn_scale_length=16, attention="flex")
    with torch.no_grad():
        torch.testing.assert_close(flex(IDX)[0], sdpa(IDX)[0], rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- NoPE layers


def test_nope_layers_are_every_kth_counting_from_one():
    assert [i for i in range(8) if scaling.is_nope_layer(i, 4)] == [3, 7]
    assert [i for i in range(4) if scaling.is_nope_layer(i, 2)] == [1, 3]
    assert not any(scaling.is_nope_layer(i, 0) for i in range(8))


@pytest.mark.parametrize("pos", ["rope", "xpos", "alibi", "fire"])
@pytest.mark.parametrize("attention", ["sdpa", "flex"])
def test_every_layer_nope_is_nope(pos, attention):
    nope = _model(pos="nope", attention=attention)
    hybrid = _twin(nope, pos=pos, attention=attention, nope_every=1)
    with torch.no_grad():
        torch.testing.assert_close(hybrid(IDX)[0], nope(IDX)[0], rtol=0, atol=0)


def test_only_the_nope_layers_lose_their_positions():
    torch.manual_seed(0)
    model = _model(pos="rope", nope_every=2)
    assert [b.attn.positional for b in model.blocks] == [True, False, True, False]
    x = torch.randn(1, 6, 32)
    positions = torch.arange(6)
    with torch.no_grad():
        for block in model.blocks:  # only a NoPE layer ignores the positions (3x the distances)
            same = block.attn(x, model.pos, positions, None), block.attn(x, model.pos, positions * 3, None)
            assert torch.allclose(*same, atol=1e-5) != block.attn.positional
