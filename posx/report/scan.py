"""Every run's tables in one scan: DuckDB reads all the ``positions.csv`` (say) of a report at once,
gives each row its run directory (the file's folder), and writes the rows, in today's columns,
to one Parquet file.

The runs' tables come from several posx versions, so files are read in batches of one header
(each run's digest records its tables' headers, ``posx.report.digest``): each batch is one
``read_csv`` with the columns named and typed, no sniffing per file. A column a version lacks
holds the value it implies (``posx.eval.tables.OPTIONAL``), as ``read_table`` does. A table
that lacks a column reading needs, has a row cut short, holds a non-number where a number
belongs or a row without a cell that names it (``posx.eval.tables.KEYED``) is a one-line
PosxError naming the file (``read_table``'s, found by reading the suspect files one by one).
"""

from __future__ import annotations

import math
from pathlib import Path

import duckdb

from posx.core.errors import PosxError
from posx.eval.tables import KEYED, NUMERIC, OPTIONAL, REQUIRED, TABLE_COLUMNS, ends_a_line, read_table, refit
from posx.report.literal import Links, sql_text

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
    """Today's columns of table ``name`` from files with ``header``, and ``run``: the file's folder
    (DuckDB reads each file through its link, ``posx.report.literal``; ``scan_links`` maps it back)."""
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


def _check(name: str, header: tuple[str, ...], paths: list[Path]) -> None:
    """A batch lacking a column reading needs, or a file of it cut inside a line (the engine reads a
    cut header as a table of no rows): read_table's error for the first such file."""
    if name == METRICS:
        return
    if any(c not in header for c in REQUIRED[name]):
        read_table(paths[0])
    for path in paths:
        if not ends_a_line(path):
            read_table(path)


def _find_damage(name: str, paths: list[Path], exc: Exception) -> PosxError:
    """The batch did not convert: the first file read_table refuses, else the engine's message."""
    if name != METRICS:
        for path in paths:
            read_table(path)  # raises the one-line error of the damaged file
    first = str(exc).splitlines()[0]
    return PosxError(f"{name} of {len(paths)} run(s) cannot be read ({first}); re-run posx eval-extrapolate")


def empty(name: str) -> str:
    """A query of no rows with the columns of ``name``."""
    columns = ", ".join(f"NULL::{sql_type(c)} AS {_quoted(c)}" for c in COLUMNS[name])
    return f"SELECT NULL::VARCHAR AS run, {columns} WHERE false"


def scan(con: duckdb.DuckDBPyConnection, name: str, batches: dict[tuple, list[Path]], target: Path) -> None:
    """Write table ``name`` of every file in ``batches`` (header -> files) to the Parquet file ``target``."""
    if not batches:
        con.execute(f"COPY ({empty(name)}) TO {sql_text(target)} (FORMAT parquet)")
        return
    links = Links()
    try:
        _scan(con, name, batches, target, links)
    finally:
        con.execute("DROP VIEW IF EXISTS scan_links")
        links.close()


def _scan(con, name: str, batches: dict[tuple, list[Path]], target: Path, links: Links) -> None:
    parts = []
    for header, paths in batches.items():
        _check(name, header, paths)
        parts.append(_select(name, header, paths, links))
    frame = links.frame()
    con.register("scan_links", frame.assign(run=[str(Path(p).parent) for p in frame["origin"]]))
    try:
        con.execute(f"COPY ({' UNION ALL '.join(parts)}) TO {sql_text(target)} (FORMAT parquet)")
    except duckdb.Error as exc:
        for header, paths in batches.items():
            try:
                con.execute(f"SELECT * FROM ({_select(name, header, paths, links)})").fetchall()
            except duckdb.Error as one:
                raise _find_damage(name, paths, one) from None
        raise _find_damage(name, [p for paths in batches.values() for p in paths], exc) from None
    finally:
        con.unregister("scan_links")
    _check_keys(con, name, target)


def _check_keys(con: duckdb.DuckDBPyConnection, name: str, target: Path) -> None:
    """A row with an empty cell of ``KEYED`` (read as NULL, which the conversion lets by):
    read_table's error for its file, as every other reader of the table refuses it."""
    if name == METRICS:
        return
    where = " OR ".join(f"{_quoted(c)} IS NULL" for c in KEYED[name])
    links = Links()
    try:
        found = con.execute(f"SELECT run FROM read_parquet({links.listed([target])}) WHERE {where} LIMIT 1").fetchone()
    finally:
        links.close()
    if found is not None:
        path = Path(found[0]) / name
        read_table(path)  # raises the one-line error of the damaged file
        raise PosxError(f"{path} has a row without its {' or '.join(KEYED[name])}; {refit(path.parent)}")
