"""A sweep's directory, looked at before Hydra writes into it.

Hydra's sweeper writes ``multirun.yaml`` into ``hydra.sweep.dir`` before the first job starts,
replacing a file of that name, and each job then writes into ``<sweep dir>/<job>/``. So before
Hydra runs, the directory must be missing, empty, or the very same posx sweep: its
``multirun.yaml`` records the same config and task overrides (a sweep started again, whose jobs
then resume their checkpoints). Anything else is refused in one line and nothing is written.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from posx.config.command_line import probes
from posx.config.compose import hydra_settings
from posx.core.errors import PosxError

RECORD = "multirun.yaml"  # what Hydra's sweeper writes at the top of the sweep directory


def check_sweep_dir(overrides: list[str], config_name: str) -> Path:
    """The sweep directory of ``overrides`` (a ``-m`` command line), refused unless posx may write it."""
    sweep = Path(str(hydra_settings(probes(overrides)[0], config_name).sweep.dir))
    reason = _refusal(sweep, (config_name, sorted(task_overrides(overrides))))
    if reason:
        raise PosxError(f"{sweep} {reason}; use a new hydra.sweep.dir")
    return sweep


def task_overrides(overrides: list[str]) -> list[str]:
    """The overrides Hydra records as the sweep's task (those not of ``hydra.*``), as given."""
    return [o.input_line for o in OverridesParser.create().parse_overrides(overrides) if not o.is_hydra_override()]


def _refusal(sweep: Path, identity: tuple[str, list[str]]) -> str | None:
    """Why the sweep may not write into ``sweep``; None when it may."""
    if sweep.is_symlink():
        return "is a symbolic link (posx does not write through links)"
    if not sweep.exists():
        return None
    if not sweep.is_dir():
        return "exists and is not a directory"
    found = sorted(p.name for p in sweep.iterdir())
    if not found:
        return None
    if RECORD not in found:
        return f"already holds files posx did not make ({', '.join(found[:3])})"
    recorded = sweep_identity(sweep / RECORD)
    if recorded is None:
        return f"holds a {RECORD} that is not a posx sweep's (Hydra would replace it)"
    if recorded != identity:
        return (
            f"holds another sweep (posx {'train' if recorded[0] == 'config' else recorded[0]} {' '.join(recorded[1])})"
        )
    return None


def sweep_identity(path: Path) -> tuple[str, list[str]] | None:
    """(config name, sorted task overrides) of a posx sweep's multirun.yaml; None for anything else
    (a link, unreadable, not Hydra's record of a posx sweep)."""
    if path.is_symlink() or not path.is_file():
        return None
    try:
        record = yaml.safe_load(path.read_text(encoding="utf-8"))
        hydra = record["hydra"]
        config_name, task = hydra["job"]["config_name"], hydra["overrides"]["task"]
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError):
        return None
    posx_sweep = hydra.get("mode") == "MULTIRUN" and config_name in ("config", "extend") and "results_dir" in record
    if not posx_sweep or not isinstance(task, list) or not all(isinstance(t, str) for t in task):
        return None
    return config_name, sorted(task)
