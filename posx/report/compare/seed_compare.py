"""``posx compare`` over seeds: the runs given, grouped by identity as ``posx report`` groups them;
with two groups or more of two seeds or more, each later group against the first per row, by the
rule of ``posx.report.stats`` (*lower*, *higher* or *inconclusive*; fewer than two seeds: not checked).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from rich.table import Table
from rich.text import Text

from posx.report.stats import CONTRADICTED, NOT_CHECKED, SUPPORTED, Sample, compare
from posx.report.store import digest as digests

COLUMNS = ["group", "against", "method", "stage", "factor", "n", "n_against", "diff", "ci_low", "ci_high", "test",
           "df", "p", "call", "detectable"]  # fmt: skip
CALLS = {SUPPORTED: "lower", CONTRADICTED: "higher"}  # the later group's perplexity against the first's


def seed_groups(run_dirs: list[Path], names: list[str]) -> list[list[tuple[str, int | None]]]:
    """The runs' (name, seed) in groups of equal identity, in the order the runs were given."""
    found: dict[tuple, list[tuple[str, int | None]]] = {}
    for run_dir, name in zip(run_dirs, names):
        digest = digests.resolve(Path(run_dir))[0]  # read only: compare writes nothing into a run
        ident = {**digest["identity"], **digest["eval"]}
        found.setdefault(tuple(sorted((k, str(v)) for k, v in ident.items())), []).append((name, digest["seed"]))
    return list(found.values())


def _sample(row: pd.Series, group: list[tuple[str, int | None]]) -> Sample:
    scored = [(seed, float(row[name])) for name, seed in group if math.isfinite(float(row[name]))]
    if any(seed is None for seed, _ in scored):
        scored = [(-i - 1, v) for i, (_, v) in enumerate(scored)]  # seeds unknown: never paired
    return Sample(" ".join(n for n, _ in group), tuple(v for _, v in scored), tuple(s for s, _ in scored))


def differences(df: pd.DataFrame, groups: list[list[tuple[str, int | None]]]) -> pd.DataFrame:
    """Each later group against the first per row of ``df``; empty unless 2+ groups of 2+ seeds each."""
    if len(groups) < 2 or any(len(g) < 2 for g in groups):
        return pd.DataFrame(columns=COLUMNS)
    rows = []
    for k, group in enumerate(groups[1:], 2):
        for _, row in df.iterrows():
            mine, first = _sample(row, group), _sample(row, groups[0])
            t = compare(mine, first)
            call = CALLS.get(t.outcome, t.outcome)
            rows.append(dict(zip(COLUMNS, [k, 1, row["method"], row["stage"], row["factor"], len(mine.values),
                                           len(first.values), t.diff, t.lo, t.hi, t.test, t.df, t.p, call,
                                           t.detectable])))  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def table(diffs: pd.DataFrame, groups: list[list[tuple[str, int | None]]]) -> Table:
    """The differences as a terminal table, titled with each group's runs."""
    named = "; ".join(f"group {i}: {', '.join(n for n, _ in g)}" for i, g in enumerate(groups, 1))
    out = Table(title=f"difference of mean perplexity over seeds against group 1 [95% interval] ({named})")
    for column in ("group", "method", "stage", "factor", "seeds", "d [95% interval]", "test", "call"):
        out.add_column(column, overflow="fold")
    for r in diffs.itertuples():
        checked = r.call != NOT_CHECKED
        interval = f"{r.diff:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}]" if checked else "—"
        test = f"{r.test}, df {r.df:.1f}, p = {r.p:.2g}" if checked else ""
        call = r.call + (f" (detectable: {r.detectable:.3f})" if math.isfinite(r.detectable) else "")
        out.add_row(str(r.group), Text(str(r.method)), Text(str(r.stage)), f"{r.factor:g}x",
                    f"{r.n}/{r.n_against}", interval, test, call)  # fmt: skip
    return out
