"""Runs as a collection: ``posx runs [PATH]`` lists them, ``posx compare RUN RUN...`` sets their
tables side by side. Both only read run directories (no model is loaded).

A run's status: ``running`` while a process holds its lock (``posx.core.lock``), ``finished``
when its model.json is there (weights saved at the end), ``stopped`` otherwise (killed or
stopped by a signal; ``posx train --resume`` continues it from its checkpoint).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import yaml
from rich.table import Table
from rich.text import Text

from posx.core import lock
from posx.core.errors import PosxError
from posx.eval.tables import read_table
from posx.runs.rundir import CONFIG, META, display_name, is_run_dir, lineage_of, read_meta

RUN_COLUMNS = ["name", "encoding", "T", "steps", "val_ppl", "evaluated_lengths", "parent", "status", "path"]
SKIP = {"eval", "checkpoint", "cache", "reports"}  # folders that never hold runs


def find_all_runs(path: Path, depth: int = 3) -> list[Path]:
    """Run directories at ``path`` or below it (results/, results/runs/, a sweep), finished or not."""
    path = Path(path)
    if not path.is_dir():
        raise PosxError(f"{path} is not a directory; give a run, a directory of runs or a results directory")
    if is_run_dir(path):
        return [path]
    found = []
    if depth > 0:
        for child in sorted(p for p in path.iterdir() if p.is_dir() and p.name not in SKIP):
            found += find_all_runs(child, depth - 1)
    return found


def status(run_dir: Path) -> str:
    if lock.held(run_dir):
        return "running"
    return "finished" if (run_dir / META).is_file() else "stopped"


def _val_ppl(run_dir: Path) -> float:
    """exp of the last validation loss in metrics.csv (NaN when there is none)."""
    path = run_dir / "metrics.csv"
    if not path.is_file():
        return math.nan
    try:
        losses = pd.read_csv(path)["val_loss"].dropna()
    except (pd.errors.ParserError, pd.errors.EmptyDataError, KeyError, UnicodeDecodeError):
        return math.nan
    return math.exp(float(losses.iloc[-1])) if len(losses) else math.nan


def mapping(node) -> dict:
    """A config node read from a file that may be damaged: itself when a mapping, else empty."""
    return node if isinstance(node, dict) else {}


def describe(run_dir: Path) -> dict:
    """One row of ``posx runs``."""
    config = {}
    if (run_dir / CONFIG).is_file():
        try:
            config = mapping(yaml.safe_load((run_dir / CONFIG).read_text(encoding="utf-8")))
        except (yaml.YAMLError, UnicodeDecodeError):
            config = {}
    meta = read_meta(run_dir) if (run_dir / META).is_file() else None
    lineage = lineage_of(run_dir)
    lengths = ""
    if (run_dir / "extrapolation.csv").is_file():
        table = read_table(run_dir / "extrapolation.csv")
        lengths = ",".join(str(int(v)) for v in sorted(set(table.loc[table["status"] == "ok", "eval_context"])))
    train = mapping(config.get("train"))
    return {
        "name": display_name(run_dir),
        "encoding": meta.model.pos if meta else mapping(config.get("pos")).get("name", ""),
        "T": meta.train_context if meta else train.get("context_length", ""),
        "steps": meta.step if meta else train.get("steps", ""),
        "val_ppl": _val_ppl(run_dir),
        "evaluated_lengths": lengths,
        "parent": lineage.parent if lineage else "",
        "status": status(run_dir),
        "path": str(run_dir),
    }


def list_runs(path: Path) -> pd.DataFrame:
    runs = find_all_runs(Path(path))
    if not runs:
        raise PosxError(f"no runs under {path}; train one with `posx train`")
    return pd.DataFrame([describe(r) for r in runs], columns=RUN_COLUMNS)


def runs_table(df: pd.DataFrame, title: str) -> Table:
    table = Table(title=title)
    for column in RUN_COLUMNS[:-1]:
        table.add_column(column, justify="right" if column in ("T", "steps", "val_ppl") else "left", overflow="fold")
    colours = {"finished": "green", "stopped": "yellow", "running": "cyan"}
    for row in df.itertuples(index=False):
        ppl = "" if row.val_ppl != row.val_ppl else f"{row.val_ppl:.3f}"
        table.add_row(  # Text: a name or a parent with [brackets] prints as written
            Text(row.name),
            Text(str(row.encoding)),
            str(row.T),
            str(row.steps),
            ppl,
            row.evaluated_lengths,
            Text(str(row.parent)),
            Text(row.status, style=colours[row.status]),
        )
    return table


def compare(run_dirs: list[Path]) -> tuple[pd.DataFrame, list[str]]:
    """One row per (method, stage, factor): each run's perplexity, its interval, and its ratio
    to the first run's; also the column names used for the runs."""
    if len(run_dirs) < 2:
        raise PosxError("posx compare needs at least two runs")
    merged = None
    names = []
    for run_dir in run_dirs:
        path = Path(run_dir) / "extrapolation.csv"
        if not path.is_file():
            raise PosxError(f"{run_dir} has no extrapolation.csv; evaluate it first with posx eval-extrapolate")
        name = Path(run_dir).name if Path(run_dir).name not in names else str(run_dir)
        names.append(name)
        t = read_table(path)
        t = t.assign(ppl=t["ppl"].where(t["status"] == "ok"))
        t = t[["method", "stage", "factor", "ppl", "ppl_lo", "ppl_hi"]].rename(
            columns={"ppl": name, "ppl_lo": f"{name} lo", "ppl_hi": f"{name} hi"}
        )
        merged = t if merged is None else merged.merge(t, on=["method", "stage", "factor"], how="outer")
    for name in names[1:]:
        merged[f"{name} / {names[0]}"] = merged[name] / merged[names[0]]
    return merged.sort_values(["stage", "method", "factor"], kind="stable").reset_index(drop=True), names


def compare_table(df: pd.DataFrame, names: list[str]) -> Table:
    table = Table(title=f"perplexity [95% interval over windows]; ratios to {names[0]}")
    for column in ("method", "stage", "factor"):
        table.add_column(column)
    for name in names:
        table.add_column(name, justify="right", overflow="fold")
    for name in names[1:]:
        table.add_column(
            f"/ {names[0]}" if len(names) == 2 else f"{name} / {names[0]}", justify="right", overflow="fold"
        )

    def cell(row, name):
        v, lo, hi = row[name], row[f"{name} lo"], row[f"{name} hi"]
        if v != v:
            return "[dim]—[/]"
        return f"{v:.3f}" + (f" [dim]\\[{lo:.3f}, {hi:.3f}][/]" if lo == lo and hi == hi else "")

    for _, row in df.iterrows():
        ratios = [row[f"{n} / {names[0]}"] for n in names[1:]]
        table.add_row(
            row["method"],
            row["stage"],
            f"{row['factor']:g}x",
            *(cell(row, n) for n in names),
            *("" if r != r else f"{r:.3f}" for r in ratios),
        )
    return table
