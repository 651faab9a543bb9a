"""The tables an evaluation writes (``Evaluation``; columns: docs/run-directory.md), how they are
read back checked, and shown."""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from rich.markup import escape
from rich.table import Column, Table

from posx.core import files
from posx.core.errors import PosxError
from posx.core.fieldcheck import MAX_CONTEXT, MAX_STEPS
from posx.runs.paths import display_name


def perplexity(nll: float) -> float:
    """exp(``nll``), ``inf`` past what a float holds (a diverged loss is a result, not a crash). Every
    perplexity posx computes goes through here (without torch: listings and reports read it too)."""
    try:
        return math.exp(nll)
    except OverflowError:
        return math.inf


KEYS = ("run", "pos", "train_context", "eval_context", "factor", "method")  # the cell every table row belongs to
COLUMNS = [
    *KEYS, "scale", "attention_factor", "nll", "ppl", "tokens", "status", "protocol", "stride", "reference_context",
    "stage", "absolute_beyond", "within_documents", "documents", "nll_se", "ppl_lo", "ppl_hi", "windows", "eval_id",
    "bytes", "bpb", "bpb_lo", "bpb_hi", "window_start", "normalisation",
]  # fmt: skip
# Every table's columns are described in docs/run-directory.md.
POSITION_COLUMNS = [*KEYS, "protocol", "bucket_start", "bucket_end", "tokens", "nll", "stage"]
PASSKEY_COLUMNS = [*KEYS, "variant", "depth_lo", "depth_hi", "trials", "accuracy", "key_nll", "status"]
TASK_COLUMNS = [
    *KEYS, "task", "depth_lo", "depth_hi", "trials", "accuracy", "accuracy_lo", "accuracy_hi", "token_accuracy",
    "answer_nll", "answer_nll_se", "answer_tokens", "status", "chance",
]  # fmt: skip
CURVE = "task_curve.csv"  # written by training (posx.train.taskcurve), not by an evaluation
CURVE_COLUMNS = ["step", "tokens", "task", "trials", "accuracy", "token_accuracy", "answer_nll", "chance"]
UNSTATED = ("chance",)  # may be empty in any row: no level stated for the task, or a table from before it was kept
DEFAULT_PROTOCOL = "nonoverlapping"  # eval.protocol's default, and that of tables written before it existed
# Columns added to extrapolation.csv after its first version, with the value an older table implies.
ADDED_COLUMNS = {
    "protocol": DEFAULT_PROTOCOL, "stage": "zero-shot", "absolute_beyond": "none", "within_documents": False,
    "eval_id": "", "window_start": "", "normalisation": "token",
    **dict.fromkeys(["documents", "nll_se", "ppl_lo", "ppl_hi", "windows", "bytes", "bpb", "bpb_lo", "bpb_hi"],
                    math.nan),  # the numbers an older table lacks
}  # fmt: skip


@dataclass
class Evaluation:
    """What one evaluation produced: the main table and the long tables beside it."""

    table: pd.DataFrame  # extrapolation.csv, columns COLUMNS
    positions: list = field(default_factory=list)  # positions.csv rows (dicts)
    passkey: list = field(default_factory=list)  # passkey.csv rows (dicts)
    tasks: list = field(default_factory=list)  # tasks.csv rows (dicts)

    @property
    def passkey_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.passkey, columns=PASSKEY_COLUMNS)

    @property
    def tasks_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.tasks, columns=TASK_COLUMNS)


TABLE_COLUMNS = {
    "extrapolation.csv": COLUMNS,
    "positions.csv": POSITION_COLUMNS,
    "passkey.csv": PASSKEY_COLUMNS,
    "tasks.csv": TASK_COLUMNS,
    CURVE: CURVE_COLUMNS,
}
# The columns that hold no number; a value that is not a number in any other marks a damaged table.
NOT_NUMBERS = {"run", "pos", "method", "status", "protocol", "stage", "absolute_beyond", "within_documents", "eval_id",
                "window_start", "normalisation", "variant", "task"}  # fmt: skip
