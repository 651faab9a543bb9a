"""Evaluations are kept, not replaced: each in ``eval/<id>/`` (``<id>`` a hash of the settings that
change the numbers), the current one copied to the run's top level (docs/evaluation.md)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import yaml

from posx.core import fieldcheck, files
from posx.core.errors import PosxError
from posx.core.validate import known, validate
from posx.eval import manifest
from posx.eval.tables import Evaluation, read_table, write_tables
from posx.runs import legacy
from posx.runs.paths import EVAL_DIR, WRITTEN_DIRS
from posx.schema.config import EvalConfig
from posx.schema.fields import plain

SETTINGS = "eval.yaml"
TABLE_FILES = ("extrapolation.csv", "extrapolation.md", "positions.csv", "passkey.csv", "tasks.csv")
# A record posx cannot read is left where it is: the user moves it, the next evaluation writes its own.
UNREADABLE_FIX = "move it out of the run directory, then evaluate again"
NOT_IDENTITY = ("after_train", "batch_tokens")  # eval.* keys that do not change the numbers
# Keys added after evaluations were stored, with the value that evaluates as before: at that value a
# key is left out of the identity, so an evaluation keeps its id.
LATER = {
    "params": None,  # the parameters of methods from outside posx
    "randomized_positions": "dense",
    "task_options": {"layout": "fixed", "min_pairs": 0, "pairs": 0, "base_length": 0},
}


def settings_of(ev: EvalConfig) -> dict:
    """The settings that make an evaluation's identity (``LATER``'s keys at their old value left out)."""
    data = plain(ev)
    return _without_later({k: v for k, v in data.items() if k not in NOT_IDENTITY}, LATER)


def _without_later(data: dict, later: dict) -> dict:
    """``data`` without the keys of ``later`` that hold ``later``'s value (nested alike)."""
    out = {}
    for key, value in data.items():
        old = later.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            out[key] = _without_later(value, old)
        elif key not in later or value != old:
            out[key] = value
    return out


