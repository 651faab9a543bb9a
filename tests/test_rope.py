"""Tests for posx.rope: reference values computed from the published formulas (and matching
transformers' modeling_rope_utils), invariants, errors,
and an independent YaRN implementation written from the method's description."""

import math

import pytest
import torch

from posx.core.errors import PosxError
from posx.rope import DYNAMIC_METHODS, METHODS, base_inv_freq, frequencies, method_params, wavelengths

D, B, L = 64, 10000.0, 256  # the setting of the reference table
RTOL = 1e-6


def freqs(method, factor=1.0, d=D, original_context=L, **params):
    return frequencies(method, d, B, factor, original_context, **params)


# --------------------------------------------------------------------------- reference table


@pytest.mark.parametrize(
    "method, factor, params, total, at8, attention",
    [
        ("none", 1.0, {}, 3.9979082, 1.000000e-1, 1.0),
        ("pi", 4.0, {}, 0.9994771, 2.500000e-2, 1.0),
        ("dynamic_ntk", 4.0, {"length": 1024}, 3.2293802, None, 1.0),
        ("yarn", 2.0, {}, 3.5479591, None, 1.069315),
        ("yarn", 4.0, {}, 3.3229845, 5.384615e-2, 1.138629),
        ("yarn", 8.0, {}, 3.2104972, None, 1.207944),
        ("llama3", 4.0, {}, 3.8398706, None, 1.0),
    ],
)
def test_reference_values(method, factor, params, total, at8, attention):
    inv, att = freqs(method, factor, **params)
    assert inv.dtype == torch.float32 and inv.shape == (D // 2,)
    assert inv.double().sum().item() == pytest.approx(total, rel=RTOL)
    if at8 is not None:
        assert inv[8].item() == pytest.approx(at8, rel=RTOL)
    assert att == pytest.approx(attention, rel=RTOL)


def test_dynamic_ntk_reference_base():
    inv, _ = freqs("dynamic_ntk", 4.0, length=1024)
    b_prime = 141213.8  # b * (s*l/L - (s-1))^(d/(d-2)) = 1e4 * 13^(64/62), transformers _compute_dynamic_ntk_parameters
    assert inv[1].item() == pytest.approx(b_prime ** (-2 / D), rel=RTOL)
    torch.testing.assert_close(inv, base_inv_freq(D, b_prime), rtol=RTOL, atol=0)


# --------------------------------------------------------------------------- registry and basics


def test_method_params_defaults_and_copy():
    assert method_params("none") == {}
    assert method_params("yarn") == {"beta_fast": 32.0, "beta_slow": 1.0, "truncate": True, "attention_factor": None}
    assert method_params("ntk_by_parts") == {"beta_fast": 32.0, "beta_slow": 1.0, "truncate": True}
    assert method_params("abf") == {"new_base": 500000.0}
    assert method_params("llama3") == {"low_freq_factor": 1.0, "high_freq_factor": 4.0}
    assert set(method_params("longrope")) == {"short_factor", "long_factor", "length", "attention_factor"}
    for m in DYNAMIC_METHODS:
        assert "length" in method_params(m)
    before = method_params("yarn")
    method_params("yarn")["beta_fast"] = 0.0  # a copy: changing it changes no default
    assert method_params("yarn") == before


def test_base_inv_freq_and_wavelengths():
    theta = base_inv_freq(D, B)
    assert theta.dtype == torch.float32 and theta.shape == (D // 2,)
    expected = torch.tensor([B ** (-2 * i / D) for i in range(D // 2)], dtype=torch.float32)
    torch.testing.assert_close(theta, expected, rtol=RTOL, atol=0)
    assert theta[0].item() == 1.0
    torch.testing.assert_close(wavelengths(theta), 2 * math.pi / expected, rtol=RTOL, atol=0)


@pytest.mark.parametrize("method", METHODS)
def test_output_type(method):
    inv, att = freqs(method, 2.0 if method != "dynamic_yarn" else 1.0)
    assert inv.dtype == torch.float32 and inv.shape == (D // 2,)
    assert isinstance(att, float)


# --------------------------------------------------------------------------- invariants


# Resonance rounds wavelengths at every factor, by definition (tests/test_rotary_variants.py).
@pytest.mark.parametrize("method", [m for m in METHODS if not m.startswith("resonance")])
@pytest.mark.parametrize("d, original_context", [(32, 128), (64, 256), (128, 2048)])
def test_factor_one_is_none(method, d, original_context):
    params = {"new_base": B} if method == "abf" else {}
    inv, att = freqs(method, 1.0, d=d, original_context=original_context, **params)
    none, _ = freqs("none", d=d, original_context=original_context)
    assert torch.equal(inv, none)
    assert att == 1.0


@pytest.mark.parametrize("method", [m for m in METHODS if m != "dynamic_yarn"])
def test_one_pair_head_dim_2_is_defined_for_every_method(method):
    # d = 2: one pair, frequency base^0 = 1 for any base. NTK's exponent d / (d - 2) is infinite
    # there (it divided by zero), but the base it sets cannot move that pair: NTK is none.
    extra = {"length": 4 * L} if method in DYNAMIC_METHODS else {}
    inv, attention = frequencies(method, 2, 10000.0, 4.0, L, **extra)
    assert inv.shape == (1,) and math.isfinite(inv.item()) and inv.item() > 0 and math.isfinite(attention)
    if method in ("ntk", "dynamic_ntk"):
        assert inv.tolist() == [1.0] and attention == 1.0


@pytest.mark.parametrize("method, factor", [("dynamic_ntk", 4.0), ("dynamic_yarn", 1.0), ("longrope", 4.0)])
@pytest.mark.parametrize("length", [1, 100, L - 1, L])
def test_dynamic_methods_up_to_original_context_are_none(method, factor, length):
    params = {"length": length}
    if method == "longrope":
        params["long_factor"] = [2.0] * (D // 2)  # must not be used at length <= L
    inv, att = freqs(method, factor, **params)
    assert torch.equal(inv, base_inv_freq(D, B))
    if method != "longrope":  # longrope's attention follows factor, not length
        assert att == 1.0


@pytest.mark.parametrize("s", [2.0, 3.0, 4.0, 8.0])
def test_pi_divides_positions(s):
    inv, att = freqs("pi", s)
    positions = torch.arange(4 * L, dtype=torch.float32)
    torch.testing.assert_close(
        torch.outer(positions, inv), torch.outer(positions / s, base_inv_freq(D, B)), rtol=RTOL, atol=1e-6
    )
    assert att == 1.0


@pytest.mark.parametrize("s", [2.0, 4.0, 8.0])
def test_yarn_keeps_high_and_interpolates_low(s):
    theta = base_inv_freq(D, B)
    inv, _ = freqs("yarn", s)
    assert inv[0].item() == theta[0].item()
    assert inv[-1].item() == pytest.approx(theta[-1].item() / s, rel=RTOL)
    # every pair lies between pure interpolation and the original frequency
    assert torch.all(inv <= theta) and torch.all(inv >= theta / s * (1 - RTOL))


@pytest.mark.parametrize("truncate", [True, False])
@pytest.mark.parametrize("d, original_context", [(32, 128), (64, 256), (64, 512), (128, 2048)])
def test_yarn_bands_match_rotation_counts(truncate, d, original_context):
    # The paper's criterion: a pair that turns more than beta_fast = 32 times over the trained
    # context is kept; one that turns less than beta_slow = 1 time is pure interpolation.
    s = 4.0
    theta = base_inv_freq(d, B)
    rotations = original_context / wavelengths(theta.double())
    inv, _ = freqs("yarn", s, d=d, original_context=original_context, truncate=truncate)
    kept = rotations > 32
    interpolated = rotations < 1
    assert torch.equal(inv[kept], theta[kept])
    torch.testing.assert_close(inv[interpolated], theta[interpolated] / s, rtol=RTOL, atol=0)


def test_yarn_small_model_caveat():
    # With beta_fast = 32 the ramp starts at pair floor(d ln(L / (2 pi 32)) / (2 ln b)) = floor(3.25) = 3
    # at L=512, d=64: pairs 0..3, 4 of 32, keep theta (the ramp of the YaRN reference code).
    inv, _ = freqs("yarn", 4.0, original_context=512)
    assert int((inv == base_inv_freq(D, B)).sum()) == 4


@pytest.mark.parametrize("s", [2.0, 4.0, 8.0])
def test_yarn_attention_factor(s):
    _, att = freqs("yarn", s)
    assert att == pytest.approx(0.1 * math.log(s) + 1, rel=1e-12)
    _, att = freqs("yarn", s, attention_factor=1.5)
    assert att == 1.5


@pytest.mark.parametrize("s", [2.0, 4.0, 8.0])
def test_ntk_by_parts_is_yarn_without_attention(s):
    yarn, _ = freqs("yarn", s)
    parts, att = freqs("ntk_by_parts", s)
    assert torch.equal(parts, yarn)
    assert att == 1.0


@pytest.mark.parametrize("length, s", [(512, 2.0), (1024, 4.0), (2048, 8.0), (640, 2.5)])
def test_dynamic_yarn_is_yarn_at_length_over_l(length, s):
    dyn, att_dyn = freqs("dynamic_yarn", length=length)
    static, att_static = freqs("yarn", s)
    assert torch.equal(dyn, static)
    assert att_dyn == att_static


def test_dynamic_ntk_grows_with_length():
    sums = [freqs("dynamic_ntk", 4.0, length=n)[0].sum().item() for n in (256, 512, 1024, 4096)]
    assert sums == sorted(sums, reverse=True) and sums[0] > sums[-1]


@pytest.mark.parametrize("s", [2.0, 4.0, 8.0])
def test_llama3_bands(s):
    theta = base_inv_freq(D, B)
    inv, att = freqs("llama3", s)
    lam = wavelengths(theta.double())
    short = lam < L / 4.0  # high_freq_factor
    long = lam > L / 1.0  # low_freq_factor
    assert short.any() and long.any()
    assert torch.equal(inv[short], theta[short])
    torch.testing.assert_close(inv[long], theta[long] / s, rtol=RTOL, atol=0)
    middle = ~short & ~long
    assert torch.all(inv[middle] <= theta[middle]) and torch.all(inv[middle] >= theta[middle] / s)
    assert att == 1.0


@pytest.mark.parametrize("d", [16, 64, 128])
@pytest.mark.parametrize("s", [2.0, 4.0, 16.0])
def test_ntk_lowest_frequency_is_interpolated(d, s):
    theta = base_inv_freq(d, B)
    inv, att = freqs("ntk", s, d=d, original_context=None)
    assert inv[0].item() == 1.0
    assert inv[-1].item() == pytest.approx(theta[-1].item() / s, rel=RTOL)
    assert att == 1.0


@pytest.mark.parametrize("new_base", [500000.0, 1e6])
def test_abf_is_new_base(new_base):
    inv, att = freqs("abf", 4.0, new_base=new_base)  # factor is ignored
    assert torch.equal(inv, base_inv_freq(D, new_base))
    assert att == 1.0
    assert torch.equal(freqs("abf")[0], base_inv_freq(D, 500000.0))


def test_longrope_picks_factor_list_by_length():
    short = [1.0 + 0.01 * i for i in range(D // 2)]
    long = [1.0 + 0.5 * i for i in range(D // 2)]
    theta = base_inv_freq(D, B).double()
    for length, ext in [(L, short), (L + 1, long)]:
        inv, att = freqs("longrope", 4.0, short_factor=short, long_factor=long, length=length)
        torch.testing.assert_close(inv.double(), theta / torch.tensor(ext, dtype=torch.float64), rtol=RTOL, atol=0)
        assert att == pytest.approx(math.sqrt(1 + math.log(4.0) / math.log(L)), rel=1e-12)
    # without factor lists it is `none` in frequencies
    assert torch.equal(freqs("longrope", 4.0, length=4 * L)[0], base_inv_freq(D, B))
    assert freqs("longrope", 4.0, attention_factor=1.25)[1] == 1.25


# --------------------------------------------------------------------------- independent YaRN


def yarn_reference(d, base, original_context, s, beta_fast=32.0, beta_slow=1.0):
    """YaRN written from its description (Peng et al. 2023, arXiv 2309.00071, section 3), plain Python.

    A pair's number of rotations over the trained context is r = L / wavelength. The pair
    index at which r equals beta is found by solving L / (2*pi*base^(2i/d)) = beta for i;
    the ramp runs linearly in pair index from floor(i at beta_fast) to ceil(i at beta_slow).
    """

    def pair_where_rotations_are(beta):
        return math.log(original_context / (2 * math.pi * beta)) / math.log(base) * d / 2

    start = max(0, math.floor(pair_where_rotations_are(beta_fast)))
    stop = min(d - 1, math.ceil(pair_where_rotations_are(beta_slow)))
    if stop == start:
        stop += 0.001
    out = []
    for i in range(d // 2):
        theta = base ** (-2 * i / d)
        t = min(1.0, max(0.0, (i - start) / (stop - start)))  # 0 keep ... 1 interpolate
        out.append(theta / s * t + theta * (1 - t))
    attention = 0.1 * math.log(s) + 1 if s > 1 else 1.0
    return out, attention


@pytest.mark.parametrize("d", [32, 64, 128])
@pytest.mark.parametrize("original_context", [128, 256, 2048])
@pytest.mark.parametrize("s", [2.0, 4.0, 8.0])
def test_yarn_matches_independent_reference(d, original_context, s):
    expected, attention = yarn_reference(d, B, original_context, s)
    inv, att = freqs("yarn", s, d=d, original_context=original_context)
    torch.testing.assert_close(inv.double(), torch.tensor(expected, dtype=torch.float64), rtol=RTOL, atol=0)
    assert att == pytest.approx(attention, rel=1e-12)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "call, needle",
    [
        (lambda: frequencies("rope2", D), "'rope2'"),
        (lambda: frequencies("yarn", D, original_context=L, beta=3), "'beta'"),
        (lambda: frequencies("none", D, wobble=1), "'wobble'"),
        (lambda: frequencies("pi", D, factor=0.5), "0.5"),
        (lambda: frequencies("pi", D, factor=float("nan")), "nan"),
        (lambda: frequencies("none", 63), "63"),
        (lambda: frequencies("none", 0), "0"),
        (lambda: frequencies("none", 1), "1"),
        (lambda: base_inv_freq(7, B), "7"),
        (lambda: frequencies("none", D, base=1.0), "1.0"),
        (lambda: frequencies("none", D, base=-5.0), "-5.0"),
        (lambda: base_inv_freq(D, 0.5), "0.5"),
        (lambda: frequencies("yarn", D, factor=4.0), "'yarn'"),
        (lambda: frequencies("dynamic_ntk", D, factor=4.0, length=1024), "'dynamic_ntk'"),
        (lambda: frequencies("dynamic_yarn", D, length=1024), "'dynamic_yarn'"),
        (lambda: frequencies("ntk_by_parts", D, factor=2.0), "'ntk_by_parts'"),
        (lambda: frequencies("llama3", D, factor=4.0), "'llama3'"),
        (lambda: frequencies("longrope", D, factor=4.0), "'longrope'"),
        (lambda: frequencies("none", D, original_context=0), "0"),
        (lambda: frequencies("dynamic_ntk", D, B, 4.0, L, length=-3), "-3"),
        (lambda: frequencies("dynamic_yarn", D, B, 4.0, L, length=1024), "4.0"),
        (lambda: frequencies("longrope", D, B, 4.0, L, short_factor=[1.0] * 5), "5 entries"),
        (lambda: frequencies("longrope", D, B, 4.0, L, long_factor=[1.0] * 33, length=2 * L), "33"),
        (lambda: frequencies("longrope", D, B, 4.0, L, short_factor=[0.0] * 32), "0.0"),
        (lambda: frequencies("abf", D, new_base=1.0), "1.0"),
        (lambda: frequencies("yarn", D, B, 2.0, L, beta_fast=1.0, beta_slow=32.0), "32.0"),
        (lambda: frequencies("llama3", D, B, 2.0, L, low_freq_factor=4.0), "4.0"),
        (lambda: method_params("alibi"), "'alibi'"),
    ],
)
def test_errors_name_the_bad_value(call, needle):
    with pytest.raises(PosxError) as info:
        call()
    message = str(info.value)
    assert needle in message
    assert "\n" not in message


def test_unknown_method_lists_known_ones():
    with pytest.raises(PosxError, match="ntk_by_parts"):
        frequencies("rope2", D)


def test_unknown_parameter_lists_accepted_ones():
    with pytest.raises(PosxError, match="beta_fast.*beta_slow.*truncate"):
        frequencies("yarn", D, original_context=L, beta=3)


def test_accepts_numpy_scalars():
    import numpy as np

    inv, att = frequencies("dynamic_yarn", np.int64(D), np.float64(B), 1, np.int64(L), length=np.int64(4 * L))
    static, att_static = freqs("yarn", 4.0)
    assert torch.equal(inv, static) and att == att_static
