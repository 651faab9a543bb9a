"""The report cache in ``.cache/`` beside the reports: shards of what earlier reports read of each
run (digests and table rows in Parquet), so a report over a sweep that grew by ten runs reads ten.
A shard is built aside, renamed into place whole and never changed: reports on many machines share
the folder without a lock. An entry counts while its run's stamp is unchanged (the newest shard
wins); nothing is trusted unchecked (``SUMS``, columns and types, each digest): a shard that fails
is removed and its runs read again. See docs/evaluation.md, "Sweeps of thousands of runs".
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pandas as pd

from posx.core import fieldcheck, files
from posx.core.errors import PosxError
from posx.report.store import digest as digests
from posx.report.store.literal import Links, sql_text
from posx.report.store.scan import COLUMNS, METRICS, empty, scan, sql_type

CACHE = ".cache"
MAX_SHARDS = 16
SUMS = "sums.json"  # each shard file's sha256: a shard whose files changed after it was written is removed
GRACE = 600  # seconds a merged shard stays before it is removed (no report takes that long)
TABLES = {  # file -> view
    "extrapolation.csv": "ext",
    "positions.csv": "pos",
    "passkey.csv": "pk",
    "tasks.csv": "tasks",
    METRICS: "met",
}
TAGGED = ("positions.csv", "passkey.csv")  # tables whose view adds the evaluation's absolute_beyond


def no_rows(table: str) -> str:
    """A query of no rows with the columns of ``table``'s view."""
    return f"SELECT *, NULL::VARCHAR AS absolute_beyond FROM ({empty(table)})" if table in TAGGED else empty(table)


@dataclass
class Gathered:
    """Every run's digest, and a DuckDB connection with a view per table (``TABLES``) of every run's rows."""

    digests: dict  # run path -> digest
    con: duckdb.DuckDBPyConnection
    cache: Path  # the cache folder
    pending: Path | None = None  # the new shard until ``keep`` or ``discard``
    links: Links | None = None  # the links the views read the shards through (``posx.report.store.literal``)
    stale: dict = field(default_factory=dict)  # run -> its digest, to write back once the report is published
    damaged: dict = field(default_factory=dict)  # run -> the one-line error of its damaged file: left out


def connect() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = false")  # lets the engine stream: less memory
    return con