def eval_id(settings: dict) -> str:
    """A short hash of the settings (key order ignored, 1 == 1.0) as first spelled, so a renamed key keeps the id."""

    def norm(value):
        if isinstance(value, dict):
            return {str(k): norm(v) for k, v in sorted(value.items())}
        if isinstance(value, (list, tuple)):
            return [norm(v) for v in value]
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value

    text = json.dumps(norm(legacy.first_spelled(settings)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def read_record(path: Path) -> dict:
    """An eval.yaml (id, settings, device, weights_sha256), each field checked."""
    try:
        record = fieldcheck.load_yaml(files.read_regular(path).decode("utf-8"), path, UNREADABLE_FIX)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise PosxError(f"{path} is unreadable ({exc.__class__.__name__}); {UNREADABLE_FIX}") from None
    fix = UNREADABLE_FIX
    if not isinstance(record, dict) or not isinstance(record.get("settings"), dict):
        raise PosxError(f"{path} is not a posx evaluation record; {fix}")
    eid = record.get("id")
    if not isinstance(eid, str) or not re.fullmatch(r"[0-9A-Za-z_-]{1,64}", eid):
        raise fieldcheck.refuse(path, "id", eid, "an evaluation id (letters, digits, _ and -)", fix)
    fieldcheck.finite_tree(record["settings"], "settings", path, fix)
    record["settings"] = legacy.upgrade_eval(record["settings"])
    validate(known(record["settings"], EvalConfig), EvalConfig, f"{path} is incomplete or corrupt", fix, "settings.")
    for key in ("device", "weights_sha256"):  # informational, and compared with the run's: a string or null
        if record.get(key) is not None:
            fieldcheck.text(record[key], key, path, fix)
    return record


def current(run_dir: Path) -> dict | None:
    """The record of the evaluation at the run's top level; None when it has none (or a legacy one)."""
    path = Path(run_dir) / SETTINGS
    return read_record(path) if path.is_file() else None


def stored(run_dir: Path, eid: str, weights_sha256: str | None) -> Path | None:
    """eval/<eid>/ when it holds a complete evaluation of these weights."""
    folder = Path(run_dir) / EVAL_DIR / eid
    if not (folder / SETTINGS).is_file() or not (folder / "extrapolation.csv").is_file():
        return None
    if weights_sha256 and read_record(folder / SETTINGS).get("weights_sha256") not in (None, weights_sha256):
        return None  # the run's weights changed since: a stale evaluation
    return folder


def _keep_legacy(run_dir: Path) -> Path | None:
    """Top-level tables kept nowhere else go aside before they are replaced: without an eval.yaml to
    eval/legacy[-n]/, else back to their eval/<id>/."""
    if not (run_dir / "extrapolation.csv").is_file():
        return None
    if (run_dir / SETTINGS).is_file():
        eid = str(read_record(run_dir / SETTINGS).get("id", ""))
        if not eid or (run_dir / EVAL_DIR / eid / "extrapolation.csv").is_file():
            return None
        target = _real_folder(run_dir, eid)
        _copy_tables(run_dir, target)
        return target
    target = files.unique_dir(files.real_dir(run_dir / EVAL_DIR, WRITTEN_DIRS[EVAL_DIR]), "legacy", "")
    for name in TABLE_FILES:
        if (run_dir / name).is_file():
            (run_dir / name).replace(target / name)
    return target


def _copy_tables(source: Path, target: Path, eid: str | None = None) -> list[Path]:
    """The tables and record of ``source`` into ``target``, tables it lacks removed there; with ``eid``
    (publishing) the manifest first, so a copy cut short is refused, not read as one evaluation."""
    if eid is not None:
        manifest.write(source, target, eid)
    written = []
    for name in (*TABLE_FILES, SETTINGS):
        if (source / name).is_file():
            with files.atomic_path(target / name) as tmp:
                shutil.copyfile(source / name, tmp)
            written.append(target / name)
        elif name != SETTINGS:
            (target / name).unlink(missing_ok=True)
    return written


def check_writable(run_dir: Path, eid: str) -> None:
    """Refuse, before any work, writing through a link or a non-directory at eval/ or eval/<eid>/."""
    files.check_dir(Path(run_dir) / EVAL_DIR, WRITTEN_DIRS[EVAL_DIR])
    files.check_dir(Path(run_dir) / EVAL_DIR / eid, "the evaluation record directory")


def _real_folder(run_dir: Path, eid: str) -> Path:
    """eval/<eid>/, made if missing; neither it nor eval/ may be a symbolic link."""
    files.real_dir(run_dir / EVAL_DIR, WRITTEN_DIRS[EVAL_DIR])
    return files.real_dir(run_dir / EVAL_DIR / eid, "the evaluation record directory")


def save(result: Evaluation, run_dir: Path, settings: dict, device: str, weights_sha256: str | None) -> list[Path]:
    """Write the evaluation to eval/<id>/ and make it the current one; returns the top-level files."""
    run_dir = Path(run_dir)
    eid = eval_id(settings)
    result.table["eval_id"] = eid
    folder = _real_folder(run_dir, eid)
    write_tables(result, folder)
    record = {"id": eid, "settings": settings, "device": str(device), "weights_sha256": weights_sha256}
    files.write_text(folder / SETTINGS, yaml.safe_dump(record, sort_keys=False))
    return make_current(run_dir, folder)


def tasks_table(run_dir: Path, value, key: str) -> Path:
    """A run's tasks.csv: the current one (``value`` None), or its newest stored evaluation's whose
    setting ``key`` is ``value``; a path that does not exist when none is."""
    run_dir = Path(run_dir)
    if value is None:
        return run_dir / "tasks.csv"
    records = sorted((run_dir / EVAL_DIR).glob(f"*/{SETTINGS}"), key=lambda p: p.stat().st_mtime, reverse=True)
    found = [r.parent for r in records if read_record(r)["settings"].get(key, LATER.get(key)) == value]
    return found[0] / "tasks.csv" if found else run_dir / EVAL_DIR / f"no-{key}-{value}" / "tasks.csv"


def make_current(run_dir: Path, folder: Path) -> list[Path]:
    """A stored evaluation becomes the current one again (the previous current one stays stored)."""
    _keep_legacy(Path(run_dir))
    return _copy_tables(folder, Path(run_dir), folder.name)


def load(folder: Path) -> Evaluation:
    """A stored evaluation (run_dir/eval/<id>/) read back; a damaged table names the run to evaluate again."""
    run_dir = Path(folder).parent.parent

    def rows(name: str) -> list:
        return read_table(folder / name, run_dir).to_dict("records") if (folder / name).is_file() else []

    return Evaluation(
        table=read_table(folder / "extrapolation.csv", run_dir),
        positions=rows("positions.csv"),
        passkey=rows("passkey.csv"),
        tasks=rows("tasks.csv"),
    )
