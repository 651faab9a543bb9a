"""Every config group option and every experiment composes against the typed schema."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from posx.configure.checks import check_config
from posx.configure.compose import compose, config_dir
from posx.core.errors import PosxError
from posx.model.gpt import GPT
from posx.model.spec import ModelSpec
from posx.schema.config import BYTES, Config, ExtendRootConfig

GROUPS = ["model", "pos", "data", "train", "eval", "logger"]


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (config_dir() / group).glob("*.yaml"))


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_group_option_composes(group, option, monkeypatch):
    overrides = [f"{group}={option}"]
    if (group, option) == ("data", "text"):
        overrides.append("data.path=corpus.txt")  # the one required value
    if (group, option) == ("pos", "custom"):  # the class it names: the example's
        monkeypatch.syspath_prepend(str(config_dir().parent))
        overrides.append("pos.impl=examples.alibi_encoding:ALiBi")
    cfg = compose(overrides)
    check_config(cfg)


@pytest.mark.parametrize("experiment", options("experiment"))
def test_every_experiment_composes(experiment):
    cfg = compose([f"experiment={experiment}"])
    check_config(cfg)


def test_small_preset_is_tens_of_millions_of_parameters():
    n = GPT(ModelSpec.from_config(compose(["experiment=gpu_small"]), BYTES)).num_params()
    assert 10e6 < n < 100e6


def test_typo_and_wrong_type_fail_at_composition():
    with pytest.raises(PosxError, match="train.stepz is not a key"):
        compose(["train.stepz=3"])
    with pytest.raises(PosxError, match="could not be converted to Integer"):
        compose(["train.steps=many"])


def test_meaningless_values_fail_the_check():
    with pytest.raises(PosxError, match="eval.factors"):
        compose(["eval.factors=[0.5]"])


@pytest.mark.parametrize(
    "overrides", [[], ["pos=t5", "pos.per_layer=true"], ["model=llama_tiny"], ["pos=absolute", "pos.max_positions=256"]]
)
def test_the_model_config_conversion_round_trips(overrides):
    """cfg -> ModelSpec -> its sections written back as the config's -> ModelSpec again is the
    identity (the sections are the config's own)."""
    cfg = compose(overrides)
    model = ModelSpec.from_config(cfg, 256)
    again = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    for section, values in model.sections().items():
        OmegaConf.update(again, section, values, merge=False)
    again.train.context_length = 7  # max_positions is explicit now: T no longer matters
    assert ModelSpec.from_config(again, 256) == model


def _restated(values, defaults, prefix: str = "") -> list[str]:
    """Dotted keys of ``values`` (a YAML file's mapping) equal to the schema's ``defaults``."""
    found = []
    for key, value in values.items():
        default = defaults.get(key)
        if isinstance(value, dict) and isinstance(default, dict):
            found += _restated(value, default, f"{prefix}{key}.")
        elif value != "???" and value == default:
            found.append(f"{prefix}{key}={value!r}")
    return found


def _yaml_files() -> list[tuple[Path, dict]]:
    """(file, the schema defaults it is merged onto) for every config file: a group option sits
    at its group's key, an experiment and the two root configs at the root."""
    train_root = OmegaConf.to_container(OmegaConf.structured(Config))
    extend_root = OmegaConf.to_container(OmegaConf.structured(ExtendRootConfig))
    found = [(config_dir() / "config.yaml", train_root), (config_dir() / "extend.yaml", extend_root)]
    found += [(path, train_root) for path in sorted((config_dir() / "experiment").glob("*.yaml"))]
    for group in (*GROUPS, "extend"):
        found += [(path, extend_root[group]) for path in sorted((config_dir() / group).glob("*.yaml"))]
    return found


@pytest.mark.parametrize("path,defaults", _yaml_files(), ids=lambda x: x.stem if isinstance(x, Path) else "")
def test_config_files_hold_only_what_differs_from_the_schema(path, defaults):
    """A default is stated once, in posx/schema/config.py: a YAML value equal to it is a second copy."""
    values = OmegaConf.to_container(OmegaConf.load(path)) or {}
    values = {k: v for k, v in values.items() if k not in ("defaults", "hydra")}
    assert not _restated(values, defaults), f"{path.name} restates the schema's defaults"


def test_the_restated_default_check_finds_a_restated_value():
    defaults = OmegaConf.to_container(OmegaConf.structured(Config))
    assert _restated({"train": {"steps": 800, "lr": 1.0}, "seed": 3}, defaults) == ["train.steps=800"]
    assert _restated({"data": {"path": "???"}}, defaults) == []


def test_presets_compose_to_the_values_they_had_when_their_files_restated_defaults():
    gpu = compose(["experiment=gpu_small", "model=llama_small"])
    assert OmegaConf.to_container(gpu.train) == {
        "context_length": 512,
        "steps": 5000,
        "batch_size": 64,
        "micro_batch_size": None,
        "lr": 1e-3,
        "min_lr_ratio": 0.1,
        "warmup_steps": 200,
        "weight_decay": 0.1,
        "beta1": 0.9,
        "beta2": 0.95,
        "grad_clip": 1.0,
        "eval_every": 250,
        "eval_batches": 16,
        "checkpoint_every": 500,
        "compile": "auto",
        "tf32": True,
    }
    assert OmegaConf.to_container(gpu.model, enum_to_str=True) == {
        "name": "llama_small",
        "n_layer": 8,
        "n_head": 8,
        "d_model": 512,
        "mlp_ratio": 4,
        "dropout": 0.0,
        "block": "llama",
        "multiple_of": 8,
        "tie_embeddings": True,
        "attention": "sdpa",
        "attn_scale": "none",
        "attn_scale_length": None,
        "nope_every": 0,
        "short_conv": 0,
    }
    assert (gpu.eval.tokens, gpu.eval.batch_tokens, gpu.eval.after_train) == (65536, 65536, True)
    tiny = compose(["model=llama_tiny", "pos=t5"])
    model = tiny.model
    assert (model.block, model.n_layer, model.d_model, model.name) == ("llama", 4, 128, "llama_tiny")
    assert (tiny.pos.num_buckets, tiny.pos.max_distance, tiny.pos.per_layer) == (32, 128, False)


@pytest.mark.parametrize("T", [64, 128, 2048])
def test_fires_threshold_defaults_to_a_quarter_of_T_the_papers_ratio(T):
    cfg = compose(["pos=fire", f"train.context_length={T}"])
    check_config(cfg)
    assert ModelSpec.from_config(cfg, 256).pos.fire_threshold == T / 4  # 512 at 2048, as Li et al. pair them


def test_a_fire_threshold_past_T_is_refused_with_the_fix_named():
    with pytest.raises(PosxError, match=r"pos.fire_threshold=512 is past T=128.*null for T/4 \(32\)"):
        check_config(compose(["pos=fire", "pos.fire_threshold=512"]))
    check_config(compose(["pos=fire", "pos.fire_threshold=128"]))  # at T: the last query reaches it
    check_config(compose(["pos=rope", "pos.fire_threshold=512"]))  # read only by fire
