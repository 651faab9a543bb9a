"""``tables.json``: which evaluation a run's top-level tables belong to (its id and each table's
sha256), written before they are copied there one at a time. A copy cut short leaves hashes that
disagree with it, and ``check`` refuses the run in one line, so two evaluations' tables never pool.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from posx.core import fieldcheck, files
from posx.core.errors import PosxError

MANIFEST = "tables.json"
FORMAT = "posx-tables/1"
PUBLISHED = ("extrapolation.csv", "positions.csv", "passkey.csv", "tasks.csv")


def _sha(path: Path) -> str | None:
    return files.sha256_file(path) if path.is_file() else None


def write(source: Path, run_dir: Path, eid: str) -> None:
    """The manifest of the tables in ``source`` (an eval/<id>/ folder), at ``run_dir``'s top level."""
    record = {"format": FORMAT, "eval_id": eid, "files": {name: _sha(source / name) for name in PUBLISHED}}
    files.write_text(run_dir / MANIFEST, json.dumps(record) + "\n")


def _read(path: Path, fix: str) -> dict:
    try:
        record = fieldcheck.load_json(files.read_regular(path).decode("utf-8"), path, fix)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise PosxError(f"{path} is damaged (not a manifest posx wrote); {fix}") from None
    where = path
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise PosxError(f"{path} is damaged (not a manifest posx wrote); {fix}")
    fieldcheck.text(record.get("eval_id"), "eval_id", where, fix, empty=True)
    listed = record.get("files")
    if not isinstance(listed, dict) or set(listed) != set(PUBLISHED):
        raise fieldcheck.refuse(where, "files", listed, f"a mapping of {', '.join(PUBLISHED)}", fix)
    for name, sha in listed.items():
        fieldcheck.sha256(sha, f"files.{name}", where, fix, optional=True)
    return record


def check(run_dir: Path, fix: str) -> None:
    """Refuse a run whose tables are not its manifest's (a listed table since removed is not refused)."""
    path = Path(run_dir) / MANIFEST
    if not path.is_file() and not path.is_symlink():
        return
    record = _read(path, fix)
    for name, sha in record["files"].items():
        found = _sha(Path(run_dir) / name)
        if found is None and not os.path.lexists(Path(run_dir) / name):
            continue  # removed since: the report lists it as missing, nothing of it is read
        if found != sha:
            raise PosxError(
                f"{run_dir}'s tables are of two evaluations ({name} is not the one evaluation {record['eval_id']} "
                f"wrote: its publication was cut short, or it was edited since); {fix}"
            )
