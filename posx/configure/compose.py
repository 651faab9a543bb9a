"""Composing configs: the config folder, the schemas Hydra merges onto, a composed config
without a Hydra job, and the YAML a run directory keeps."""

from __future__ import annotations

import difflib
import re
import typing
from enum import Enum
from pathlib import Path

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException, ValidationError

from posx.configure.checks import check_config
from posx.configure.reference import keys
from posx.core.errors import PosxError, choose, unknown
from posx.core.validate import validate
from posx.schema.config import Config, ExtendRootConfig
from posx.schema.fields import plain

GROUPS = ("model", "pos", "data", "train", "eval", "logger", "experiment")  # the config groups (configs/<group>/)
# The schemas configs/config.yaml and configs/extend.yaml name as their defaults.
STORED_SCHEMAS = {"posx_schema": Config, "posx_extend_schema": ExtendRootConfig}
SCHEMAS = {"config": Config, "extend": ExtendRootConfig}  # the root configs and their schemas
# What OmegaConf says of a value that does not fit its field's type, and how to write one that does.
TYPE_FIXES = (
    ("is not a ListConfig", "write a list in brackets, e.g. {key}=[{value}]"),
    ("converted to Integer", "give a whole number, written without a point or an exponent"),
    ("converted to Float", "give a number"),
    ("not a valid bool", "give true or false"),
)


def register_configs(cs: ConfigStore | None = None) -> None:
    """Register ``STORED_SCHEMAS`` in Hydra's config store once (a third of a ``compose`` each)."""
    cs = cs or ConfigStore.instance()
    stored = cs.list("")
    for name, node in STORED_SCHEMAS.items():
        if f"{name}.yaml" not in stored:
            cs.store(name=name, node=node)


def config_dir() -> Path:
    here = Path(__file__).resolve().parents[1]  # the posx package
    for candidate in (here / "configs", here.parent / "configs"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise PosxError(f"posx configs not found next to {here}; reinstall posx (pip install .)")


def key_hint(key: str, schema: type = ExtendRootConfig) -> str:
    """What to do about ``key``: set it plainly when the schema has it, else the closest keys."""
    if key in GROUPS:
        return f"{key} is a config group: choose one of configs/{key}/ as {key}=<name>"
    known = [k for k, *_ in keys(schema)]
    if key in known:
        return f"set it as {key}=<value>"
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    guess = f"; did you mean {' or '.join(close)}?" if close else ""
    return f"{key} is not a key of posx's config{guess} (posx train --cfg job lists every key)"


def refuse_additions(overrides: list[str]) -> None:
    """``+key=value`` would add a key no code reads, ``~key`` delete one every run needs: refused."""
    for item in overrides:
        if item.startswith("+"):
            key = item.lstrip("+").split("=", 1)[0]
            raise PosxError(f"'{item}': posx's config has a fixed schema, so a key cannot be added; {key_hint(key)}")
        if item.startswith("~"):
            key = item[1:].split("=", 1)[0]
            raise PosxError(
                f"'{item}': posx's config has a fixed schema, so a key cannot be deleted; give it a value "
                f"instead ({key}=VALUE; posx train --cfg job lists every key and its default)"
            )


def choices_of(schema: type, key: str) -> type[Enum] | None:
    """The Enum a dotted ``key`` of ``schema`` (or each item of it, for a list) takes, else None."""
    hint: typing.Any = schema
    for part in key.split("."):
        hint = typing.get_type_hints(hint).get(part) if isinstance(hint, type) else None
    item = (typing.get_args(hint) or [None])[0] if typing.get_origin(hint) is list else hint
    return item if isinstance(item, type) and issubclass(item, Enum) else None


def unknown_choice(exc: ConfigCompositionException, overrides: list[str], schema: type) -> PosxError | None:
    """An override's value outside its field's Enum, as one line; None for other errors."""
    cause = exc.__cause__
    key = re.sub(r"\[\d+\]$", "", getattr(cause, "full_key", None) or "")
    enum = choices_of(schema, key) if isinstance(cause, ValidationError) and key else None
    parsed = [o for o in OverridesParser.create().parse_overrides(overrides) if o.key_or_group == key]
    if enum is None or not parsed:
        return None
    accepted = [m.value for m in enum]
    value = parsed[-1].value()
    if isinstance(value, list):
        bad = [v for v in value if not isinstance(v, str) or v not in enum.__members__]  # [[1]]: a list is no name
        return PosxError(f"{key} has unknown value '{bad[0] if bad else value}'; {choose(accepted)}")
    return unknown(key, value, accepted)


def composition_error(exc: Exception, schema: type) -> PosxError:
    """Hydra's composition error as one line that keeps its reason: an unknown key with the closest
    keys, a value that does not fit with OmegaConf's reason, a missing group option with the options."""
    text = str(exc)
    overridden = re.match(r"Could not override '([^']+)'", text)
    if overridden:
        return PosxError(key_hint(overridden.group(1), schema))
    if isinstance(exc, MissingConfigException):
        head, _, rest = text.partition("Available options")
        options = rest.split("Config search path")[0].split()[2:] if rest else []
        return PosxError(" ".join(head.split()) + (f"; {choose(options)}" if options else ""))
    cause = exc.__cause__
    if isinstance(cause, OmegaConfBaseException):
        reason = str(cause).splitlines()[0]
        given = re.search(r"Error merging override ([^=\s]+)=(\S*)", text)
        fixes = [fix for said, fix in TYPE_FIXES if said in reason and given]
        fix = "; " + fixes[0].format(key=given.group(1), value=given.group(2)) if fixes else ""
        return PosxError(f"{' '.join(text.split())}: {reason.rstrip('.') if fix else reason}{fix}")
    return PosxError(" ".join(text.split()))


def compose(overrides: list[str], config_name: str = "config") -> DictConfig:
    """The composed (and checked) config with overrides, without running a Hydra job."""
    refuse_additions(overrides)
    try:
        cfg = with_hydra(overrides, config_name, hydra=False)
    except (ConfigCompositionException, MissingConfigException) as exc:
        schema = SCHEMAS.get(config_name, Config)
        raise (unknown_choice(exc, overrides, schema) or composition_error(exc, schema)) from None
    except (ValueError, TypeError) as exc:  # Hydra's own: a config group given a number, a list, a mapping, null
        raise PosxError(
            f"{' '.join(str(exc).split())}; a config group ({', '.join(GROUPS)}) takes the name of one "
            "of its files, e.g. pos=rope"
        ) from None
    check_config(cfg)
    return cfg


def with_hydra(overrides: list[str], config_name: str = "config", hydra: bool = True) -> DictConfig:
    """The job's config through Hydra's compose API, unchecked; with ``hydra``, Hydra's own node too."""
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(config_dir()), job_name="posx"):
        return hydra_compose(config_name=config_name, overrides=overrides, return_hydra_config=hydra)


def to_plain(cfg: DictConfig | Config) -> dict:
    """The resolved config (composed, or ``typed``) as plain data, without Hydra's own node."""
    if not isinstance(cfg, DictConfig):
        return plain(cfg)
    container = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    container.pop("hydra", None)
    return container


def typed(cfg: DictConfig) -> Config:
    """The composed config as the schema's dataclasses: what every layer below the CLI reads."""
    return validate(to_plain(cfg), OmegaConf.get_type(cfg))


def to_yaml(cfg: DictConfig | Config) -> str:
    """``to_plain`` as YAML: what a run's config.yaml holds."""
    return OmegaConf.to_yaml(to_plain(cfg))
