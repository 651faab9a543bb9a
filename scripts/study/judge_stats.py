"""The comparisons ``scripts/study/judge.py`` calls, through the one rule of posx's verdicts
(``posx.report.stats``): a difference of means with its 95% interval from scipy.stats, the
paired t-test by seed when both arms have the same seeds, Welch's t-test otherwise; supported /
contradicted / inconclusive (with the smallest difference detectable at 80% power), not checked
with fewer than two seeds an arm; Holm's correction across the page's comparisons.
"""

from __future__ import annotations

import pandas as pd

from posx.report.stats import Sample, compare, holm, holm_call

CLAIM = "yours has lower perplexity"  # what "supported" means: the interval of yours - baseline lies below 0


def compare_arms(yours: dict[int, float], baseline: dict[int, float]) -> dict:
    """{"diff", "lo", "hi", "test", "df", "p", "n", "call", "detectable"} of "yours < baseline":
    mean(yours) - mean(baseline) over their seeds' values, by ``posx.report.stats.compare``."""
    mine = Sample("yours", tuple(yours.values()), tuple(yours))
    base = Sample("baseline", tuple(baseline.values()), tuple(baseline))
    test = compare(mine, base)
    return {
        "diff": mine.mean - base.mean if mine.values and base.values else float("nan"),
        "lo": test.lo, "hi": test.hi, "test": test.test or "—", "df": test.df, "p": test.p,
        "n": f"{len(mine.values)}/{len(base.values)}", "call": test.outcome, "detectable": test.detectable,
    }  # fmt: skip


def with_holm(calls: pd.DataFrame) -> pd.DataFrame:
    """The page's comparisons with Holm's adjusted p and the call it leaves (``holm_call``)."""
    if calls.empty:
        return calls.assign(p_holm=[], holm=[])
    adjusted = holm(list(calls["p"].astype(float)))
    return calls.assign(p_holm=adjusted, holm=[holm_call(c, p) for c, p in zip(calls["call"], adjusted)])
