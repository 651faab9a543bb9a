"""What ``posx report`` reads of each run: its seed, its identity and its tables.

Which evaluation's tables (``--evaluations``):

* ``current`` (default): the tables at the run's top level, its last evaluation;
* ``all``: every evaluation kept under ``eval/<id>/`` (``posx.eval.history``) of the run's
  current weights, stacked. A run evaluated once with every RoPE method and once with the
  sliding protocol, or a learned-absolute run evaluated with ``none``, ``clamp`` and
  ``interpolate``, contributes all of those rows. Where two evaluations scored the same cell
  (method, protocol, absolute_beyond, factor, stage) the newest counts and the report says so.

Learned absolute rows evaluated past the table with ``clamp`` or ``interpolate`` read as methods
of those names (``absolute · clamp``), so the three ways of going past T are three lines.

An extended run (``posx extend``) whose parent directory is there holds the parent's own
identity (``parent.*``) instead of the parent's name, and its replicate is (parent's seed, its
own seed): extensions of parents that are seeds of one experiment pool as seeds of one
extension experiment, and so do extensions of one parent with different extension seeds. Its
``parent`` column then reads ``<encoding>-T<T>``. Without the parent directory, the parent's
name stands in, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from posx.core.errors import PosxError
from posx.eval import history
from posx.eval.tables import read_table
from posx.report.groups import Member, identity
from posx.runs.rundir import CONFIG, META, RUN_MARKERS, is_run, is_run_dir, read_meta

TABLES = ("extrapolation.csv", "positions.csv", "passkey.csv")
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
    group: str = ""  # its group's label (posx.report.groups)
    member: Member | None = None  # what grouping reads of it
    tables: dict = field(default_factory=dict)  # table name -> DataFrame
    missing: list = field(default_factory=list)  # files the run lacks
    notes: list = field(default_factory=list)  # what the report should say about it (superseded evaluations)


def find_run_dirs(paths: list[str | Path]) -> list[Path]:
    """Run directories named directly, or found one level below a sweep (or runs/) directory."""
    found: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            raise PosxError(f"{path} is not a directory; give run directories or sweep directories")
        if is_run_dir(path):
            found[path.resolve()] = None
            continue
        children = sorted(c for c in path.iterdir() if c.is_dir() and is_run_dir(c))
        if not children:
            raise PosxError(
                f"{path} is neither a run directory nor a directory of runs "
                f"(no {', '.join(RUN_MARKERS)} in it or its subdirectories)"
            )
        found.update((c.resolve(), None) for c in children)
    return list(found)


def _config(path: Path) -> dict | None:
    config = path / CONFIG
    if not config.is_file():
        return None
    try:
        saved = yaml.safe_load(config.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise PosxError(f"{config} is not valid YAML ({exc.__class__.__name__}); fix or remove it") from None
    return saved if isinstance(saved, dict) else {}


def _parent(path: Path, meta) -> tuple[dict | None, int | None]:
    """(the parent's identity, its seed) when the parent directory of an extended run is there."""
    lineage = meta.extended_from
    for candidate in (Path(lineage.parent_path) if lineage.parent_path else None, path.parent / lineage.parent):
        if candidate is not None and candidate.resolve() != path.resolve() and is_run(candidate):
            saved = _config(candidate) or {}
            seed = saved.get("seed")
            return identity(saved, read_meta(candidate), candidate, None, evaluations=[]), (
                int(seed) if seed is not None else None
            )
    return None, None


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


def _all_tables(run: RunTables, weights: str | None) -> list[dict]:
    """Every stored evaluation's tables stacked, the newest winning a cell; returns their settings."""
    stored = _stored_evaluations(run.path, weights)
    if not stored:
        return []
    for name in TABLES:
        frames = [
            _tagged(read_table(folder / name), settings) for folder, settings in stored if (folder / name).is_file()
        ]
        if not frames:
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


def load_run_tables(path: Path, evaluations: str = "current") -> RunTables:
    """A run's seed, identity and tables (see the module docstring); absent tables go to ``missing``."""
    if evaluations not in EVALUATIONS:
        raise PosxError(f"--evaluations {evaluations} is not one of {', '.join(EVALUATIONS)}")
    run = RunTables(path=path, seed=None)
    saved = _config(path)
    if saved is None:
        run.missing.append(CONFIG)
    seed = (saved or {}).get("seed")
    run.seed = int(seed) if seed is not None else None
    meta = read_meta(path) if (path / META).is_file() else None
    parent, parent_seed = None, None
    if meta is not None and meta.extended_from is not None:
        parent, parent_seed = _parent(path, meta)
        run.parent = f"{parent['pos.name']}-T{parent['T']}" if parent is not None else meta.extended_from.parent
    settings = None
    if evaluations == "all":
        settings = _all_tables(run, meta.weights_sha256 if meta is not None else None) or None
    if settings is None:  # current, or a run with no stored evaluation
        record = history.current(path) if (path / history.SETTINGS).is_file() else None
        for name in TABLES:
            if (path / name).is_file():
                run.tables[name] = _tagged(read_table(path / name), record and record["settings"])
            else:
                run.missing.append(name)
    for name in OPTIONAL:
        if (path / name).is_file():
            try:
                run.tables[name] = pd.read_csv(path / name)
            except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
                pass  # a damaged metrics.csv costs the training plot only
    table = run.tables.get("extrapolation.csv")
    run.member = Member(
        path,
        run.seed,
        identity(saved, meta, path, table, evaluations=settings, parent=parent),
        (path / "extrapolation.csv").stat().st_mtime if (path / "extrapolation.csv").is_file() else 0.0,
        parent_seed,
    )
    return run
