"""A sweep's directory, looked at before Hydra writes (replacing) its ``multirun.yaml`` there: missing,
empty, or a posx sweep's own (docs/reliability.md); anything else is refused, nothing written."""

from __future__ import annotations

from pathlib import Path

import yaml

from posx.configure.compose import with_hydra
from posx.core.errors import PosxError
from posx.core.lock import LOCK_NAME
from posx.runs import resumable
from posx.runs.paths import CONFIG, is_run_dir

RECORD = "multirun.yaml"  # what Hydra's sweeper writes at the top of the sweep directory
SWEEP_FILES = frozenset({RECORD, "sweep.csv", "sweep.md", LOCK_NAME, ".submitit"})  # posx's, beside the jobs


def check_sweep_dir(first_job: list[str], config_name: str) -> Path:
    """The sweep directory of the job ``first_job``, refused unless posx may write it."""
    job = with_hydra(first_job, config_name)
    sweep = Path(str(job.hydra.sweep.dir))
    reason = _shared(sweep, Path(job.results_dir)) or _refusal(sweep) or _another_command(sweep, config_name)
    if reason:
        raise PosxError(f"{sweep} {reason}; use a new hydra.sweep.dir")
    return sweep


def _shared(sweep: Path, results_dir: Path) -> str | None:
    for kind, holds in (("runs", "single runs"), ("sweeps", "sweeps")):
        if sweep.resolve() == (results_dir / kind).resolve():
            return (
                f"is where posx keeps {holds}: a sweep needs a directory of its own "
                f"(by default {results_dir}/sweeps/<time>)"
            )
    return None


def _refusal(sweep: Path) -> str | None:
    if sweep.is_symlink():
        return "is a symbolic link (posx does not write through links)"
    if not sweep.exists():
        return None
    if not sweep.is_dir():
        return "exists and is not a directory"
    found = sorted(sweep.iterdir())
    if not found:
        return None
    if (sweep / RECORD) in found and _record_command(sweep / RECORD) is None:
        return f"holds a {RECORD} that is not a posx sweep's (Hydra would replace it)"
    foreign = [p.name for p in found if not _ours(p, sweep)]
    if foreign:
        return f"already holds files posx did not make ({', '.join(foreign[:3])})"
    return None


def _another_command(sweep: Path, config_name: str) -> str | None:
    """Why ``sweep``'s record is another command's (``posx extend`` over ``posx train`` jobs, or
    the reverse), which Hydra would replace before a job could refuse. Other overrides of the same
    command may continue the sweep: each job checks its directory holds its own config."""
    recorded = _record_command(sweep / RECORD)
    if recorded in (None, config_name):
        return None
    command = {"config": "posx train", "extend": "posx extend"}
    return f"holds a sweep of {command[recorded]} (Hydra would replace its {RECORD})"


def _ours(path: Path, sweep: Path) -> bool:
    """What a posx sweep leaves: record, tables, lock, submitit's logs, temporaries, job directories."""
    if path.name.startswith(".") and path.name.endswith(".tmp"):
        return True
    if path.name in SWEEP_FILES:
        return path.name in (LOCK_NAME, ".submitit") or _record_command(sweep / RECORD) is not None
    if path.is_symlink() or not path.is_dir():
        return False
    return is_run_dir(path) or resumable.exists(path) or {p.name for p in path.iterdir()} <= {LOCK_NAME, CONFIG}


def _record_command(path: Path) -> str | None:
    """The root config of the posx sweep whose multirun.yaml ``path`` is; None when it is not one."""
    if path.is_symlink() or not path.is_file():
        return None
    try:
        record = yaml.safe_load(path.read_text(encoding="utf-8"))
        hydra = record["hydra"]
        name = hydra["job"]["config_name"]
        ours = hydra["mode"] == "MULTIRUN" and name in ("config", "extend") and "results_dir" in record
        return name if ours else None
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError):
        return None
