"""The config of a resumed run: its saved config.yaml plus the overrides that do not alter the
sequence of weight updates (``RESUME_SAFE``: where it runs, checkpoint and validation cadence,
the micro-batch, the evaluation after training). Any other change (``train.steps`` too: the
schedule depends on it) is refused naming the key; an override equal to the saved value is a
no-op. A requeued sweep job resumes only when its config matches the saved one."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posx.configure.applies import key_of, under
from posx.configure.checks import check_config
from posx.configure.command_line import refuse_sweep_values
from posx.configure.compose import to_plain
from posx.core.errors import PosxError
from posx.runs import resumable
from posx.runs.paths import CONFIG, is_run, lineage_of, read_config
from posx.schema.config import RESUME_SAFE, Config, ExtendRootConfig

_ABSENT = object()
# Why a flag of ``posx train`` does not go with --resume; any other: --help lists the flags.
_SWEEP = "a sweep cannot be resumed as a whole: resume each job directory"
_CFG = "a resumed run's config is its config.yaml; `posx train --cfg job` without --resume prints a new one"
NOT_WITH_RESUME = {"-m": _SWEEP, "--multirun": _SWEEP, "--cfg": _CFG, "-c": _CFG}


def saved_config(run_dir: Path) -> DictConfig:
    """The run's config.yaml on its schema (keys added since get their defaults)."""
    path = Path(run_dir) / CONFIG
    data = read_config(run_dir)
    schema = Config if lineage_of(Path(run_dir)) is None else ExtendRootConfig
    try:
        return OmegaConf.merge(OmegaConf.structured(schema), OmegaConf.create(data))
    except (OmegaConfBaseException, ValueError) as exc:
        message = " ".join(str(exc).split())
        if schema is Config and not is_run(run_dir) and not resumable.exists(run_dir):
            # no record says whether it is an extension: its checkpoint, which would, is gone
            raise PosxError(
                f"{run_dir} has no checkpoint to resume from, and its config.yaml is not a trained run's "
                f"({message}); an extension stopped without its checkpoint starts again with `posx extend`"
            ) from exc
        raise PosxError(f"{path} is unreadable or does not fit the config schema ({message})") from exc


def _value(cfg: DictConfig, key: str):
    node = OmegaConf.select(cfg, key, default=_ABSENT)
    if isinstance(node, DictConfig) or OmegaConf.is_list(node):
        return OmegaConf.to_container(node, resolve=True)
    return node


def refuse_flags(overrides: list[str]) -> None:
    """``--resume`` with a Hydra flag or a sweep's value: one line, before any override is read."""
    for override in overrides:
        if override.startswith("-"):
            why = NOT_WITH_RESUME.get(override, "--help lists what --resume takes")
            raise PosxError(f"--resume takes key=value overrides only, not '{override}' ({why})")
    refuse_sweep_values(overrides, "--resume", _SWEEP)


def resume_config(run_dir: Path, overrides: list[str], composed: DictConfig) -> DictConfig:
    """Saved config with the safe ``overrides`` applied (``composed`` holds their typed values)."""
    cfg = saved_config(run_dir)
    for override in overrides:
        key = key_of(override)
        new = _value(composed, key)
        if new is _ABSENT or _value(cfg, key) is _ABSENT or override.startswith(("+", "~")):
            raise PosxError(
                f"'{override}' cannot be applied to a resumed run (it is not a config key); "
                f"--resume accepts {', '.join(RESUME_SAFE)}"
            )
        if new == _value(cfg, key):
            continue
        if not under(key, RESUME_SAFE):
            raise PosxError(
                f"'{override}' would change the resumed run (it has {key}={_value(cfg, key)}); --resume accepts "
                f"changes to {', '.join(RESUME_SAFE)} only — start a new run for another config"
            )
        OmegaConf.update(cfg, key, OmegaConf.select(composed, key), merge=False)
    # Where files go is the caller's choice: a run from elsewhere must not choose where posx writes.
    for key in ("results_dir", "data.cache_dir"):
        OmegaConf.update(cfg, key, OmegaConf.select(composed, key), merge=False)
    check_config(cfg)
    return cfg


def refuse_edits(run_dir: Path, recorded: dict | None, now: dict) -> None:
    """Refuse to resume when config.yaml (``now``, plain) differs outside ``RESUME_SAFE`` from the
    config the checkpoint recorded (None: a checkpoint from before the record): an edit would
    change the run it continues. Only keys both hold are compared."""
    if recorded is None:
        return
    found = _differing(recorded, now, common_only=True)
    if found:
        edits = "; ".join(f"{key}={new} in config.yaml, {was} at the checkpoint" for key, was, new in found)
        raise PosxError(
            f"{Path(run_dir) / CONFIG} was edited after its last checkpoint ({edits}); resuming would "
            "not continue the same run — put the value back, or start a new run with the new config"
        )


def differences(saved: DictConfig, new: DictConfig | Config) -> list[str]:
    """Dotted keys outside ``RESUME_SAFE`` whose values differ between two configs."""
    return [key for key, _, _ in _differing(to_plain(saved), to_plain(new), common_only=False)]


def _differing(a: dict, b: dict, common_only: bool) -> list[tuple[str, object, object]]:
    """(key, in ``a``, in ``b``) per key outside ``RESUME_SAFE`` that differs (or one side lacks)."""
    found: list[tuple[str, object, object]] = []

    def walk(x, y, prefix: str) -> None:
        if under(prefix, RESUME_SAFE):
            return
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) & set(y) if common_only else set(x) | set(y)):
                walk(x.get(k, _ABSENT), y.get(k, _ABSENT), f"{prefix}.{k}" if prefix else k)
        elif x != y:
            found.append((prefix, x, y))

    walk(a, b, "")
    return found