NUMERIC = {c for columns in TABLE_COLUMNS.values() for c in columns} - NOT_NUMBERS
# Per table: the columns added after its first version, with the value an older table implies.
OPTIONAL = {
    "extrapolation.csv": ADDED_COLUMNS,
    "positions.csv": {"stage": "zero-shot"},
    "passkey.csv": {},
    "tasks.csv": {},
    CURVE: {},
}
# Read as text: a run named 2024, or an evaluation id such as 4160285e10 (hex), is not a number.
TEXT = {"run": str, "eval_id": str}
# Per table: what every version has and reading it needs; any other column of today's may be absent (empty).
REQUIRED = {
    "extrapolation.csv": ["pos", "train_context", "eval_context", "factor", "method", "ppl", "status"],
    "positions.csv": ["pos", "eval_context", "factor", "method", "bucket_start", "bucket_end", "tokens", "nll"],
    "passkey.csv": ["pos", "eval_context", "factor", "method", "variant", "trials", "accuracy", "key_nll", "status"],
    "tasks.csv": ["pos", "eval_context", "factor", "method", "task", "trials", "accuracy", "answer_nll", "status"],
    CURVE: [c for c in CURVE_COLUMNS if c not in UNSTATED],
}
# Per table: the cells that say which cell of the evaluation a row is, filled in every row of every version.
KEYED = {
    "extrapolation.csv": ["pos", "train_context", "eval_context", "factor", "method", "status"],
    "positions.csv": ["pos", "eval_context", "factor", "method", "bucket_start", "bucket_end"],
    "passkey.csv": ["pos", "eval_context", "factor", "method", "variant", "status"],
    "tasks.csv": ["pos", "eval_context", "factor", "method", "task", "status"],
    CURVE: ["step", "tokens", "task", "trials"],
}
# Per table: (lo, hi, whole numbers only) of a numeric column, a score empty only with no trial; only the
# learning curve, which no status guards (the evaluation tables' readers check their statuses).
SCORES = ("accuracy", "token_accuracy", "answer_nll")
RANGES = {
    CURVE: {"step": (0, MAX_STEPS, True), "tokens": (0, MAX_STEPS * MAX_CONTEXT, True), "trials": (0, MAX_STEPS, True),
            "accuracy": (0, 1, False), "token_accuracy": (0, 1, False), "answer_nll": (0, math.inf, False),
            "chance": (0, 1, False)},
}  # fmt: skip


def position_rows(row: dict, buckets, stage: str) -> list[dict]:
    """positions.csv rows of one scored cell: the mean NLL of each ``scoring.buckets`` bucket."""
    keys = {k: row[k] for k in KEYS}
    return [
        {**keys, "protocol": row["protocol"], "bucket_start": start, "bucket_end": end, "tokens": count,
         "nll": total / count, "stage": stage}
        for start, end, total, count in buckets
    ]  # fmt: skip


def read_table(path: Path, run_dir: Path | None = None) -> pd.DataFrame:
    """One of a run's tables, of any posx version, checked (columns, row widths, ``KEYED`` cells,
    numbers), with every column of today's (an older table's missing ones hold their implied value).
    A damaged table is one line naming the file and telling to evaluate ``run_dir`` again."""
    path = Path(path)
    name = path.name
    fix = curve_fix(path) if name == CURVE else refit(path.parent if run_dir is None else run_dir)
    text = _text(path, fix)
    _check_widths(path, text, fix)
    if text and not text.endswith("\n"):  # posx ends every line: a cut inside a cell or the header
        raise PosxError(f"{path} is damaged: its last line ends without a line break (was the file cut short?); {fix}")
    try:
        df = pd.read_csv(io.StringIO(text), dtype=TEXT)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise PosxError(f"{path} cannot be read as CSV ({exc.__class__.__name__}); {fix}") from None
    missing = [c for c in REQUIRED[name] if c not in df.columns]
    if missing:
        raise PosxError(f"{path} lacks the column(s) {', '.join(missing)}; it is not a posx table ({fix})")
    _check_keys(path, df, fix)
    df = df.reindex(columns=list(dict.fromkeys([*TABLE_COLUMNS[name], *df.columns])))
    for column, implied in OPTIONAL[name].items():  # per column: a string default on an all-empty float column
        if df[column].isna().any():
            df[column] = df[column].astype(object).where(df[column].notna(), implied)
    for column in NUMERIC.intersection(df.columns):
        values = pd.to_numeric(df[column], errors="coerce")
        wrong = values.isna() & df[column].notna()
        if wrong.any():
            raise PosxError(
                f"{path} is damaged: row {_first(wrong)} has a value that is not a number in column {column}; {fix}"
            )
        df[column] = values
    _check_ranges(path, df, RANGES.get(name, {}), fix)
    return df


