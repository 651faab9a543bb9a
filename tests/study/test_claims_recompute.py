"""Every call in the committed claims.csv files, recomputed outside posx: each arm's per-seed values
traced back to the committed per-seed tables (sweep.csv; the retrieval comparison's exact.csv),
each test redone with scipy.stats directly (paired t where the arms' seed sets coincide, Welch's t
otherwise), Holm's correction redone here, and each claim's verdict combined again."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

REFERENCE = Path(__file__).resolve().parents[2] / "results" / "reference"
STUDIES = {"cpu-tiny": ["paper", "claim", "block", "protocol"], "cpu-methods": ["paper", "claim", "block", "protocol"]}
RETRIEVAL = ("cpu-retrieval", ["paper", "claim", "task"])


def numbers(text) -> list[float]:
    return [float(v) for v in str(text).split()] if isinstance(text, str) and text.strip() else []


def scale_of(label: str) -> tuple[float, str]:
    """A tolerance's bound is labelled "k × arm": (k, arm); (1, label) otherwise."""
    found = re.match(r"^([\d.]+) × (.+)$", label)
    return (float(found.group(1)), found.group(2)) if found else (1.0, label)


def call(low: list[float], low_seeds: list[float], high: list[float], high_seeds: list[float]) -> tuple:
    """(outcome, p) of "low < high" with scipy.stats: paired by seed where the seed sets coincide."""
    if sorted(low_seeds) == sorted(high_seeds):
        a = np.array(low)[np.argsort(low_seeds)]
        b = np.array(high)[np.argsort(high_seeds)]
        if np.ptp(a - b) <= 1e-12 * np.max(np.abs(np.r_[a, b])):  # no spread: the point difference
            d = float(np.mean(a - b))
            return ("supported" if d < 0 else "contradicted" if d > 0 else "inconclusive"), float(d == 0)
        result = stats.ttest_rel(a, b)
    else:
        result = stats.ttest_ind(low, high, equal_var=False)
    ci = result.confidence_interval(0.95)
    outcome = "supported" if ci.high < 0 else "contradicted" if ci.low > 0 else "inconclusive"
    return outcome, float(result.pvalue)


def holm_here(p: pd.Series) -> pd.Series:
    """Holm's adjusted p-values, written apart from posx: rank, multiply by m - rank, running max."""
    known = p.dropna().sort_values(kind="stable")
    m = len(known)
    scaled = np.minimum(1.0, known.to_numpy() * (m - np.arange(m)))
    return pd.Series(np.maximum.accumulate(scaled), index=known.index).reindex(p.index)


def combined(outcomes) -> str:
    found = set(outcomes)
    return next((o for o in ("contradicted", "inconclusive", "not checked") if o in found), "supported")


def recomputed(claims: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """claims with this file's own outcome, p, Holm outcome and claim verdicts."""
    out = claims.copy()
    calls = []
    for r in claims.itertuples():
        low, high = numbers(r.low_values), numbers(r.high_values)
        if "not learned at T" in r.comparison:  # chance against chance: no test, by the rule
            calls.append(("inconclusive", np.nan))
            continue
        if len(low) < 2 or len(high) < 2:  # a cell missing or of one seed
            calls.append(("not checked", np.nan))
            continue
        calls.append(call(low, numbers(r.low_seeds), high, numbers(r.high_seeds)))
    out["outcome_here"], out["p_here"] = [c[0] for c in calls], [c[1] for c in calls]
    out["p_holm_here"] = holm_here(out["p_here"])
    held = (out["p_holm_here"] < 0.05) | ~out["outcome_here"].isin(["supported", "contradicted"])
    out["holm_here"] = out["outcome_here"].where(held, "inconclusive")
    by = out.groupby(keys, sort=False)
    out["verdict_here"] = by["outcome_here"].transform(combined)
    out["holm_verdict_here"] = by["holm_here"].transform(combined)
    return out


def read(name: str) -> pd.DataFrame:
    return pd.read_csv(REFERENCE / name / "claims.csv", keep_default_na=False, na_values=[""])


@pytest.mark.parametrize("name", [*STUDIES, RETRIEVAL[0]])
def test_every_call_in_claims_csv_is_recomputed_alike(name):
    keys = STUDIES.get(name, RETRIEVAL[1])
    out = recomputed(read(name), keys)
    assert len(out) > 0
    for mine, theirs in (("outcome_here", "outcome"), ("holm_here", "holm_outcome"), ("verdict_here", "verdict"),
                         ("holm_verdict_here", "holm_verdict")):  # fmt: skip
        differ = out[out[mine] != out[theirs]]
        assert differ.empty, differ[["claim", "comparison", mine, theirs]].to_string()
    tested = out["p_here"].notna()
    assert np.allclose(out.loc[tested, "p_here"], out.loc[tested, "p"], rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("name", list(STUDIES))
def test_every_value_a_perplexity_claim_tests_is_a_committed_run_of_its_seed(name):
    """Each (seed, value) of an arm is a perplexity the committed sweep.csv holds for a run of that
    seed (a tolerance's bound divided by its factor first)."""
    sweep = pd.read_csv(REFERENCE / name / "sweep.csv", low_memory=False)
    sweep = sweep[sweep["status"] == "ok"]
    seed = sweep["job"].str.extract(r"-s(\d+)(?:-|$)")[0].astype(int)
    by_seed = {s: np.sort(g.to_numpy()) for s, g in sweep["ppl"].groupby(seed)}
    for r in read(name).itertuples():
        for label, seeds, values in ((r.low, r.low_seeds, r.low_values), (r.high, r.high_seeds, r.high_values)):
            factor, _arm = scale_of(label)
            for s, v in zip(numbers(seeds), numbers(values)):
                there = by_seed[int(s)]
                i = np.searchsorted(there, v / factor)
                near = there[max(i - 1, 0) : i + 1]
                assert np.isclose(near, v / factor, rtol=1e-12).any(), (r.claim, label, s, v)


def test_every_value_a_retrieval_claim_tests_comes_from_exact_csv():
    """Each arm's value per seed is the mean exact share over its factors in exact.csv (the bar of
    "exact ≥ 90%" is the constant itself)."""
    exact = pd.read_csv(REFERENCE / RETRIEVAL[0] / "exact.csv")
    for r in read(RETRIEVAL[0]).itertuples():
        for label, seeds, values in ((r.low, r.low_seeds, r.low_values), (r.high, r.high_seeds, r.high_values)):
            factor, arm = scale_of(label)
            found = re.match(r"^(\S+) (?:past T \((.+)\)|at (\S+)x)$", arm)
            if found is None:  # the constant bar
                assert set(numbers(values)) <= {float(arm)}
                continue
            encoding, past, at = found.groups()
            factors = [float(f.rstrip("x")) for f in past.split(", ")] if past else [float(at)]
            mine = exact[(exact["encoding"] == encoding) & (exact["method"] == "none") & (exact["task"] == r.task)]
            for s, v in zip(numbers(seeds), numbers(values)):
                rows = mine[(mine["seed"] == int(s)) & mine["factor"].isin(factors)]
                assert len(rows) == len(factors) and np.isclose(rows["exact"].mean() * factor, v, rtol=1e-12)
