"""``posx runs [PATH]`` lists runs from their digests (one walk, no YAML or table read) and
``posx compare RUN RUN...`` sets their tables side by side. A run's damaged files are listed in its
``damaged`` column. Status: ``running`` while a process holds its lock, ``finished`` with its
model.json, else ``stopped`` (``posx train --resume`` continues it).
"""

from __future__ import annotations

import math
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from posx.core import lock
from posx.core.errors import PosxError
from posx.core.workers import cores
from posx.eval.tables import read_table
from posx.report.store import digest as digests
from posx.report.store import selection
from posx.report.store.scan import refusal
from posx.runs.paths import NOT_RUNS, RESULTS, is_run_dir, name_below, refuse_run_folder, require_dir

TABLE_ROWS = 200  # longer listings print as plain aligned lines (a rich Table measures every cell)
FIXED = ("method", "stage", "factor")  # compare's own columns: a run of such a name is named by its path
RUN_COLUMNS = ["name", "encoding", "T", "steps", "val_ppl", "evaluated_lengths", "parent", "status", "damaged", "path"]


def find_all_runs(path: Path, depth: int = 3) -> list[Path]:
    """Run directories at ``path`` or below it (results/, results/runs/, a sweep), finished or not."""
    path = Path(path)
    require_dir(path, "give a run, a directory of runs or a results directory (`posx train` makes runs)")
    if is_run_dir(path):
        return [path]
    found = []
    if depth > 0:
        for child in sorted(p for p in path.iterdir() if p.is_dir() and p.name not in NOT_RUNS):
            found += find_all_runs(child, depth - 1)
    return found


def describe(run_dir: Path, results: Path) -> dict:
    """One row of ``posx runs``, from the run's digest; its name relative to ``results``."""
    digest = digests.load(run_dir)
    shown = digest["listing"]
    running = lock.held(run_dir)
    return {
        "name": name_below(run_dir, results),
        "encoding": shown["encoding"],
        "T": shown["T"],
        "steps": shown["steps"],
        "val_ppl": math.nan if shown["val_ppl"] is None else shown["val_ppl"],
        "evaluated_lengths": shown["evaluated_lengths"],
        "parent": shown["parent"],
        "status": "running" if running else "finished" if digest["finished"] else "stopped",
        "damaged": ",".join(digest["damaged"]),  # listed without what they hold; re-evaluating (or fixing) mends them
        "path": str(run_dir),
    }


PARALLEL_FROM = 200  # runs from which a listing reads their digests in worker processes