def curve_fix(path: Path) -> str:
    """How to get past a damaged learning curve (nothing can score again the weights it measured)."""
    return (f"move {path.name} aside (a report then draws no learning curve for this run; a resumed run "
            "records one from its checkpoint on)")  # fmt: skip


def _check_ranges(path: Path, df: pd.DataFrame, ranges: dict, fix: str) -> None:
    """Each ranged column within its range, and a curve's steps and tokens increasing per task."""
    for column, (lo, hi, whole) in ranges.items():
        values = df[column]
        empty = values.isna() & ~((df["trials"] == 0) & (column in SCORES)) & (column not in UNSTATED)
        wrong = empty | (values.notna() & ~values.between(lo, hi))
        if whole:
            wrong |= values.notna() & (values != values.round())
        if wrong.any():
            value = df[column].iloc[_first(wrong) - 1]
            kind = "a whole number" if whole else "a number"
            raise PosxError(
                f"{path} is damaged: row {_first(wrong)} has {column}={value} where {kind} in [{lo:g}, {hi:g}] "
                f"belongs; {fix}"
            )
    if "step" in ranges:
        by_task = df.groupby("task", sort=False)
        back = (by_task["step"].diff() <= 0) | (by_task["tokens"].diff() < 0)
        if back.any():
            raise PosxError(f"{path} is damaged: row {_first(back)} goes back in step or tokens for its task; {fix}")


def refit(run_dir: Path) -> str:
    """How to replace a damaged table: evaluate again with ``--force`` (the stored one may be damaged)."""
    return f"evaluate the run again: posx eval-extrapolate {display_name(run_dir)} --force"


def _text(path: Path, fix: str) -> str:
    try:
        return files.read_regular(path).decode("utf-8")  # a FIFO or a device: refused, never waited on
    except (UnicodeDecodeError, OSError) as exc:
        raise PosxError(f"{path} cannot be read as CSV ({exc.__class__.__name__}); {fix}") from None


