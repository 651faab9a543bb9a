"""``posx runs`` and ``posx compare``: tables read from run directories. No torch, no matplotlib
(a test holds it to that); ``posx report``, which draws, is ``posx.cli.reporting``."""

from __future__ import annotations

import math
from pathlib import Path

from rich.console import Console

from posx.cli.exits import user_errors
from posx.core import files
from posx.core.console import new_console, say
from posx.core.errors import PosxError
from posx.report.compare import collection, seed_compare
from posx.report.store import selection
from posx.runs.paths import resolve_run


def runs(path: Path, csv: str | None) -> None:
    """``posx runs [PATH]``: the table, and the CSV if asked for ('-': stdout only)."""
    with user_errors():
        _check_csv(csv)
        df = collection.list_runs(path)
        console = new_console()
        if csv != "-":
            console.print(collection.runs_table(df, f"{len(df)} run(s) under {path}"))
            diverged = df.loc[df["val_ppl"] == math.inf, "name"]
            if len(diverged):
                say(console, "note", "yellow", f"val_ppl inf: the last validation loss of {', '.join(diverged)} "
                    "is past what exp can hold (the run diverged)")  # fmt: skip
        if csv is not None:
            _write_csv(df, csv, console)


def compare(run_args: list[str], csv: str | None, results_dir: Path, where: list[str] | None = None) -> None:
    """``posx compare RUN RUN...``: the table, and the CSV if asked for ('-': stdout only)."""
    with user_errors():
        _check_csv(csv)
        conditions = selection.parse(where)
        dirs = collection.select([resolve_run(r, results_dir) for r in run_args], conditions)
        if len(dirs) >= 2:  # fewer: compare's own refusal
            dirs, damaged = collection.readable(dirs)
            for why in damaged.values():  # on stderr: --csv - writes the table to stdout
                say(new_console(stderr=True), "left out", "yellow", f"a damaged run: {why}")
        df, names, notes = collection.compare(dirs)
        console = new_console()
        if csv != "-":
            console.print(collection.compare_table(df, names))
            for note in notes:
                say(console, "note", "yellow", note)
            groups = seed_compare.seed_groups(dirs, names)  # runs of equal settings but the seed
            diffs = seed_compare.differences(df, groups)
            if not diffs.empty:
                console.print(seed_compare.table(diffs, groups))
        if csv is not None:
            _write_csv(df, csv, console)


def _check_csv(csv: str | None) -> None:
    """--csv checked before any work: '-' (stdout), or a new file."""
    if csv == "":
        raise PosxError("--csv needs a file name (or - for stdout)")
    if csv is not None and csv != "-":
        files.new_file(csv, "--csv")


def _write_csv(df, csv: str, console: Console) -> None:
    if csv == "-":
        print(df.to_csv(index=False), end="")
        return
    files.write_new_text(Path(csv), df.to_csv(index=False))  # checked by _check_csv; a name taken since fails here
    console.print(f"wrote {csv}", markup=False, highlight=False)
