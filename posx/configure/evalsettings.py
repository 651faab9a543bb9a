"""The evaluation settings of ``posx eval-extrapolate RUN``: the run's own (its last ``eval.yaml``, else
its config's ``eval``; ``eval.batch_tokens`` and ``after_train`` the composed), then the overrides."""

from __future__ import annotations

from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posx.configure.applies import key_of
from posx.configure.checks import check_config
from posx.configure.reference import dotted
from posx.core.errors import PosxError
from posx.eval import history
from posx.runs import legacy
from posx.runs.paths import CONFIG
from posx.schema.config import EvalConfig

SHOWN = 8  # settings named in the line that lists what a run's own settings changed


def saved_eval(run_dir: Path) -> tuple[dict | None, str]:
    """(the run's evaluation settings, where they came from); None when it has none."""
    run_dir = Path(run_dir)
    record = history.current(run_dir)
    if record is not None:
        return record["settings"], f"its last evaluation ({run_dir / history.SETTINGS})"
    path = run_dir / CONFIG
    if path.is_file():
        try:
            saved = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        except (OSError, OmegaConfBaseException, ValueError, yaml.YAMLError) as exc:
            raise PosxError(f"{path} is unreadable ({' '.join(str(exc).split())}); fix it or remove it") from None
        if isinstance(saved, dict) and isinstance(saved.get("eval"), dict):
            return legacy.upgrade_eval(saved["eval"]), f"the config it was trained with ({path})"
    return None, "the defaults (the run records no evaluation settings)"


def eval_config(run_dir: Path, composed: DictConfig, overrides: list[str]) -> tuple[DictConfig, str]:
    """``composed`` with the run's ``eval`` settings plus ``overrides``, and where they came from."""
    saved, source = saved_eval(run_dir)
    if saved is None:
        return composed, source
    kept = {k: v for k, v in saved.items() if k not in history.NOT_IDENTITY}
    try:
        ev = OmegaConf.merge(OmegaConf.structured(EvalConfig), kept)
    except (OmegaConfBaseException, ValueError) as exc:
        raise PosxError(
            f"the evaluation settings of {run_dir} ({source}) do not fit the schema "
            f"({' '.join(str(exc).split())}); pass --defaults to start from the defaults"
        ) from None
    for name in history.NOT_IDENTITY:
        ev[name] = composed.eval[name]
    cfg = composed.copy()
    cfg.eval = ev
    for override in overrides:
        key = key_of(override)
        if key == "eval" or key.startswith("eval."):
            OmegaConf.update(cfg, key, OmegaConf.select(composed, key), merge=False)
    try:
        check_config(cfg)
    except PosxError as exc:  # a value the user did not type may come from the run's settings: say so
        raise PosxError(
            f"{exc} (the evaluation settings are those of {source}, with the overrides on top; "
            "--defaults starts from the defaults instead)"
        ) from None
    return cfg, source


def kept_from_run(cfg: DictConfig, composed: DictConfig) -> str:
    """``cfg``'s ``eval`` settings that differ from ``composed`` (what the user did not type)."""
    ours, plain = (dotted(OmegaConf.to_container(c.eval, resolve=True, enum_to_str=True)) for c in (cfg, composed))
    kept = [f"eval.{key}={_show(value)}" for key, value in ours.items() if plain.get(key) != value]
    more = f" and {len(kept) - SHOWN} more" if len(kept) > SHOWN else ""
    return ", ".join(kept[:SHOWN]) + more


def _show(value) -> str:
    """A value as an override writes it: [1,2,4], null, 2.5."""
    if isinstance(value, list):
        return "[" + ",".join(_show(v) for v in value) + "]"
    if value is None:
        return "null"
    return f"{value:g}" if isinstance(value, float) else str(value)