def ends_a_line(path: Path) -> bool:
    """Whether ``path`` is empty or ends with a line break, as posx's tables do (False if unreadable)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            return size == 0 or (f.seek(size - 1) >= 0 and f.read(1) == b"\n")
    except OSError:
        return False


def _check_widths(path: Path, text: str, fix: str) -> None:
    """Every row as wide as the header (pandas would pad a row cut short with empty cells)."""
    reader = csv.reader(io.StringIO(text))
    rows = (row for row in reader if row)  # pandas skips blank lines too
    number = 0
    try:
        header = next(rows, None)
        twice = [c for i, c in enumerate(header or []) if c in header[:i]]
        if twice:
            raise PosxError(f"{path} is damaged: its header names the column {twice[0]!r} twice; {fix}")
        for number, row in enumerate(rows, start=1):
            if len(row) != len(header):
                raise PosxError(
                    f"{path} is damaged: row {number} has {len(row)} cells where its header has {len(header)} "
                    f"(was the file cut short?); {fix}"
                )
    except csv.Error:  # a cell past csv's limit (128 KiB): posx writes none
        raise PosxError(
            f"{path} is damaged: line {reader.line_num} has a cell of over {csv.field_size_limit() // 1024} KiB "
            f"(no posx table has one); {fix}"
        ) from None


def _check_keys(path: Path, df: pd.DataFrame, fix: str) -> None:
    """Every row names its cell (``KEYED``): a row without one would merge or plot as no method."""
    for column in KEYED[path.name]:
        empty = df[column].isna()
        if empty.any():
            raise PosxError(f"{path} is damaged: row {_first(empty)} has no {column}; {fix}")


def _first(flags: pd.Series) -> int:
    """The 1-based data row of the first true flag."""
    return int(flags.to_numpy().argmax()) + 1


def write_tables(result: Evaluation, run_dir: Path) -> list[Path]:
    """Every table of ``result``, each replaced atomically; one this evaluation lacks is removed, so no
    table describes another evaluation than its neighbours."""
    df = result.table
    with files.atomic_path(run_dir / "extrapolation.csv") as tmp:
        df.to_csv(tmp, index=False)
    files.write_text(run_dir / "extrapolation.md", df.to_markdown(index=False, floatfmt=".4g") + "\n")
    written = [run_dir / "extrapolation.csv", run_dir / "extrapolation.md"]
    for name, rows, columns in (
        ("positions.csv", result.positions, POSITION_COLUMNS),
        ("passkey.csv", result.passkey, PASSKEY_COLUMNS),
        ("tasks.csv", result.tasks, TASK_COLUMNS),
    ):
        if rows:
            with files.atomic_path(run_dir / name) as tmp:
                pd.DataFrame(rows, columns=columns).to_csv(tmp, index=False)
            written.append(run_dir / name)
        else:
            (run_dir / name).unlink(missing_ok=True)
    return written


def left_out(settings: dict | None, extended: bool) -> set[str]:
    """The tables left out by design (passkey.csv: an extended run, or the passkey off)."""
    pk = (settings or {}).get("passkey")
    off = isinstance(pk, dict) and (pk.get("enabled") is False or pk.get("variants") == [])
    return {"passkey.csv"} if extended or off else set()


def rich_table(df: pd.DataFrame, title: str) -> Table:
    """Methods (and stages) by rows, factors by columns, perplexity or status in the cells."""
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
            cells.append(f"{r['ppl']:.3f}{_half_width(r)}" if r["status"] == "ok" else f"[dim]{escape(r['status'])}[/]")
        table.add_row(escape(str(method)), *cells)
    return table


def _half_width(row) -> str:
    """`` ±h``: half the width of the row's 95% interval (empty when it has none)."""
    lo, hi = row.get("ppl_lo", math.nan), row.get("ppl_hi", math.nan)
    return f" [dim]±{(hi - lo) / 2:.3f}[/]" if math.isfinite(lo) and math.isfinite(hi) else ""


def passkey_table(pk: pd.DataFrame, title: str, by: str = "variant") -> Table:
    """Method x ``by`` (passkey variant or task) by rows, factors by columns, exact answers in the cells."""
    factors = sorted(pk["factor"].unique())
    table = Table("method", by, *(Column(f"{f:g}x", justify="right") for f in factors), title=title)
    for (method, variant), group in pk.groupby(["method", by], sort=False):
        if (group["status"] == "not_applicable").all():
            continue  # a RoPE method on a model without RoPE: the perplexity table says so
        cells = []
        for f in factors:
            g = group[group["factor"] == f]
            ok = g[g["status"] == "ok"]
            if ok.empty:
                cells.append(f"[dim]{escape(str(g['status'].iloc[0]))}[/]")
            else:
                hits = (ok["accuracy"] * ok["trials"]).sum()
                cells.append(f"{hits:.0f}/{ok['trials'].sum()}")
        table.add_row(escape(str(method)), escape(str(variant)), *cells)
    for task, group in pk.groupby(by, sort=False) if by == "task" else ():  # the suite: chance per task and length
        level = group.groupby("factor")["chance"].mean().reindex(factors)  # NaN: a table from before it was kept
        table.add_row("[dim]chance[/]", escape(str(task)), *(f"[dim]{'–' if v != v else f'{v:.1%}'}[/]" for v in level))
    return table