def shard_name() -> str:
    """A new shard's name: its time to the ns (names sort as written), then the process and a random tag."""
    ns = time.time_ns()
    second = time.strftime("%Y%m%d-%H%M%S", time.localtime(ns // 10**9))
    return f"{second}.{ns % 10**9:09d}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _shards(cache: Path, complete: bool = True) -> list[Path]:
    """The cache's shards, oldest first: ``complete`` ones, or those of an older posx."""
    if not cache.is_dir():
        return []
    found = [p for p in cache.iterdir() if not p.name.startswith(".") and (p / "digests.parquet").is_file()]
    return sorted(p for p in found if _complete(p) == complete)


def _complete(shard: Path) -> bool:
    return (shard / SUMS).is_file() and all((shard / table.replace(".csv", ".parquet")).is_file() for table in TABLES)


def _sum(shard: Path) -> None:
    """Record the sha256 of each of the shard's files (``SUMS``), written last."""
    sums = {parquet: files.sha256_file(shard / parquet) for parquet in EXPECTED}
    (shard / SUMS).write_text(json.dumps(sums, sort_keys=True), encoding="utf-8")


def _intact(shard: Path) -> None:
    """Raise PosxError unless each of the shard's files is a regular file of the sha256 ``SUMS`` records."""
    try:
        sums = json.loads(files.read_regular(shard / SUMS).decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError):
        raise PosxError(f"{shard / SUMS} is damaged") from None
    if not isinstance(sums, dict) or set(sums) != set(EXPECTED):
        raise PosxError(f"{shard / SUMS} is damaged")
    for parquet, sha in sums.items():
        if files.sha256_file(files.regular(shard / parquet)) != sha:
            raise PosxError(f"{shard / parquet} is not the file the shard was written with")


def _cached(con, shards: list[Path], stamps: dict[str, str]) -> dict[str, tuple[dict, str]]:
    """run -> (digest, shard) of each run whose current stamp a shard holds (the newest wins), its
    digest ``digest.trusted``; any other run is read again."""
    found: dict[str, tuple[dict, str]] = {}
    for shard in shards:  # oldest first: a newer shard's entry replaces an older one's
        for run, stamp, text in _entries(con, shard):
            digest = _parsed(text)
            if digest is not None and stamps.get(run) == stamp == digest["stamp"]:
                found[run] = (digest, str(shard))
    return found


def _parsed(text) -> dict | None:
    """A cached digest, read with the depth and size limits of every record; None when it is not one."""
    try:
        digest = fieldcheck.load_json(text, "a cached digest", "") if isinstance(text, str) else None
    except (PosxError, json.JSONDecodeError, ValueError):
        return None
    return digest if digests.trusted(digest) else None


EXPECTED = {  # parquet file -> {column: type} that each shard's file must hold
    "digests.parquet": {"run": "VARCHAR", "stamp": "VARCHAR", "digest": "VARCHAR"},
    **{t.replace(".csv", ".parquet"): {"run": "VARCHAR", **{c: sql_type(c) for c in COLUMNS[t]}} for t in TABLES},
}


def _entries(con, shard: Path) -> list[tuple]:
    """The shard's (run, stamp, digest) rows; a shard whose files lack their columns is removed."""
    links = Links()
    try:
        _intact(shard)
        for parquet, expected in EXPECTED.items():
            listed = links.listed([shard / parquet])
            described = con.execute(f"DESCRIBE SELECT * FROM read_parquet({listed})").fetchall()
            columns = {row[0]: row[1] for row in reversed(described)}  # a name's first type
            if any(columns.get(c) != kind for c, kind in expected.items()):
                raise PosxError(f"{shard / parquet} does not hold the columns of a cache shard")
            con.execute(f"SELECT count(*) FROM read_parquet({listed})").fetchall()
        listed = links.listed([shard / "digests.parquet"])
        return con.execute(f"SELECT run, stamp, digest FROM read_parquet({listed})").fetchall()
    except (duckdb.Error, PosxError):
        if not shard.is_symlink():
            shutil.rmtree(shard, ignore_errors=True)
        return []
    finally:
        links.close()


def _batches(fresh: dict[str, dict], name: str) -> dict[tuple, list[Path]]:
    """The runs' files of table ``name`` by their own header, so no digest can shift a column."""
    batches: dict[tuple, list[Path]] = {}
    for run in fresh:
        path = Path(run) / name
        if path.is_file():
            batches.setdefault(tuple(digests.header(path)), []).append(path)
    return batches


def _write_shard(con, fresh: dict[str, dict], stamps: dict[str, str]) -> tuple[Path | None, dict[str, str]]:
    """(a new shard of the ``fresh`` runs in a temporary folder, None if all damaged; the damaged runs)."""
    staging = Path(tempfile.mkdtemp(prefix="posx-shard-"))
    try:
        refused: dict[str, str] = {}
        for table in TABLES:
            found = scan(con, table, _batches(fresh, table), staging / table.replace(".csv", ".parquet"))
            refused.update({run: reason for run, reason in found.items() if run not in refused})
        if refused:
            _drop(con, staging, refused)
        kept = [run for run in fresh if run not in refused]
        frame = pd.DataFrame(
            {"run": kept, "stamp": [stamps[r] for r in kept], "digest": [json.dumps(fresh[r]) for r in kept]}
        )
        con.register("fresh_digests", frame)
        con.execute(f"COPY fresh_digests TO {sql_text(staging / 'digests.parquet')} (FORMAT parquet)")
        con.unregister("fresh_digests")
        _sum(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if not kept:
        shutil.rmtree(staging, ignore_errors=True)
        return None, refused
    return staging, refused


def _drop(con, staging: Path, runs: dict[str, str]) -> None:
    """Remove the rows of ``runs`` from each table of the shard in ``staging`` (a run refused by one
    table has no row in any)."""
    con.register("refused_runs", pd.DataFrame({"run": list(runs)}))
    links = Links()
    try:
        for table in TABLES:
            target = staging / table.replace(".csv", ".parquet")
            kept = staging / f".{target.name}"
            con.execute(
                f"COPY (SELECT * FROM read_parquet({links.listed([target])}) WHERE run NOT IN "
                f"(SELECT run FROM refused_runs)) TO {sql_text(kept)} (FORMAT parquet)"
            )
            os.replace(kept, target)
    finally:
        links.close()
        con.unregister("refused_runs")


def keep(gathered: Gathered) -> None:
    """The report is published: its stale digests are written back, its shard joins, shards merge.
    A report that fails or is refused changes neither (``discard``)."""
    for run, digest in gathered.stale.items():
        digests.keep(Path(run), digest)
    gathered.stale = {}
    if gathered.pending is None:
        discard(gathered)
        return
    name = shard_name()
    try:
        cache = files.real_dir(gathered.cache, "the report cache")
        staging = cache / f".{name}.tmp"
        try:
            shutil.copytree(gathered.pending, staging)
            os.rename(staging, cache / name)
            files.fsync_dir(cache)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        discard(gathered)
    compact(gathered.con, cache)


def discard(gathered: Gathered) -> None:
    """The new shard of a report that was not published goes."""
    if gathered.pending is not None:
        shutil.rmtree(gathered.pending, ignore_errors=True)
        gathered.pending = None
    if gathered.links is not None:
        gathered.links.close()
        gathered.links = None
    gathered.stale = {}


def _views(con, live: dict[str, str], found: dict[str, dict], links: Links) -> None:
    """One view per table: each run's rows from the shard its entry counts in, through ``links``;
    ``TAGGED`` rows carry the ``absolute_beyond`` of the evaluation that wrote them."""
    beyond = [str(found[run]["eval"].get("eval.absolute_beyond", "none")) for run in live]
    shards = sorted(set(live.values()))
    listed = {t: links.listed([Path(s) / t.replace(".csv", ".parquet") for s in shards]) for t in TABLES}
    frame = links.frame()
    con.register("shard_links", frame.assign(shard=[str(Path(p).parent) for p in frame["origin"]]))
    con.register("live", pd.DataFrame({"run": list(live), "shard": list(live.values()), "beyond": beyond}))
    for table, view in TABLES.items():
        if not shards:
            con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS {no_rows(table)}")
            continue
        columns = ", ".join(f't."{c}"' for c in COLUMNS[table])
        if table in TAGGED:
            columns += ", l.beyond AS absolute_beyond"
        con.execute(
            f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT t.run, {columns} "
            f"FROM read_parquet({listed[table]}, filename=true) t JOIN shard_links s ON t.filename = s.link "
            "JOIN live l ON t.run = l.run AND s.shard = l.shard"
        )


def gather(run_dirs: list[Path], cache: Path, tries: int = 2) -> Gathered:
    """Every run's digest and tables, from the cache where it holds the run's current stamp, else
    read in one scan into a new shard. A run with a file posx refuses (``digest.refusal``, the scan)
    is left out (``damaged``: run -> the one-line error) and never cached."""
    # Every path absolute without ``..``, as the links spell them: however a run is given, it meets its entries.
    spelled = {os.path.abspath(p): p for p in run_dirs}
    cache = Path(os.path.abspath(cache))
    stamps = {run: digests.stamp(Path(run)) for run in spelled}
    con = connect()
    try:
        known = _cached(con, _shards(cache), stamps)
        resolved = {run: digests.resolve(Path(run), stamps[run]) for run in stamps if run not in known}
        stale = {run: digest for run, (digest, old) in resolved.items() if old}
        refusals = {run: digests.refusal(Path(run), digest) for run, (digest, _) in resolved.items()}
        damaged = {run: why for run, why in refusals.items() if why is not None}  # before the scan
        fresh = {run: digest for run, (digest, _) in resolved.items() if run not in damaged}
        live = {run: shard for run, (_, shard) in known.items()}
        pending, refused = _write_shard(con, fresh, stamps) if fresh else (None, {})
        damaged.update(refused)
        fresh = {run: digest for run, digest in fresh.items() if run not in refused}
        live.update(dict.fromkeys(fresh, str(pending)))
        found = {**{run: d for run, (d, _) in known.items()}, **fresh}
        links = Links()
        try:
            _views(con, live, found, links)
        except BaseException:
            links.close()
            if pending is not None:
                shutil.rmtree(pending, ignore_errors=True)
            raise
        left_out = {Path(spelled[run]): damaged[run] for run in stamps if run in damaged}
        kept = {Path(spelled[run]): found[run] for run in stamps if run in found}
        return Gathered(kept, con, cache, pending, links, stale, left_out)
    except duckdb.IOException:
        if tries <= 1:
            raise
        return gather(run_dirs, cache, tries - 1)  # a shard went away while listed (merged): list again


def compact(con, cache: Path) -> None:
    """Past MAX_SHARDS shards: one of each run's newest entry, the others removed (and older posx's)."""
    _remove_old(_shards(cache, complete=False))
    shards = _shards(cache)
    if len(shards) <= MAX_SHARDS:
        return
    name = shard_name()
    staging = cache / f".{name}.tmp"
    staging.mkdir()
    links = Links()
    try:
        parquets = ("digests.parquet", *(t.replace(".csv", ".parquet") for t in TABLES))
        sources = {parquet: links.listed([s / parquet for s in shards]) for parquet in parquets}
        frame = links.frame()
        con.register("shard_links", frame.assign(shard=[str(Path(p).parent) for p in frame["origin"]]))
        newest = con.execute(
            f"SELECT t.run, max(s.shard) FROM read_parquet({sources['digests.parquet']}, filename=true) t "
            "JOIN shard_links s ON t.filename = s.link GROUP BY t.run"
        ).fetchall()
        con.register("newest", pd.DataFrame(newest, columns=["run", "shard"]))
        for parquet in parquets:
            con.execute(
                f"COPY (SELECT t.* EXCLUDE (filename) FROM read_parquet({sources[parquet]}, filename=true) t "
                "JOIN shard_links s ON t.filename = s.link JOIN newest n ON t.run = n.run AND s.shard = n.shard) "
                f"TO {sql_text(staging / parquet)} (FORMAT parquet)"
            )
        _sum(staging)
        os.rename(staging, cache / name)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        links.close()
    _remove_old(shards)


def _remove_old(shards: list[Path]) -> None:
    """Remove ``shards`` older than GRACE (a younger one may be in use by a report now: it stays)."""
    for shard in shards:
        if time.time() - shard.stat().st_mtime > GRACE:
            shutil.rmtree(shard, ignore_errors=True)
