"""What a report reads of each run: its seed, its identity and its tables.

``--evaluations current`` (default) reads a run through its digest and its tables through the
report cache; ``all`` reads here, one run at a time, every evaluation kept under ``eval/<id>/`` for
the run's current weights, stacked (the newest wins a cell scored twice; the report says so). An
extended run whose parent directory is there holds the parent's identity and counts as replicate
(parent's seed, its seed), its ``parent`` reading ``<encoding>-T<T>``. See docs/evaluation.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from posx.core.errors import PosxError
from posx.eval import history
from posx.eval.tables import left_out, read_table
from posx.report.store import cache
from posx.report.store import digest as digests
from posx.report.store.groups import Member, identity
from posx.report.store.scan import COLUMNS
from posx.runs.paths import CONFIG, META, NOT_RUNS, RUN_MARKERS, is_run, is_run_dir, read_meta, require_dir

TABLES = digests.TABLES
OPTIONAL = ("metrics.csv", "tasks.csv")  # read when there; a run without it is not "missing" a table
EVALUATIONS = ("current", "all")
# The cell of each table that one evaluation scores once; in --evaluations all the newest wins.
CELL = {
    "extrapolation.csv": ["method", "protocol", "absolute_beyond", "factor", "stage"],
    "positions.csv": ["method", "protocol", "absolute_beyond", "factor", "stage", "bucket_start"],
    "passkey.csv": ["method", "absolute_beyond", "factor", "variant", "depth_lo"],
}


@dataclass
class RunTables:
    path: Path
    seed: int | None  # from config.yaml; None when it has none
    parent: str = ""  # "" for a trained run; for an extended run its parent (see the module docstring)
    group: str = ""  # its group's label (posx.report.store.groups)
    member: Member | None = None  # what grouping reads of it
    tables: dict = field(default_factory=dict)  # table name -> DataFrame
    missing: list = field(default_factory=list)  # files the run lacks
    notes: list = field(default_factory=list)  # what the report should say about it (superseded evaluations)


def find_run_dirs(paths: list[str | Path]) -> list[Path]:
    """Run directories named, or found below a folder (a sweep, a folder of sweeps, results/)."""
    found: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw)
        require_dir(path, "give run directories or sweep directories")
        if is_run_dir(path):
            found[path.resolve()] = None
            continue
        children = _runs_below(path)
        if not children:
            raise PosxError(
                f"{path} is neither a run directory nor a directory of runs "
                f"(no {', '.join(RUN_MARKERS)} in it or its subdirectories)"
            )
        found.update(dict.fromkeys(children))
    return list(found)


def _runs_below(path: Path, depth: int = 2) -> list[Path]:
    """The run directories right below ``path``, else below its subfolders (not ``NOT_RUNS``), ``depth`` deep."""
    root = path.resolve()  # one scandir for the run directories right below; a link resolved alone
    with os.scandir(root) as entries:
        dirs = [e for e in entries if e.is_dir()]
    runs = [e for e in dirs if any(os.path.isfile(os.path.join(e.path, m)) for m in RUN_MARKERS)]
    if runs or depth == 0:
        return sorted(Path(e.path).resolve() if e.is_symlink() else root / e.name for e in runs)
    with os.scandir(path) as entries:
        subfolders = sorted(e.path for e in entries if e.is_dir() and e.name not in NOT_RUNS)
    return [run for sub in subfolders for run in _runs_below(Path(sub), depth - 1)]


def _parent(path: Path, meta) -> tuple[dict | None, int | None]:
    """(the parent's identity, its seed) when the parent directory of an extended run is there."""
    found = _parent_dir(path, meta.extended_from.parent_path, meta.extended_from.parent)
    if found is None:
        return None, None
    saved = digests.read_config(found) or {}
    seed = saved.get("seed")
    return identity(saved, read_meta(found), None, None, evaluations=[]), int(seed) if seed is not None else None


def _parent_dir(path: Path, recorded: str | None, name: str) -> Path | None:
    """An extended run's parent directory where it is there: at its recorded path, else beside the run."""
    for candidate in (Path(recorded) if recorded else None, path.parent / name):
        if candidate is not None and candidate.resolve() != path.resolve() and is_run(candidate):
            return candidate
    return None


def _tagged(frame: pd.DataFrame, settings: dict | None) -> pd.DataFrame:
    """absolute_beyond on every table (extrapolation.csv has it; the others take the evaluation's)."""
    if "absolute_beyond" not in frame:
        frame = frame.assign(absolute_beyond=str((settings or {}).get("absolute_beyond", "none")))
    return frame


def _stored_evaluations(path: Path, weights: str | None) -> list[tuple[Path, dict | None]]:
    """eval/<id>/ folders of these weights, oldest first, with their settings (None: a legacy one)."""
    root = path / history.EVAL_DIR
    found = []
    for folder in sorted(root.iterdir()) if root.is_dir() and not root.is_symlink() else []:
        if folder.is_symlink() or not (folder / "extrapolation.csv").is_file():
            continue
        record = history.read_record(folder / history.SETTINGS) if (folder / history.SETTINGS).is_file() else None
        if record is not None and weights and record.get("weights_sha256") not in (None, weights):
            continue  # scored weights the run no longer has
        found.append(((folder / "extrapolation.csv").stat().st_mtime, folder, record))
    return [(folder, record and record["settings"]) for _, folder, record in sorted(found, key=lambda f: f[0])]


def _all_tables(run: RunTables, weights: str | None, extended: bool) -> list[dict]:
    """Every stored evaluation's tables stacked, the newest winning a cell; returns their settings."""
    stored = _stored_evaluations(run.path, weights)
    if not stored:
        return []
    for name in TABLES:
        frames = [
            _tagged(read_table(folder / name, run.path), settings)
            for folder, settings in stored
            if (folder / name).is_file()
        ]
        if not frames:
            if any(name not in left_out(settings, extended) for _, settings in stored):
                run.missing.append(name)
            continue
        stacked = pd.concat(frames, ignore_index=True)
        kept = stacked.drop_duplicates(CELL[name], keep="last").reset_index(drop=True)
        if name == "extrapolation.csv" and len(kept) < len(stacked):
            run.notes.append(
                f"{len(stacked) - len(kept)} row(s) scored by more than one evaluation; the newest evaluation's count"
            )
        run.tables[name] = kept
    return [settings or {"record": "legacy"} for _, settings in stored]


def check_evaluations(evaluations: str) -> None:
    """Refuse an ``--evaluations`` value that is not one of ``EVALUATIONS``."""
    if evaluations not in EVALUATIONS:
        raise PosxError(f"--evaluations {evaluations} is not one of {', '.join(EVALUATIONS)}")


def load_run_tables(path: Path, evaluations: str = "current") -> RunTables:
    """A run's seed, identity and tables (see the module docstring); absent tables go to ``missing``."""
    check_evaluations(evaluations)
    run = RunTables(path=path, seed=None)
    saved = digests.read_config(path)
    if not saved:  # absent or damaged
        run.missing.append(CONFIG)
    seed = (saved or {}).get("seed")
    run.seed = int(seed) if seed is not None else None
    meta = read_meta(path) if (path / META).is_file() else None
    parent, parent_seed = None, None
    extended = meta is not None and meta.extended_from is not None
    if extended:
        parent, parent_seed = _parent(path, meta)
        run.parent = f"{parent['pos.name']}-T{parent['T']}" if parent is not None else meta.extended_from.parent
    settings, record = None, None
    if evaluations == "all":
        settings = _all_tables(run, meta.weights_sha256 if meta is not None else None, extended) or None
    if settings is None:  # current, or a run with no stored evaluation
        record = history.current(path) if (path / history.SETTINGS).is_file() else None
        unwritten = left_out(record and record["settings"], extended)
        for name in TABLES:
            if (path / name).is_file():
                run.tables[name] = _tagged(read_table(path / name), record and record["settings"])
            elif name not in unwritten:
                run.missing.append(name)
    for name in OPTIONAL:
        if (path / name).is_file():
            try:
                run.tables[name] = pd.read_csv(path / name)
            except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
                pass  # a damaged metrics.csv costs the training plot only
    ident = identity(saved, meta, record, run.tables.get("extrapolation.csv"), evaluations=settings, parent=parent)
    evaluated = (path / "extrapolation.csv").stat().st_mtime if (path / "extrapolation.csv").is_file() else 0.0
    run.member = Member(path, run.seed, ident, evaluated, parent_seed)
    return run


def _parent_digest(path: Path, lineage: dict, known: dict) -> dict | None:
    """The digest of an extended run's parent, when its directory is there (``known``: digests at hand)."""
    found = _parent_dir(path, lineage.get("parent_path"), lineage["parent"])
    if found is None:
        return None
    key = found.resolve()
    if key not in known:
        known[key] = digests.resolve(found)[0]  # read only: the report writes no parent's digest
    return known[key]


def from_digest(path: Path, digest: dict, known: dict) -> RunTables:
    """A run's seed, identity and missing tables from its digest (its tables are in the store's views)."""
    run = RunTables(path=path, seed=digest["seed"])
    absent = [n for n in TABLES if n not in digest["columns"] and n not in digest["left_out"]]
    run.missing = ([] if digest["config"] else [CONFIG]) + absent
    found = dict(digest["identity"])
    parent_seed = None
    if digest["lineage"] is not None:
        parent = _parent_digest(path, digest["lineage"], known)
        run.parent = digest["lineage"]["parent"]
        if parent is not None:  # what the parent is, not what it is called (posx.report.store.groups)
            ident = parent["identity"]
            run.parent = found["parent"] = f"{ident['pos.name']}-T{ident['T']}"
            found.update({f"parent.{k}": v for k, v in ident.items()})
            parent_seed = parent["seed"]
    found.update(digest["eval"])
    run.member = Member(path, run.seed, found, digest["evaluated_at"], parent_seed)
    return run


def _register(con, loaded: list[RunTables]) -> None:
    """The stacked tables of ``--evaluations all`` as the views the queries read."""
    for name, view in cache.TABLES.items():
        frames = [r.tables[name].assign(run=str(r.path)) for r in loaded if name in r.tables]
        if not frames:
            con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS {cache.no_rows(name)}")
            continue
        columns = ["run", *COLUMNS[name]] + (["absolute_beyond"] if name in cache.TAGGED else [])
        con.register(view, pd.concat(frames, ignore_index=True).reindex(columns=columns))


def every_one_damaged(damaged: dict[Path, str]) -> PosxError:
    """The refusal of a report whose every run is damaged: the first one's line (nothing to report)."""
    first = next(iter(damaged.values()))
    if len(damaged) == 1:
        return PosxError(first)
    return PosxError(f"each of the {len(damaged)} runs is damaged, so there is nothing to report; the first: {first}")


def _load_each(run_dirs: list[Path], evaluations: str) -> tuple[list[RunTables], dict[Path, str]]:
    """``load_run_tables`` of each run; a run whose file it refuses is left out, with that line."""
    loaded, damaged = [], {}
    for path in run_dirs:
        try:
            loaded.append(load_run_tables(path, evaluations))
        except PosxError as exc:
            damaged[path] = str(exc)
    return loaded, damaged


def collect(run_dirs: list[Path], evaluations: str, cache_dir: Path) -> tuple[list[RunTables], cache.Gathered]:
    """Every run and the ``cache.Gathered`` with their tables and damaged runs; all damaged: the error."""
    if evaluations == "all":
        loaded, damaged = _load_each(run_dirs, evaluations)
        if not loaded and damaged:
            raise every_one_damaged(damaged)
        con = cache.connect()
        _register(con, loaded)
        return loaded, cache.Gathered({}, con, cache_dir, damaged=damaged)
    gathered = cache.gather(run_dirs, cache_dir)
    known = {path.resolve(): d for path, d in gathered.digests.items()}
    try:
        if not gathered.digests and gathered.damaged:
            raise every_one_damaged(gathered.damaged)
        return [from_digest(path, d, known) for path, d in gathered.digests.items()], gathered
    except BaseException:
        cache.discard(gathered)
        raise
