"""Every run's tables in one scan: DuckDB reads all the ``positions.csv`` (say) of a report at once,
in batches of one header (typed, no sniffing), gives each row its run folder and writes today's
columns to one Parquet file; a column an older version lacks holds what it implies
(``posx.eval.tables.OPTIONAL``). A damaged file (a column missing, a row cut short, a non-number, a
row without its ``KEYED`` cells) leaves its run out with ``read_table``'s one-line error, and the
scan goes on: one damaged run never stops a report of the others.
"""

from __future__ import annotations

import math
from pathlib import Path

import duckdb

from posx.core.errors import PosxError
from posx.eval.tables import KEYED, NUMERIC, OPTIONAL, REQUIRED, TABLE_COLUMNS, ends_a_line, read_table, refit
from posx.report.store.literal import Links, sql_text

METRICS = "metrics.csv"
METRIC_COLUMNS = ["step", "train_loss", "val_loss"]  # what the report draws of metrics.csv
# Numeric columns that hold counts and lengths: read as integers, so they print as posx wrote them.
INTEGER = {"train_context", "eval_context", "bucket_start", "bucket_end", "trials", "step"}  # depths are fractions
# A table's own ``run`` column (the run's name) gives way to the run's folder, which the scan adds
# as ``run``: one column of that name, which the views and queries join on.
COLUMNS = {
    name: [c for c in columns if c != "run"] for name, columns in {**TABLE_COLUMNS, METRICS: METRIC_COLUMNS}.items()
}
MAX_LINE = 1 << 17  # bytes in one line of a table: posx writes far shorter ones; a longer one is damage


def sql_type(column: str) -> str:
    if column in INTEGER:
        return "BIGINT"
    return "DOUBLE" if column in NUMERIC or column in METRIC_COLUMNS else "VARCHAR"


def _literal(value, column: str) -> str:
    """A SQL literal of the value an older table implies for ``column``."""
    if isinstance(value, float) and math.isnan(value):
        return f"NULL::{sql_type(column)}"
    if isinstance(value, bool) or isinstance(value, str):
        return "'" + str(value).replace("'", "''") + "'"
    return f"{value}::{sql_type(column)}"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _select(name: str, header: tuple[str, ...], paths: list[Path], links: Links) -> str:
    """Today's columns of table ``name`` from files with ``header``, and ``run``: the file's folder."""
    implied = OPTIONAL.get(name, {})
    exprs = ["l.run AS run"]
    for column in COLUMNS[name]:
        if column in header:
            value = f"t.{_quoted(column)}"
            if column in implied:
                value = f"COALESCE({value}, {_literal(implied[column], column)})"
        else:
            value = _literal(implied[column], column) if column in implied else f"NULL::{sql_type(column)}"
        exprs.append(f"{value} AS {_quoted(column)}")
    columns = ", ".join(f"'{c.replace(chr(39), chr(39) * 2)}': '{sql_type(c)}'" for c in header)
    lenient = ", ignore_errors=true" if name == METRICS else ""  # a damaged metrics.csv costs the training plot only
    return (
        f"SELECT {', '.join(exprs)} FROM read_csv({links.listed(paths)}, header=true, auto_detect=false, "
        f"max_line_size={MAX_LINE}, filename=true, columns={{{columns}}}{lenient}) t "
        "JOIN scan_links l ON t.filename = l.link"
    )


def refusal(path: Path) -> str | None:
    """read_table's one-line error for the file (what is damaged, how to fix it); None when it reads."""
    try:
        read_table(path)
    except PosxError as exc:
        return str(exc)
    return None


def _reason(name: str, path: Path) -> str | None:
    return None if name == METRICS else refusal(path)


def _check(name: str, header: tuple[str, ...], paths: list[Path], links: Links) -> dict[str, str]:
    """run folder -> error for the batch's files that are not regular, lack a column, or are cut short."""
    found = {}
    for path in paths:
        try:
            links.link(path)
        except PosxError as exc:
            found[str(path.parent)] = str(exc)
    if name == METRICS:
        return found
    suspect = paths if any(c not in header for c in REQUIRED[name]) else [p for p in paths if not ends_a_line(p)]
    for path in suspect:
        reason = _reason(name, path)
        if reason is not None:
            found.setdefault(str(path.parent), reason)
    return found


