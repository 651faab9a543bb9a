"""Composing configs: the config folder, the schemas Hydra merges onto, a composed config
without a Hydra job, and the YAML a run directory keeps."""

from __future__ import annotations

import re
import typing
from enum import Enum
from pathlib import Path

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ValidationError

from posx.config.checks import check_config
from posx.config.schema import Config, ExtendRootConfig
from posx.core.errors import PosxError


def register_configs(cs: ConfigStore | None = None) -> None:
    """Register the schemas ``posx_schema`` (configs/config.yaml) and ``posx_extend_schema``
    (configs/extend.yaml)."""
    cs = cs or ConfigStore.instance()
    cs.store(name="posx_schema", node=Config)
    cs.store(name="posx_extend_schema", node=ExtendRootConfig)


def config_dir() -> Path:
    """The Hydra config folder: inside the package when installed, else the repo's configs/."""
    here = Path(__file__).resolve().parents[1]  # the posx package
    for candidate in (here / "configs", here.parent / "configs"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise PosxError(f"posx configs not found next to {here}; reinstall posx (pip install .)")


def refuse_additions(overrides: list[str]) -> None:
    """``+key=value`` (and ``++key=value``) would add a key the schema does not have, which no
    code reads: refused like any unknown key."""
    for item in overrides:
        if item.startswith("+"):
            key = item.lstrip("+").split("=", 1)[0]
            raise PosxError(
                f"'{item}': posx's config has a fixed schema, so a key cannot be added; "
                f"set an existing key as {key}=<value> (posx train --cfg job lists them)"
            )


SCHEMAS = {"config": Config, "extend": ExtendRootConfig}  # the root configs and their schemas


def choices_of(schema: type, key: str) -> type[Enum] | None:
    """The Enum a dotted ``key`` of ``schema`` (or each item of it, for a list) takes; None for
    other fields."""
    hint: typing.Any = schema
    for part in key.split("."):
        hint = typing.get_type_hints(hint).get(part) if isinstance(hint, type) else None
    item = (typing.get_args(hint) or [None])[0] if typing.get_origin(hint) is list else hint
    return item if isinstance(item, type) and issubclass(item, Enum) else None


def unknown_choice(exc: ConfigCompositionException, overrides: list[str], schema: type) -> PosxError | None:
    """An override's value outside its field's Enum as one line that names the key, the value
    and the accepted values; None for any other composition error."""
    cause = exc.__cause__
    key = re.sub(r"\[\d+\]$", "", getattr(cause, "full_key", None) or "")
    enum = choices_of(schema, key) if isinstance(cause, ValidationError) and key else None
    parsed = [o for o in OverridesParser.create().parse_overrides(overrides) if o.key_or_group == key]
    if enum is None or not parsed:
        return None
    accepted = ", ".join(m.value for m in enum)
    value = parsed[-1].value()
    if isinstance(value, list):
        bad = [v for v in value if v not in enum.__members__]
        return PosxError(f"{key} has unknown value '{bad[0] if bad else value}'; choose from {accepted}")
    return PosxError(f"{key}={value} is unknown; choose one of {accepted}")


def compose(overrides: list[str], config_name: str = "config") -> DictConfig:
    """The composed (and checked) config with overrides, without running a Hydra job."""
    refuse_additions(overrides)
    register_configs()
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(config_dir()), job_name="posx"):
            cfg = hydra_compose(config_name=config_name, overrides=overrides)
    except ConfigCompositionException as exc:
        raise unknown_choice(exc, overrides, SCHEMAS.get(config_name, Config)) or exc from None
    check_config(cfg)
    return cfg


def to_yaml(cfg: DictConfig) -> str:
    """The resolved config as YAML (choices as plain strings), without Hydra's own node."""
    container = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    container.pop("hydra", None)
    return OmegaConf.to_yaml(container)
