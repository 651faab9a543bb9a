"""Composing configs: the config folder, the schemas Hydra merges onto, a composed config
without a Hydra job, and the YAML a run directory keeps."""

from __future__ import annotations

from pathlib import Path

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

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
            raise PosxError(f"'{item}': posx's config has a fixed schema, so a key cannot be added; "
                            f"set an existing key as {key}=<value> (posx train --cfg job lists them)")


def compose(overrides: list[str], config_name: str = "config") -> DictConfig:
    """The composed (and checked) config with overrides, without running a Hydra job."""
    refuse_additions(overrides)
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(config_dir()), job_name="posx"):
        cfg = hydra_compose(config_name=config_name, overrides=overrides)
    check_config(cfg)
    return cfg


def to_yaml(cfg: DictConfig) -> str:
    """The resolved config as YAML, without Hydra's own node."""
    container = OmegaConf.to_container(cfg, resolve=True)
    container.pop("hydra", None)
    return OmegaConf.to_yaml(container)
