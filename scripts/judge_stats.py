"""The comparison ``scripts/judge_method.py`` calls, in one adapter: the study's statistical rule
(a difference of means with its 95% interval from scipy.stats; the paired t-test by seed when
both arms have the same seeds, Welch's t-test otherwise; supported / contradicted /
inconclusive; not checked with fewer than two seeds an arm). ``posx.report.stats`` holds the rule
for posx's own verdicts; this adapter is the one place the judge would call it instead.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

CLAIM = "yours has lower perplexity"  # what "supported" means: the interval of yours - baseline lies below 0


def compare_arms(yours: dict[int, float], baseline: dict[int, float]) -> dict:
    """{"diff", "lo", "hi", "test", "n", "call"}: mean(yours) - mean(baseline) per seed values,
    its 95% interval, the test used, the seeds, and the call of ``CLAIM``."""
    a, b = np.array(list(yours.values()), float), np.array(list(baseline.values()), float)
    diff = float(a.mean() - b.mean()) if len(a) and len(b) else math.nan
    if len(a) < 2 or len(b) < 2:
        return {
            "diff": diff,
            "lo": math.nan,
            "hi": math.nan,
            "test": "",
            "n": f"{len(a)}/{len(b)}",
            "call": "not checked",
        }
    if sorted(yours) == sorted(baseline):
        seeds = sorted(yours)
        result, test = stats.ttest_rel([yours[s] for s in seeds], [baseline[s] for s in seeds]), "paired t"
    else:
        result, test = stats.ttest_ind(a, b, equal_var=False), "Welch t"
    ci = result.confidence_interval(0.95)
    lo, hi = (diff, diff) if math.isnan(ci.low) else (float(ci.low), float(ci.high))  # no spread: the point itself
    call = "supported" if hi < 0 else "contradicted" if lo > 0 else "inconclusive"
    return {"diff": diff, "lo": lo, "hi": hi, "test": test, "n": f"{len(a)}/{len(b)}", "call": call}
