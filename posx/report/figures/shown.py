"""Which groups a report draws: past ``TOP`` groups (two panels of ``facets.MAX_LINES`` lines at two
methods a group), the best ones, ranked by their lowest mean perplexity at the longest factor they
were scored at (longer factors first); ``--top N`` (or ``all``) draws others. Every table keeps
every group; summary.md says how the drawn ones were chosen. A group is a line key (``facets.LINE``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from posx.core.errors import PosxError
from posx.report.figures.facets import LINE, Facets

TOP = 12  # groups drawn by default when a report has more
ALL = "all"


def parse_top(text: str | int | None) -> int | None:
    """``--top N`` (N >= 1), ``--top all`` (None), or ``TOP`` when not given; else a one-line error."""
    if text is None:
        return TOP
    said = str(text).strip().lower()
    if said == ALL:
        return None
    if said.isdigit() and int(said) >= 1:
        return int(said)
    raise PosxError(f"--top {text}: give how many groups to draw, a whole number of at least 1 (e.g. --top 12), or all")


def rank(summary: pd.DataFrame) -> pd.DataFrame:
    """Every group once, best first, with ``factor``, ``best_ppl``, ``best_method``, ``rank``."""
    if summary.empty:
        return pd.DataFrame(columns=[*LINE, "factor", "best_ppl", "best_method", "rank"])
    rows = summary.assign(**{k: summary[k].fillna("").astype(str) for k in LINE})
    scored = rows[(rows["n_seeds"] > 0) & np.isfinite(rows["ppl_mean"].astype(float))]
    ordered = scored.sort_values(["factor", "ppl_mean"], ascending=[False, True], kind="stable")
    best = ordered.drop_duplicates(LINE)[[*LINE, "factor", "ppl_mean", "method"]]
    best = best.rename(columns={"ppl_mean": "best_ppl", "method": "best_method"})
    unscored = rows.drop_duplicates(LINE)[LINE].merge(best[LINE], how="left", indicator=True)
    unscored = unscored[unscored["_merge"] == "left_only"].drop(columns="_merge")
    out = pd.concat([best, unscored], ignore_index=True)
    out["rank"] = range(1, len(out) + 1)
    return out


@dataclass(frozen=True)
class Shown:
    """The groups a report draws: ``lines`` (None: all of them) and the sentence saying so."""

    lines: frozenset | None
    note: str
    total: int

    def rows(self, table: pd.DataFrame) -> pd.DataFrame:
        """The rows of ``table`` on the groups drawn (on the ``LINE`` columns it has: passkey has no parent)."""
        have = [k for k in LINE if k in table.columns]
        if self.lines is None or table.empty or "group" not in have:
            return table
        wanted = {tuple(line[LINE.index(k)] for k in have) for line in self.lines}
        near = table[table["group"].fillna("").astype(str).isin({line[0] for line in self.lines})]  # vectorised
        keys = pd.Series(list(near[have].fillna("").astype(str).itertuples(index=False, name=None)), index=near.index)
        return near[keys.isin(wanted)]


def titled(facets: Facets, shown: Shown) -> Facets:
    """``facets`` whose labels (panel and file titles) say the figures draw a choice of the groups."""
    if shown.lines is None:
        return facets
    said = f"the {len(shown.lines)} best of {shown.total} groups at the longest factor (summary.md)"
    return replace(facets, of={line: f"{label}, {said}" if label else said for line, label in facets.of.items()})


def choose(ranked: pd.DataFrame, top: int | None, asked: bool) -> Shown:
    """The groups to draw: the ``top`` first of ``ranked`` (``asked``: ``--top`` gave the number)."""
    total = len(ranked)
    if top is None or total <= top:
        return Shown(None, "", total)
    kept = ranked.head(top)
    lines = frozenset(tuple(str(v) for v in k) for k in kept[LINE].itertuples(index=False, name=None))
    longest = kept["factor"].dropna()
    at = f"{longest.max():g}x" if len(longest) else "the longest factor"
    how = f"--top {top}" if asked else f"the default, at most {top} groups a figure shows"
    note = (
        f"**{total} groups: the figures draw {top} of them ({how})**, the {top} with the lowest mean "
        f"perplexity at the longest factor each was scored at ({at} for the first; the best method of each); "
        "groups_ranked.csv ranks every group. Choose others with `--top N` (`--top all`: every group) or "
        "`--where KEY=VALUE`; summary.csv, groups.csv and the CSV tables hold every group."
    )
    return Shown(lines, note, total)
