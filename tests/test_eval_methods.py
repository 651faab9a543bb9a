"""The evaluator's per-method wiring of ``rope.frequencies``: every method reachable from the
config with its published defaults, and the method-level invariants at the evaluation level
(rope-level invariants live in test_rope.py)."""

from __future__ import annotations

import functools
import math

import pytest
import torch

from posx import rope
from posx.model.rescale import method_args, method_frequencies
from posx.schema.config import EvalConfig

D, BASE, T = 32, 10000.0, 128


def ev(**over):
    """The default evaluation settings with ``over``'s dotted keys (``yarn.beta_fast``) set."""
    cfg = EvalConfig()
    for key, value in over.items():
        *groups, name = key.split(".")
        setattr(functools.reduce(getattr, groups, cfg), name, value)
    return cfg


def freqs(method, cfg=None, scale=1.0, length=T, head_dim=D):
    return method_frequencies(
        method, cfg or ev(), head_dim=head_dim, base=BASE, train_context=T, scale=scale, length=length
    )


@pytest.mark.parametrize("method", rope.METHODS)
def test_config_defaults_are_the_published_defaults(method):
    """The parameters the default config hands each method are rope's published defaults."""
    _, params = method_args(method, ev(), 4.0, 4 * T)
    published = rope.method_params(method)
    for key, value in params.items():
        if key == "length":
            assert value == 4 * T
        else:
            assert value == published[key], key


# Resonance rounds wavelengths at every factor, by definition (tests/test_rotary_variants.py).
@pytest.mark.parametrize("method", [m for m in rope.METHODS if not m.startswith("resonance")])
def test_every_method_at_factor_one_is_none(method):
    cfg = ev(**{"abf.new_base": BASE})  # abf is a base change, not a rescale: at the old base it is none
    inv, attention = freqs(method, cfg)
    none, _ = freqs("none")
    assert torch.equal(inv, none)
    assert attention == 1.0


@pytest.mark.parametrize("length", [1, T // 2, T])
@pytest.mark.parametrize("fixed", [None, 4.0])
def test_dynamic_ntk_up_to_t_is_none_even_with_a_large_scale(length, fixed):
    cfg = ev(**{"dynamic_ntk.factor": fixed})
    inv, attention = freqs("dynamic_ntk", cfg, scale=8.0, length=length)
    assert torch.equal(inv, freqs("none")[0]) and attention == 1.0
    longer, _ = freqs("dynamic_ntk", cfg, scale=8.0, length=2 * T)
    assert not torch.equal(longer, inv)  # past T it does rescale


def test_dynamic_ntk_is_recomputed_for_each_length_not_cached():
    short_first = freqs("dynamic_ntk", scale=2.0, length=2 * T)[0]
    freqs("dynamic_ntk", scale=8.0, length=8 * T)
    assert torch.equal(freqs("dynamic_ntk", scale=2.0, length=2 * T)[0], short_first)
    # transformers' formula with s = L/T: base * (s*s - (s - 1))^(d/(d-2))
    s = 2.0
    want = rope.base_inv_freq(D, BASE * (s * s - (s - 1)) ** (D / (D - 2)))
    torch.testing.assert_close(short_first, want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("s", [2.0, 4.0, 8.0])
def test_ntk_by_parts_is_yarn_without_its_attention_factor(s):
    yarn_inv, yarn_attention = freqs("yarn", scale=s, length=int(s * T))
    parts_inv, parts_attention = freqs("ntk_by_parts", scale=s, length=int(s * T))
    assert torch.equal(parts_inv, yarn_inv)
    assert parts_attention == 1.0
    assert yarn_attention == pytest.approx(0.1 * math.log(s) + 1)


@pytest.mark.parametrize("s", [2.0, 8.0])
def test_dynamic_yarn_gets_its_scale_from_the_length(s):
    """The evaluator passes factor 1 and the length; a fixed eval.scale is ignored."""
    cfg = ev(scale=3.0)
    dyn = freqs("dynamic_yarn", cfg, scale=3.0, length=int(s * T))
    yarn = freqs("yarn", scale=s, length=int(s * T))
    assert torch.equal(dyn[0], yarn[0]) and dyn[1] == pytest.approx(yarn[1])


@pytest.mark.parametrize("s", [2.0, 8.0])
def test_llama3_keeps_short_wavelengths_and_divides_long_ones(s):
    cfg = ev(**{"llama3.low_freq_factor": 1.0, "llama3.high_freq_factor": 4.0})
    theta = freqs("none")[0]
    inv, attention = freqs("llama3", cfg, scale=s, length=int(s * T))
    wavelength = rope.wavelengths(theta.double())
    short, long = wavelength < T / 4.0, wavelength > T / 1.0
    assert short.any() and long.any()
    assert torch.equal(inv[short], theta[short])
    torch.testing.assert_close(inv[long], theta[long] / s, rtol=1e-6, atol=0)
    assert attention == 1.0
    # moving the band edges through the config changes which pairs are kept
    wider = freqs("llama3", ev(**{"llama3.high_freq_factor": 16.0}), scale=s, length=int(s * T))[0]
    assert not torch.equal(wider, inv)


def test_longrope_lists_from_the_config_are_used_by_length():
    cfg = ev(**{"longrope.short_factor": [1.0] * (D // 2), "longrope.long_factor": [4.0] * (D // 2)})
    theta = freqs("none")[0]
    assert torch.equal(freqs("longrope", cfg, scale=1.0, length=T)[0], theta)
    long_inv, attention = freqs("longrope", cfg, scale=4.0, length=4 * T)
    torch.testing.assert_close(long_inv, theta / 4.0)
    assert attention == pytest.approx(math.sqrt(1 + math.log(4.0) / math.log(T)))


def test_yarn_attention_factor_override_reaches_rope():
    assert freqs("yarn", ev(**{"yarn.attention_factor": 1.5}), scale=4.0, length=4 * T)[1] == 1.5