def _find_damage(con, name: str, header: tuple[str, ...], paths: list[Path], links: Links) -> dict[str, str]:
    """run folder -> why, for each file read_table refuses or the engine cannot read alone."""
    found = {}
    for path in paths:
        reason = _reason(name, path)
        if reason is None:
            try:
                con.execute(f"SELECT * FROM ({_select(name, header, [path], links)})").fetchall()
            except duckdb.Error as exc:
                first = str(exc).splitlines()[0]
                reason = f"{path} cannot be read ({first}); re-run posx eval-extrapolate"
        if reason is not None:
            found[str(path.parent)] = reason
    return found


def empty(name: str) -> str:
    """A query of no rows with the columns of ``name``."""
    columns = ", ".join(f"NULL::{sql_type(c)} AS {_quoted(c)}" for c in COLUMNS[name])
    return f"SELECT NULL::VARCHAR AS run, {columns} WHERE false"


def scan(con: duckdb.DuckDBPyConnection, name: str, batches: dict[tuple, list[Path]], target: Path) -> dict[str, str]:
    """Table ``name`` of ``batches`` (header -> files) into ``target``; returns damaged run -> error."""
    refused: dict[str, str] = {}
    while True:
        left = {h: [p for p in ps if str(p.parent) not in refused] for h, ps in batches.items()}
        left = {h: ps for h, ps in left.items() if ps}
        if not left:
            con.execute(f"COPY ({empty(name)}) TO {sql_text(target)} (FORMAT parquet)")
            return refused
        links = Links()
        try:
            found = _scan(con, name, left, target, links)
        finally:
            con.execute("DROP VIEW IF EXISTS scan_links")
            links.close()
        if not found:
            return refused
        refused.update(found)


def _scan(con, name: str, batches: dict[tuple, list[Path]], target: Path, links: Links) -> dict[str, str]:
    """One try at writing ``target``; returns the damaged files' runs found on the way (none: written)."""
    found = {}
    for header, paths in batches.items():
        found.update(_check(name, header, paths, links))
    if found:
        return found
    parts = [_select(name, header, paths, links) for header, paths in batches.items()]
    frame = links.frame()
    con.register("scan_links", frame.assign(run=[str(Path(p).parent) for p in frame["origin"]]))
    try:
        con.execute(f"COPY ({' UNION ALL '.join(parts)}) TO {sql_text(target)} (FORMAT parquet)")
    except duckdb.Error as exc:
        for header, paths in batches.items():
            try:
                con.execute(f"SELECT * FROM ({_select(name, header, paths, links)})").fetchall()
            except duckdb.Error:
                found.update(_find_damage(con, name, header, paths, links))
        if not found:  # no one file to blame: the engine's message
            first = str(exc).splitlines()[0]
            raise PosxError(f"{name} cannot be read ({first}); re-run posx eval-extrapolate") from None
        return found
    finally:
        con.unregister("scan_links")
    return _check_keys(con, name, target)


def _check_keys(con: duckdb.DuckDBPyConnection, name: str, target: Path) -> dict[str, str]:
    """The runs with an empty ``KEYED`` cell (read as NULL), each with read_table's error."""
    if name == METRICS:
        return {}
    where = " OR ".join(f"{_quoted(c)} IS NULL" for c in KEYED[name])
    links = Links()
    try:
        runs = con.execute(f"SELECT DISTINCT run FROM read_parquet({links.listed([target])}) WHERE {where}").fetchall()
    finally:
        links.close()
    found = {}
    for (run,) in runs:
        path = Path(run) / name
        keys = " or ".join(KEYED[name])
        found[run] = _reason(name, path) or f"{path} has a row without its {keys}; {refit(path.parent)}"
    return found
