"""The tables an evaluation writes, and how they are shown.

``extrapolation.csv`` (and .md): one row per (method, length), or per (stage, length) for
an extended run. ``positions.csv``: mean NLL per bucket of window positions. ``passkey.csv``:
passkey retrieval per (method, length, variant, depth range). An evaluation is an
``Evaluation``; ``write_tables`` writes all of it, each file replaced atomically.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from rich.table import Table

from posx.core import files

COLUMNS = ["run", "pos", "train_context", "eval_context", "factor", "method", "scale",
           "attention_factor", "nll", "ppl", "tokens", "status", "protocol", "stride", "reference_context",
           "stage", "absolute_beyond", "nll_se", "ppl_lo", "ppl_hi", "windows", "eval_id"]
# nll_se: standard error of the mean NLL over the scored windows; ppl_lo/ppl_hi: the 95% interval
# exp(nll -/+ q nll_se), q Student's t (posx.eval.scoring.interval); eval_id: the identity of the evaluation
# settings (posx.eval.store), the name of the eval/<eval_id>/ folder that keeps this table.
POSITION_COLUMNS = ["run", "pos", "train_context", "eval_context", "factor", "method", "protocol",
                    "bucket_start", "bucket_end", "tokens", "nll", "stage"]
PASSKEY_COLUMNS = ["run", "pos", "train_context", "eval_context", "factor", "method", "variant",
                   "depth_lo", "depth_hi", "trials", "accuracy", "key_nll", "status"]
DEFAULT_PROTOCOL = "nonoverlapping"  # eval.protocol's default, and that of tables written before it existed
# Columns added to extrapolation.csv after its first version, with the value an older table implies.
ADDED_COLUMNS = {"protocol": DEFAULT_PROTOCOL, "stage": "zero-shot", "absolute_beyond": "none",
                 "nll_se": math.nan, "ppl_lo": math.nan, "ppl_hi": math.nan, "windows": math.nan, "eval_id": ""}


@dataclass
class Evaluation:
    """What one evaluation produced: the main table and the long tables beside it."""

    table: pd.DataFrame  # extrapolation.csv, columns COLUMNS
    positions: list = field(default_factory=list)  # positions.csv rows (dicts)
    passkey: list = field(default_factory=list)  # passkey.csv rows (dicts)

    @property
    def passkey_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.passkey, columns=PASSKEY_COLUMNS)


def read_extrapolation(path: Path) -> pd.DataFrame:
    """An extrapolation.csv of any posx version, with every column of today's tables."""
    df = pd.read_csv(path)
    for column, implied in ADDED_COLUMNS.items():
        df[column] = df[column].fillna(implied) if column in df else implied
    return df


def write_tables(result: Evaluation, run_dir: Path) -> list[Path]:
    """extrapolation.csv and .md, positions.csv and passkey.csv, each replaced atomically.
    A positions.csv or passkey.csv left by an earlier evaluation is removed when this one has
    none, so no table describes another evaluation than its neighbours."""
    df = result.table
    with files.atomic_path(run_dir / "extrapolation.csv") as tmp:
        df.to_csv(tmp, index=False)
    files.write_text(run_dir / "extrapolation.md", df.to_markdown(index=False, floatfmt=".4g") + "\n")
    written = [run_dir / "extrapolation.csv", run_dir / "extrapolation.md"]
    for name, rows, columns in (("positions.csv", result.positions, POSITION_COLUMNS),
                                ("passkey.csv", result.passkey, PASSKEY_COLUMNS)):
        if rows:
            with files.atomic_path(run_dir / name) as tmp:
                pd.DataFrame(rows, columns=columns).to_csv(tmp, index=False)
            written.append(run_dir / name)
        else:
            (run_dir / name).unlink(missing_ok=True)
    return written


def rich_table(df: pd.DataFrame, title: str) -> Table:
    """Methods (and stages, when there are two) by rows, factors by columns, perplexity (or
    the status) in the cells."""
    factors = sorted(df["factor"].unique())
    if df["stage"].nunique() > 1:
        df = df.assign(method=df["method"] + " " + df["stage"])
    table = Table(title=title)
    table.add_column("method")
    for f in factors:
        length = int(df.loc[df["factor"] == f, "eval_context"].iloc[0])
        table.add_column(f"{f:g}x ({length})", justify="right")
    for method in dict.fromkeys(df["method"]):
        cells = []
        for f in factors:
            r = df[(df["method"] == method) & (df["factor"] == f)].iloc[0]
            cells.append(f"{r['ppl']:.3f}{_half_width(r)}" if r["status"] == "ok" else f"[dim]{r['status']}[/]")
        table.add_row(method, *cells)
    return table


def _half_width(row) -> str:
    """`` ±h``: half the width of the row's 95% interval (empty when it has none)."""
    lo, hi = row.get("ppl_lo", math.nan), row.get("ppl_hi", math.nan)
    return f" [dim]±{(hi - lo) / 2:.3f}[/]" if lo == lo and hi == hi else ""


def passkey_table(pk: pd.DataFrame, title: str) -> Table:
    """Method x variant by rows, factors by columns, accuracy over all depths in the cells."""
    factors = sorted(pk["factor"].unique())
    table = Table(title=title)
    table.add_column("method")
    table.add_column("variant")
    for f in factors:
        table.add_column(f"{f:g}x", justify="right")
    for (method, variant), group in pk.groupby(["method", "variant"], sort=False):
        if (group["status"] == "not_applicable").all():
            continue  # a RoPE method on a model without RoPE: the perplexity table says so
        cells = []
        for f in factors:
            g = group[group["factor"] == f]
            ok = g[g["status"] == "ok"]
            if ok.empty:
                cells.append(f"[dim]{g['status'].iloc[0]}[/]")
            else:
                hits = (ok["accuracy"] * ok["trials"]).sum()
                cells.append(f"{hits:.0f}/{ok['trials'].sum()}")
        table.add_row(method, variant, *cells)
    return table
