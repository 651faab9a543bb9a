"""What the commands that only read results do: ``posx runs``, ``posx compare`` and ``posx report``.

They read run directories (``posx.runs.paths``, the digests, the tables) and never build a model,
so this module imports no torch (a test holds it to that): a listing answers in well under a
second plus the time to read the runs, where importing torch alone takes about 2 s on a small CPU.
``posx.cli`` loads it only when one of these commands runs.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from posx.core import files, launcher
from posx.core.console import new_console
from posx.core.errors import PosxError
from posx.exits import user_errors
from posx.report import collection
from posx.report.summary import report as build_report
from posx.runs.paths import resolve_run


def report(paths: list[Path], **options) -> None:
    """``posx report PATHS``: options are ``posx.report.summary.report``'s keywords."""
    with user_errors():
        launcher.single_process("posx report")
        build_report(paths, console=new_console(), **options)


def runs(path: Path, csv: str | None) -> None:
    """``posx runs [PATH]``: the table, and the CSV if asked for ('-': stdout only)."""
    with user_errors():
        df = collection.list_runs(path)
        console = new_console()
        if csv != "-":
            console.print(collection.runs_table(df, f"{len(df)} run(s) under {path}"))
        if csv is not None:
            _write_csv(df, csv, console)


def compare(run_args: list[str], csv: str | None, results_dir: Path) -> None:
    """``posx compare RUN RUN...``: the table, and the CSV if asked for ('-': stdout only)."""
    with user_errors():
        dirs = [resolve_run(r, results_dir) for r in run_args]
        df, names = collection.compare(dirs)
        console = new_console()
        if csv != "-":
            console.print(collection.compare_table(df, names))
        if csv is not None:
            _write_csv(df, csv, console)


def _write_csv(df, csv: str, console: Console) -> None:
    if csv == "-":
        print(df.to_csv(index=False), end="")
        return
    path = Path(csv)
    if path.exists():
        raise PosxError(f"{path} already exists; choose another --csv (nothing is overwritten)")
    files.write_text(path, df.to_csv(index=False))
    console.print(f"wrote {path}", markup=False, highlight=False)
