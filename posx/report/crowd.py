"""Figures over more groups than a reader can tell apart.

A figure draws one line per group (the mean over its seeds, a band over seeds), so its cost
follows the number of groups, never of runs. Past ``MAX_LINES`` lines on one axes, or
``MAX_PANELS`` panels in one figure, lines or panels of different groups are no longer
readable: the figure then pools the groups, one line per what is left of its key (encoding x
method, say) at each x, the median of the groups' means with a band from the lowest to the
highest group mean, and says so in its title and in summary.md (``posx.report.writeup``).
summary.csv keeps every group's numbers.
"""

from __future__ import annotations

import pandas as pd

MAX_LINES = 12  # lines on one axes a reader can tell apart
MAX_PANELS = 16  # panels in one figure


def crowded(data: pd.DataFrame, keys: list[str], limit: int = MAX_LINES) -> bool:
    """Whether ``data`` holds more than ``limit`` distinct ``keys`` (lines, or panels)."""
    return len(data.drop_duplicates(keys)) > limit if not data.empty else False


def pool(data: pd.DataFrame, keys: list[str], x: str, value: str, lo: str, hi: str) -> pd.DataFrame:
    """One line per ``keys`` but the group at each ``x``: the median of ``value`` over the groups,
    ``lo``/``hi`` the lowest and highest; ``group`` reads how many groups were pooled, ``n_groups``
    how many a point pools."""
    others = [k for k in keys if k != "group"]
    pooled = (
        data.groupby([*others, x], sort=False, dropna=False)
        .agg(**{value: (value, "median"), lo: (value, "min"), hi: (value, "max"), "n_groups": ("group", "nunique")})
        .reset_index()
    )
    return pooled.assign(group=pooled_label(data))


def groups_in(data: pd.DataFrame) -> int:
    """How many groups ``data`` shows: a group label is shared by the groups of each encoding and parent."""
    return len(data.drop_duplicates([k for k in ("group", "parent", "encoding") if k in data]))


def pooled_label(data: pd.DataFrame) -> str:
    return f"{groups_in(data)} groups pooled"


def note(figure: str, data: pd.DataFrame, what: str, limit: int) -> str:
    """The line summary.md and the figure's title carry about a pooled figure."""
    return (
        f"`{figure}`: {groups_in(data)} groups are more {what} than one figure can show legibly "
        f"({limit} at most); it pools them: per line the median over the groups' means, band from the lowest "
        "to the highest group mean. summary.csv has each group."
    )


TITLE = "groups pooled: median over groups, band lowest..highest group mean"
