"""The one statistical rule behind every verdict posx prints (the papers' claims, the retrieval
claims, ``posx compare`` over seeds): a difference of means with its 95% interval, from scipy.stats.

A comparison asks whether ``low`` is below ``high``, each a sample of one number per seed:
d = mean(low) − mean(high) by the **paired t-test** by seed (``stats.ttest_rel``) when both have
the same seeds (one seed sets weights, batches and windows, so a seed's own luck cancels), else
**Welch's t-test** (``stats.ttest_ind(equal_var=False)``); its 95% interval is the test's
``confidence_interval()``. The outcome: ``supported`` (interval below zero), ``contradicted``
(above), ``inconclusive`` (holds zero; then the |d| the two-sided test at ALPHA detects with POWER,
from the noncentral t, ``stats.nct``), ``not checked`` (an arm with fewer than two seeds).

A tolerance claim ("within 10% of b", "no worse than b": margin NO_WORSE) is a non-inferiority
test: ``high`` scaled by 1 + margin (``Sample.scaled``; "at least as high as": 1 − NO_WORSE). No
claim checked is two-sided. A study's p-values are Holm-corrected (``holm``): a call stands where
the adjusted p is below ALPHA, else inconclusive. A sample with no spread (to rounding) has a zero
standard error: its interval is the point d, called by its sign (p = 0; p = 1 for d = 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

ALPHA = 0.05  # two-sided: a 95% interval
POWER = 0.80  # the power at which an inconclusive comparison states its detectable difference
NO_WORSE = 0.05  # the margin of "no worse than" claims: within 5% of the reference
SUPPORTED, CONTRADICTED, INCONCLUSIVE, NOT_CHECKED = "supported", "contradicted", "inconclusive", "not checked"
PAIRED, WELCH = "paired t", "Welch t"
NOISE = 1e-12  # a spread below this share of the values is rounding, not spread


@dataclass(frozen=True)
class Sample:
    """One arm: a number per seed (``values[i]`` of seed ``seeds[i]``), named by ``label``."""

    label: str
    values: tuple[float, ...] = ()
    seeds: tuple[int, ...] = ()

    @property
    def mean(self) -> float:
        return float(np.mean(self.values)) if self.values else math.nan

    @property
    def std(self) -> float:
        return float(np.std(self.values, ddof=1)) if len(self.values) > 1 else math.nan

    def scaled(self, factor: float, label: str | None = None) -> Sample:
        """Every value times ``factor`` (a tolerance's bound), labelled "factor × label"."""
        return Sample(label or f"{factor:g} × {self.label}", tuple(v * factor for v in self.values), self.seeds)

    def text(self) -> str:
        if not self.values:
            return f"{self.label} not scored"
        spread = f" ± {self.std:.3f}" if len(self.values) > 1 else ""
        return f"{self.label} {self.mean:.3f}{spread} (n={len(self.values)})"


@dataclass(frozen=True)
class Test:
    """A comparison: d, its 95% interval, test, df, p, outcome, the |d| detectable at POWER (NaN if called)."""

    test: str
    diff: float
    lo: float
    hi: float
    df: float
    p: float
    outcome: str
    detectable: float

    def text(self) -> str:
        if self.outcome == NOT_CHECKED:
            return NOT_CHECKED
        said = (
            f"d = {self.diff:+.3f} [{self.lo:+.3f}, {self.hi:+.3f}], {self.test} df {self.df:.1f}, "
            f"p = {self.p:.2g}: {self.outcome}"
        )
        return said + (f" (detectable: {self.detectable:.3f})" if math.isfinite(self.detectable) else "")


def paired(low: Sample, high: Sample) -> bool:
    """Whether the two arms share their seed set (then the test pairs them by seed)."""
    return len(low.seeds) == len(set(low.seeds)) and set(low.seeds) == set(high.seeds) and len(low.seeds) > 0


def _by_seed(sample: Sample, order: list[int]) -> np.ndarray:
    where = dict(zip(sample.seeds, sample.values))
    return np.array([where[s] for s in order], dtype=float)


def _outcome(lo: float, hi: float) -> str:
    return SUPPORTED if hi < 0 else CONTRADICTED if lo > 0 else INCONCLUSIVE


def detectable(se: float, df: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest |d| a two-sided t-test (``alpha``, ``se``, ``df``) detects with ``power`` (``stats.nct``)."""
    if not (se > 0 and df > 0):
        return math.nan
    crit = stats.t.ppf(1 - alpha / 2, df)

    def short(nc: float) -> float:
        wrong_way = float(np.nan_to_num(stats.nct.cdf(-crit, df, nc)))  # NaN far out in the tail: 0
        return float(stats.nct.sf(crit, df, nc)) + wrong_way - power

    high = crit + 1.0
    while short(high) < 0:  # widen the bracket until the power passes ``power``
        high *= 2
    return float(optimize.brentq(short, 0.0, high)) * se


def compare(low: Sample, high: Sample) -> Test:
    """The test of "low < high" (module docstring)."""
    if len(low.values) < 2 or len(high.values) < 2:
        return Test("", math.nan, math.nan, math.nan, math.nan, math.nan, NOT_CHECKED, math.nan)
    if paired(low, high):
        order = sorted(low.seeds)
        a, b = _by_seed(low, order), _by_seed(high, order)
        name, spread = PAIRED, float(np.std(a - b))
    else:
        a, b = np.array(low.values, dtype=float), np.array(high.values, dtype=float)
        name, spread = WELCH, float(np.std(a) + np.std(b))
    diff = float(np.mean(a) - np.mean(b))
    if spread <= NOISE * max(np.max(np.abs(a)), np.max(np.abs(b))):  # no spread: the interval is the point d
        df = float(len(a) - 1) if name == PAIRED else float(len(a) + len(b) - 2)
        return Test(name, diff, diff, diff, df, 0.0 if diff else 1.0, _outcome(diff, diff), math.nan)
    result = stats.ttest_rel(a, b) if name == PAIRED else stats.ttest_ind(a, b, equal_var=False)
    ci = result.confidence_interval(1 - ALPHA)
    lo, hi, df = float(ci.low), float(ci.high), float(result.df)
    outcome = _outcome(lo, hi)
    se = (hi - lo) / 2 / stats.t.ppf(1 - ALPHA / 2, df)
    power_at = detectable(se, df) if outcome == INCONCLUSIVE else math.nan
    return Test(name, diff, lo, hi, df, float(result.pvalue), outcome, power_at)


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p (NaN stays NaN, not in m): p_(i) -> max_{j<=i} min(1, (m - j + 1) p_(j))."""
    known = [(p, i) for i, p in enumerate(p_values) if math.isfinite(p)]
    m = len(known)
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(sorted(known)):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def holm_call(outcome: str, p_holm: float) -> str:
    """The outcome after the correction: a call stands only where the adjusted p is below ALPHA."""
    if outcome in (SUPPORTED, CONTRADICTED) and not p_holm < ALPHA:
        return INCONCLUSIVE
    return outcome


def combine(outcomes: list[str]) -> str:
    """A claim's outcome: contradicted, else inconclusive, else not checked if any comparison is; else supported."""
    return next((o for o in (CONTRADICTED, INCONCLUSIVE, NOT_CHECKED) if o in outcomes), SUPPORTED)
