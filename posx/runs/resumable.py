"""Whether and from where a run can resume: ``checkpoint/latest.json`` and the checkpoint's
``state.json``, read without torch (``posx.runs.checkpoint`` writes and loads checkpoints)."""

from __future__ import annotations

import re
from pathlib import Path

from posx.core import fieldcheck
from posx.core.errors import PosxError
from posx.runs.records import TrainExtras

DIRNAME = "checkpoint"
LATEST = "latest.json"
FORMAT = "posx-checkpoint/1"


def root(run_dir: Path) -> Path:
    return Path(run_dir) / DIRNAME


def latest_step(run_dir: Path) -> int | None:
    info = read_latest(root(run_dir), missing_ok=True)
    return None if info is None else int(info["step"])


def exists(run_dir: Path) -> bool:
    return (root(run_dir) / LATEST).is_file()


def read_latest(ckpt_root: Path, missing_ok: bool = False) -> dict | None:
    """latest.json under ``ckpt_root``, checked; None when there is none and ``missing_ok``."""
    path = ckpt_root / LATEST
    if not path.is_file():
        if missing_ok:
            return None
        raise PosxError(f"{ckpt_root.parent} has no checkpoint ({DIRNAME}/{LATEST}); nothing to resume from")
    try:
        info = fieldcheck.load_json(path.read_text(encoding="utf-8"), path, "start a new run")
        if info.get("format") != FORMAT:
            raise ValueError(f"format {info.get('format')!r}")
        step, name = info["step"], info["dir"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PosxError(f"{path} is unreadable ({exc}); the checkpoint cannot be trusted — start a new run") from exc
    fieldcheck.integer(step, "step", path, "start a new run")
    if not isinstance(name, str) or not re.fullmatch(r"step-\d{8}", name):
        raise fieldcheck.refuse(path, "dir", name, "a checkpoint name step-NNNNNNNN", "start a new run")
    return info


def saved_extras(run_dir: Path) -> TrainExtras | None:
    """The latest checkpoint's extras (no tensor read); None without a checkpoint."""
    info = read_latest(root(run_dir), missing_ok=True)
    if info is None:
        return None
    where = root(run_dir) / info["dir"]
    try:
        extra = fieldcheck.load_json((where / "state.json").read_text(encoding="utf-8"), where, "start a new run")
        extra = extra.get("extra")
    except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError) as exc:
        raise PosxError(f"checkpoint {where} is incomplete or corrupt ({exc}); start a new run") from exc
    return TrainExtras.from_dict(extra or {}, str(where / "state.json"))
