"""posx.report.stats: the one rule behind every verdict, checked against scipy.stats on hand-made
samples (paired and unpaired, unequal n and variance), its outcomes, its power and Holm's step-down."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sp

from posx.report import stats
from posx.report.stats import Sample


def sample(values, seeds=None, label="x") -> Sample:
    values = tuple(float(v) for v in values)
    return Sample(label, values, tuple(seeds if seeds is not None else range(len(values))))


def test_unpaired_arms_are_welchs_test_with_its_interval_df_and_p():
    a = sample([4.1, 4.5, 3.9, 4.8, 4.0], seeds=[0, 1, 2, 3, 4])  # unequal n and variance, other seeds
    b = sample([5.0, 5.9, 7.2], seeds=[5, 6, 7])
    got = stats.compare(a, b)
    ref = sp.ttest_ind(a.values, b.values, equal_var=False)
    ci = ref.confidence_interval(0.95)
    assert got.test == stats.WELCH
    assert (got.lo, got.hi, got.p) == pytest.approx((ci.low, ci.high, ref.pvalue), rel=1e-12)
    va, vb = np.var(a.values, ddof=1) / 5, np.var(b.values, ddof=1) / 3  # Welch–Satterthwaite, by hand
    assert got.df == pytest.approx((va + vb) ** 2 / (va**2 / 4 + vb**2 / 2), rel=1e-9)
    assert got.diff == pytest.approx(np.mean(a.values) - np.mean(b.values), rel=1e-12)
    half = sp.t.ppf(0.975, got.df) * math.sqrt(va + vb)
    assert (got.lo, got.hi) == pytest.approx((got.diff - half, got.diff + half), rel=1e-9)


def test_arms_with_the_same_seeds_are_paired_by_seed_whatever_their_order():
    a = sample([4.0, 4.4, 3.8, 4.9], seeds=[0, 1, 2, 3])
    b_values = [4.3, 4.6, 4.2, 5.1]
    b = sample(list(reversed(b_values)), seeds=[3, 2, 1, 0])  # the same seeds, listed the other way
    got = stats.compare(a, b)
    ref = sp.ttest_rel(a.values, b_values)
    ci = ref.confidence_interval(0.95)
    assert got.test == stats.PAIRED and got.df == 3
    assert (got.lo, got.hi, got.p) == pytest.approx((ci.low, ci.high, ref.pvalue), rel=1e-12)
    welch = sp.ttest_ind(a.values, b_values, equal_var=False)
    assert got.p < 0.05 < welch.pvalue  # pairing removes the seeds' shared luck: called only paired
    assert got.outcome == stats.SUPPORTED


def test_seed_sets_that_only_overlap_are_not_paired():
    got = stats.compare(sample([1.0, 2.0, 3.0], [0, 1, 2]), sample([2.0, 3.5, 4.0], [1, 2, 3]))
    assert got.test == stats.WELCH


def test_each_outcome():
    low, high = sample([1.0, 1.1, 0.9]), sample([2.0, 2.2, 1.9])
    assert stats.compare(low, high).outcome == stats.SUPPORTED
    assert stats.compare(high, low).outcome == stats.CONTRADICTED
    level = stats.compare(sample([1.0, 1.5, 0.7]), sample([1.2, 0.8, 1.3]))
    assert level.outcome == stats.INCONCLUSIVE and level.lo < 0 < level.hi
    assert level.detectable > abs(level.diff)
    assert stats.compare(sample([1.0]), high).outcome == stats.NOT_CHECKED  # one seed: no spread
    assert stats.compare(Sample("missing"), high).outcome == stats.NOT_CHECKED


def test_a_call_changes_with_the_number_of_seeds():
    """The same means and spread: inconclusive at 3 seeds a side, supported at 12 (the interval
    of a mean narrows as 1/sqrt(n); the earlier rule's threshold did not)."""
    pattern_a, pattern_b = np.array([-1.0, 0.0, 1.0]), np.array([0.0, 1.0, -1.0])
    a3, b3 = 10.0 + pattern_a, 11.0 + pattern_b
    few = stats.compare(sample(a3, range(3)), sample(b3, range(10, 13)))
    many = stats.compare(sample(np.tile(a3, 4), range(12)), sample(np.tile(b3, 4), range(10, 22)))
    assert few.diff == pytest.approx(many.diff)
    assert few.outcome == stats.INCONCLUSIVE and many.outcome == stats.SUPPORTED
    assert many.hi - many.lo < few.hi - few.lo


def test_a_tolerance_is_a_non_inferiority_test_on_the_scaled_reference():
    ref = sample([4.0, 4.1, 3.9])
    near = sample([4.2, 4.25, 4.1])  # above the reference, but well within 10% of it
    assert stats.compare(near, ref).outcome == stats.CONTRADICTED  # "lower than": no
    assert stats.compare(near, ref.scaled(1.10)).outcome == stats.SUPPORTED  # "within 10%": yes
    far = sample([4.9, 5.0, 4.8])
    assert stats.compare(far, ref.scaled(1.10)).outcome == stats.CONTRADICTED  # wholly outside
    assert ref.scaled(1.1).values == pytest.approx([4.4, 4.51, 4.29]) and ref.scaled(1.1).seeds == ref.seeds


def test_no_spread_at_all_is_called_by_the_sign_of_the_difference():
    bar = sample([0.9, 0.9, 0.9])
    perfect = sample([1.0, 1.0, 1.0])
    got = stats.compare(bar, perfect)
    assert got.outcome == stats.SUPPORTED and got.lo == got.hi == pytest.approx(-0.1) and got.p == 0.0


def test_the_detectable_difference_has_the_stated_power():
    for df, se in ((2.0, 0.3), (4.0, 1.0), (30.0, 0.05)):
        d = stats.detectable(se, df)
        crit = sp.t.ppf(0.975, df)
        power = sp.nct.sf(crit, df, d / se) + sp.nct.cdf(-crit, df, d / se)
        assert power == pytest.approx(stats.POWER, abs=1e-6)
    large = stats.detectable(1.0, 1e6)  # the normal limit: z_0.975 + z_0.80
    assert large == pytest.approx(sp.norm.ppf(0.975) + sp.norm.ppf(0.8), rel=1e-3)
    assert stats.detectable(1.0, 2.0) > stats.detectable(1.0, 8.0)  # fewer seeds: only larger differences


def test_the_detectable_difference_is_found_by_simulation_too():
    """Two arms of 5 seeds, true difference = the stated detectable one: the test calls it in about 80%."""
    n, sigma = 5, 1.0
    se = sigma * math.sqrt(2 / n)
    d = stats.detectable(se, 2 * n - 2)  # the pooled df of equal arms; Welch's is close to it
    rng = np.random.default_rng(57)
    a = rng.normal(0.0, sigma, size=(4000, n))
    b = rng.normal(d, sigma, size=(4000, n))
    called = sp.ttest_ind(a, b, axis=1).pvalue < stats.ALPHA
    assert called.mean() == pytest.approx(stats.POWER, abs=0.03)


def test_holm_steps_down_the_sorted_p_values():
    p = [0.01, 0.04, 0.03, 0.005]
    # by hand: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 -> 0.02, 0.03, 0.06, 0.04 -> running max
    assert stats.holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.5, math.nan, 0.01]) == pytest.approx([0.5, math.nan, 0.02], nan_ok=True)
    many = list(np.random.default_rng(61).uniform(0, 0.2, size=20))
    adjusted = stats.holm(many)
    assert all(q >= p and q <= 1 for p, q in zip(many, adjusted))
    order = np.argsort(many)
    assert all(np.diff(np.array(adjusted)[order]) >= 0)  # monotone in the raw p
    assert min(adjusted) == pytest.approx(min(min(many) * 20, 1.0))  # the smallest: Bonferroni


def test_the_holm_call_keeps_a_call_only_below_alpha():
    assert stats.holm_call(stats.SUPPORTED, 0.01) == stats.SUPPORTED
    assert stats.holm_call(stats.SUPPORTED, 0.2) == stats.INCONCLUSIVE
    assert stats.holm_call(stats.CONTRADICTED, 0.2) == stats.INCONCLUSIVE
    assert stats.holm_call(stats.NOT_CHECKED, math.nan) == stats.NOT_CHECKED


def test_a_claim_combines_its_comparisons():
    s, c, i, n = stats.SUPPORTED, stats.CONTRADICTED, stats.INCONCLUSIVE, stats.NOT_CHECKED
    assert stats.combine([s, s]) == s
    assert stats.combine([s, n]) == n  # a claim half scored says so
    assert stats.combine([n, i]) == i
    assert stats.combine([i, c, n]) == c
