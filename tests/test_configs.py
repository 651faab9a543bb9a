"""Every config group option and every experiment composes against the typed schema."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from posx.config.compose import compose
from posx.config.checks import check_config
from posx.config.compose import config_dir
from posx.core.errors import PosxError
from posx.model.config import GPTConfig

GROUPS = ["model", "pos", "data", "train", "eval"]


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (config_dir() / group).glob("*.yaml"))


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_group_option_composes(group, option):
    overrides = [f"{group}={option}"]
    if (group, option) == ("data", "text"):
        overrides.append("data.path=corpus.txt")  # the one required value
    cfg = compose(overrides)
    check_config(cfg)


@pytest.mark.parametrize("experiment", options("experiment"))
def test_every_experiment_composes(experiment):
    cfg = compose([f"experiment={experiment}"])
    check_config(cfg)


def test_small_preset_is_tens_of_millions_of_parameters():
    from posx.model.gpt import GPT
    from posx.train.loop import gpt_config

    n = GPT(gpt_config(compose(["experiment=gpu_small"]))).num_params()
    assert 10e6 < n < 100e6


def test_typo_and_wrong_type_fail_at_composition():
    with pytest.raises((ConfigCompositionException, ConfigKeyError)):
        compose(["train.stepz=3"])
    with pytest.raises((ConfigCompositionException, ValidationError)):
        compose(["train.steps=many"])


def test_meaningless_values_fail_the_check():
    with pytest.raises(PosxError, match="eval.factors"):
        compose(["eval.factors=[0.5]"])


@pytest.mark.parametrize("overrides", [[], ["pos=t5", "pos.per_layer=true"], ["model=llama_tiny"],
                                       ["pos=absolute", "pos.max_positions=256"]])
def test_the_model_config_conversion_round_trips(overrides):
    """cfg -> GPTConfig -> the run-config values -> GPTConfig again is the identity (one table,
    posx.model.config.RUN_KEYS, serves both directions)."""
    cfg = compose(overrides)
    model = GPTConfig.from_run_config(cfg, 256)
    again = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    for key, value in model.run_config_values().items():
        OmegaConf.update(again, key, value, merge=False)
    again.train.context_length = 7  # max_positions is explicit now: T no longer matters
    assert GPTConfig.from_run_config(again, 256) == model