def _describe_all(runs: list[Path], results: Path) -> list[dict]:
    """``describe`` of each run, in order: from ``PARALLEL_FROM`` runs on in a forked worker per core."""
    workers = min(cores(), len(runs))
    if len(runs) < PARALLEL_FROM or workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return [describe(r, results) for r in runs]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(describe, runs, [results] * len(runs), chunksize=max(1, len(runs) // (8 * workers))))


def list_runs(path: Path) -> pd.DataFrame:
    runs = find_all_runs(Path(path))
    if not runs:
        raise PosxError(f"no runs under {path}; train one with `posx train`")
    results = Path(RESULTS).resolve()  # names as the commands that take a run look them up
    return pd.DataFrame(_describe_all(runs, results), columns=RUN_COLUMNS)


@dataclass
class Lines:
    """Plain lines for the console, printed as they are (no markup, no measuring)."""

    lines: list[str]

    def __rich_console__(self, console, options):
        for line in self.lines:
            yield Segment(line)
            yield Segment.line()


def _plain(df: pd.DataFrame, title: str) -> Lines:
    """The listing as aligned columns of text: seconds for 10,000 runs where a Table takes minutes."""
    columns = RUN_COLUMNS[:-1]
    shown = df[columns].astype(str).assign(val_ppl=["" if v != v else f"{v:.3f}" for v in df["val_ppl"]])
    width = {c: max(len(c), int(shown[c].str.len().max())) for c in columns}
    rows = ["  ".join(v.ljust(width[c]) for c, v in zip(columns, row)) for row in shown.itertuples(index=False)]
    return Lines([title, "  ".join(c.ljust(width[c]) for c in columns), *rows])


def runs_table(df: pd.DataFrame, title: str) -> Table | Lines:
    """A rich Table; past TABLE_ROWS runs, plain aligned lines."""
    if len(df) > TABLE_ROWS:
        return _plain(df, title)
    table = Table(title=Text(title))
    for column in RUN_COLUMNS[:-1]:
        table.add_column(column, justify="right" if column in ("T", "steps", "val_ppl") else "left", overflow="fold")
    colours = {"finished": "green", "stopped": "yellow", "running": "cyan"}
    for row in df.itertuples(index=False):
        ppl = "" if row.val_ppl != row.val_ppl else f"{row.val_ppl:.3f}"
        texts = [Text(str(getattr(row, c))) for c in ("name", "encoding", "T", "steps", "evaluated_lengths", "parent")]
        status, damaged = Text(row.status, style=colours[row.status]), Text(row.damaged, style="red")
        table.add_row(*texts[:4], ppl, *texts[4:], status, damaged)  # Text: a value's [brackets] print as written
    return table


def select(run_dirs: list[Path], conditions: list[tuple[str, str]]) -> list[Path]:
    """The runs whose identity (from their digests) meets every ``--where`` condition."""
    if not conditions:
        return run_dirs
    identities = []
    for run_dir in run_dirs:
        found = digests.load(run_dir)
        identities.append({**found["identity"], **found["eval"]})
    return [r for r, keep in zip(run_dirs, selection.keep(identities, conditions)) if keep]


Z95 = 1.959964  # the normal 97.5% quantile


def _log_se(t: pd.DataFrame) -> pd.Series:
    """Each row's standard error of log perplexity from its own 95% interval (few windows keep their width)."""
    from_interval = (np.log(t["ppl_hi"]) - np.log(t["ppl_lo"])) / (2 * Z95)
    return from_interval.where(from_interval.notna(), t["nll_se"]) if "nll_se" in t else from_interval


def ratio_interval(ratio, se_a, se_b) -> tuple:
    """The 95% interval of a perplexity ratio b / a by the delta method on its log: log(b / a) is
    the difference of the two mean NLLs, its standard error sqrt(se_a² + se_b²) (``_log_se``:
    each from its run's own interval) taken as if the runs' windows were independent. Both runs
    are scored on the same held-out windows, whose difficulty moves both alike (a positive
    correlation), so the true interval is narrower: this one errs wide, never narrow."""
    se = np.sqrt(np.square(se_a) + np.square(se_b))
    return ratio * np.exp(-Z95 * se), ratio * np.exp(Z95 * se)


def readable(run_dirs: list[Path]) -> tuple[list[Path], dict[Path, str]]:
    """(the runs compare can read, run -> error of each damaged extrapolation.csv); under two: the error."""
    kept, damaged = [], {}
    for run_dir in run_dirs:
        path = Path(run_dir) / "extrapolation.csv"
        why = refusal(path) if path.is_file() else None
        if why is None:
            kept.append(run_dir)
        else:
            damaged[run_dir] = why
    if damaged and len(kept) < 2:
        raise PosxError(next(iter(damaged.values())))
    return kept, damaged


def compare(run_dirs: list[Path]) -> tuple[pd.DataFrame, list[str], list[str]]:
    """One row per (method, stage, factor): each run's perplexity, its interval, and its ratio
    to the first run's with the ratio's 95% interval (``ratio_interval``); also the column names
    used for the runs, and notes on what the rows pair that is not alike (each run's factor is
    of its own T; protocols differ)."""
    if len(run_dirs) < 2:
        raise PosxError("posx compare needs at least two runs")
    merged = None
    names = []
    alike: dict[str, dict[str, str]] = {"T": {}, "protocol": {}}
    for run_dir in run_dirs:
        path = Path(run_dir) / "extrapolation.csv"
        if not path.is_file():
            refuse_run_folder(Path(run_dir))
            raise PosxError(f"{run_dir} has no extrapolation.csv; evaluate it first with posx eval-extrapolate")
        name = _column_name(Path(run_dir), names)
        names.append(name)
        t = read_table(path)
        lengths = sorted(set(t["reference_context"].fillna(t["train_context"])))
        alike["T"][name] = ", ".join(str(int(v)) for v in lengths)
        alike["protocol"][name] = ", ".join(sorted(set(_protocol(r) for r in t.itertuples())))
        t = t.assign(ppl=t["ppl"].where(t["status"] == "ok"), log_se=_log_se(t))
        t = t[["method", "stage", "factor", "ppl", "ppl_lo", "ppl_hi", "log_se"]].rename(
            columns={"ppl": name, "ppl_lo": f"{name} lo", "ppl_hi": f"{name} hi", "log_se": f"{name} se"}
        )
        merged = t if merged is None else merged.merge(t, on=["method", "stage", "factor"], how="outer")
    for name in names[1:]:
        ratio = merged[name] / merged[names[0]]
        lo, hi = ratio_interval(ratio, merged[f"{names[0]} se"], merged[f"{name} se"])
        column = f"{name} / {names[0]}"
        merged[column], merged[f"{column} lo"], merged[f"{column} hi"] = ratio, lo, hi
    merged = merged.drop(columns=[f"{name} se" for name in names])
    notes = [
        f"the runs were {what} ({'; '.join(f'{n}: {v}' for n, v in alike[key].items())}); {then}"
        for key, what, then in (
            ("T", "trained at different T", "a row pairs each run's own factor x T, not one length"),
            ("protocol", "scored with different protocols", "their perplexities do not compare: evaluate them alike"),
        )
        if len(set(alike[key].values())) > 1
    ]
    return merged.sort_values(["stage", "method", "factor"], kind="stable").reset_index(drop=True), names, notes


def _columns(name: str, first: str | None) -> set[str]:
    """Run ``name``'s columns in compare's table: perplexity, interval, and ratio to ``first`` (None: it is)."""
    own = {name, f"{name} lo", f"{name} hi", f"{name} se"}
    ratio = f"{name} / {first}"
    return own if first is None else own | {ratio, f"{ratio} lo", f"{ratio} hi"}


def _column_name(run_dir: Path, names: list[str]) -> str:
    """The run's column name: its folder's name, its path, or numbered: the first clashing with no column."""
    first = names[0] if names else None
    taken = set(FIXED).union(*(_columns(n, None if i == 0 else first) for i, n in enumerate(names)))
    candidates = [run_dir.name, str(run_dir)]
    candidates += (f"{run_dir.name} ({k})" for k in range(2, len(names) + 3))
    for name in candidates:
        if not _columns(name, first) & taken:
            return name
    raise PosxError(f"posx compare finds no column name for {run_dir} apart from the other runs'; rename it")


def _protocol(row) -> str:
    """How a table row was scored: non-overlapping windows, or sliding with its stride."""
    sliding = row.protocol == "sliding" and row.stride == row.stride  # NaN: no stride
    return str(row.protocol) + (f" stride {int(row.stride)}" if sliding else "")


def compare_table(df: pd.DataFrame, names: list[str]) -> Table:
    title = f"perplexity [95% interval over windows]; ratios to {names[0]} [95% interval, delta method]"
    table = Table(title=Text(title))
    for column in ("method", "stage", "factor"):
        table.add_column(column)
    for name in names:
        table.add_column(Text(name), justify="right", overflow="fold")
    for name in names[1:]:
        heading = f"/ {names[0]}" if len(names) == 2 else f"{name} / {names[0]}"
        table.add_column(Text(heading), justify="right", overflow="fold")

    def cell(row, name):
        v, lo, hi = row[name], row[f"{name} lo"], row[f"{name} hi"]
        if v != v:
            return "[dim]—[/]"
        return f"{v:.3f}" + (f" [dim]\\[{lo:.3f}, {hi:.3f}][/]" if lo == lo and hi == hi else "")

    for _, row in df.iterrows():
        own = [cell(row, n) for n in names]
        ratios = [cell(row, f"{n} / {names[0]}").replace("[dim]—[/]", "") for n in names[1:]]
        table.add_row(Text(str(row["method"])), Text(str(row["stage"])), f"{row['factor']:g}x", *own, *ratios)
    return table
