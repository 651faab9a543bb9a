"""A study's perplexities per seed, from its committed tables: the numbers the claims test.

``summary.csv`` holds a cell's mean and std over seeds; a test on the means needs the values
themselves. They come from ``sweep.csv`` (every evaluation row of every run, ``job`` = the run's
folder name) and ``groups.csv`` (each group's label, parent, encoding, seeds and run folders, in
the same order), keyed like the summary (``posx.report.store.queries``): group label, parent, encoding,
method (learned absolute rows past the table read as ``clamp`` or ``interpolate``; an extended
run's rows as ``<method> (<stage>)``), protocol and factor. Only rows with status ``ok`` count,
as in the summary, so a cell's mean here is the summary's ``ppl_mean``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

KEYS = ["group", "parent", "encoding", "method", "protocol", "factor"]
COLUMNS = [*KEYS, "seed", "ppl"]


def run_seeds(groups: pd.DataFrame) -> pd.DataFrame:
    """(job, group, parent, seed): one row per run counted in a group (``groups.csv``)."""
    rows = []
    for g in groups.fillna("").itertuples():
        seeds = [int(s) for s in str(g.seeds).split(",") if s != ""]
        jobs = str(g.run_dirs).split()
        if len(seeds) != len(jobs):
            raise ValueError(f"groups.csv: group {g.group} lists {len(seeds)} seeds for {len(jobs)} runs")
        rows += [{"job": j, "group": str(g.label), "parent": str(g.parent), "seed": s} for j, s in zip(jobs, seeds)]
    return pd.DataFrame(rows, columns=["job", "group", "parent", "seed"])


def _method(sweep: pd.DataFrame, extended: pd.Series) -> pd.Series:
    """The summary's method of each row (``posx.report.store.queries.BEYOND`` and ``STAGED``)."""
    beyond = sweep["absolute_beyond"].fillna("none").astype(str)
    past = (sweep["pos"] == "absolute") & (sweep["method"] == "none") & ~beyond.isin(["none", ""])
    method = beyond.where(past, sweep["method"].astype(str))
    return method.where(~extended, method + " (" + sweep["stage"].astype(str) + ")")


def per_seed(sweep: pd.DataFrame, groups: pd.DataFrame) -> pd.DataFrame:
    """One row per (summary cell, seed) with its perplexity (module docstring)."""
    runs = run_seeds(groups)
    rows = sweep[sweep["status"] == "ok"].merge(runs, on="job", how="inner")
    rows = rows.assign(encoding=rows["pos"], method=_method(rows, rows["parent"] != ""))
    rows = rows.astype({"factor": float, "ppl": float, "seed": int})
    return rows[COLUMNS].sort_values(COLUMNS[:-1], kind="stable").reset_index(drop=True)


def read_groups(path: Path) -> pd.DataFrame:
    """A report's ``groups.csv``, its labels, parents and seeds as text."""
    return pd.read_csv(path, dtype={"label": str, "parent": str, "seeds": str, "run_dirs": str})


def read(folder: Path) -> pd.DataFrame:
    """``per_seed`` of a committed study folder (its ``sweep.csv`` and ``report/groups.csv``)."""
    sweep = pd.read_csv(Path(folder) / "sweep.csv", low_memory=False)
    return per_seed(sweep, read_groups(Path(folder) / "report" / "groups.csv"))
