"""posx.configure.compose: a key the schema lacks cannot be added from the command line; the
composed config becomes the schema's dataclasses holding the same data."""

from __future__ import annotations

import dataclasses

import pytest

from posx.configure.compose import compose, to_plain, to_yaml, typed
from posx.core.errors import PosxError
from posx.schema.config import Config, EvalConfig, ExtendRootConfig
from posx.schema.fields import Encoding, plain

from conftest import run_posx


@pytest.mark.parametrize("override", ["+foo=1", "++train.bogus=2", "+eval.x=3"])
def test_adding_a_key_is_refused_like_an_unknown_key(override, tmp_path):
    with pytest.raises(PosxError, match="fixed schema"):
        compose([override])
    for command in (["train", override], ["eval-extrapolate", "--latest", override]):
        out = run_posx(*command, cwd=tmp_path, check=False)
        assert out.returncode == 2 and "fixed schema" in out.stderr and "Traceback" not in out.stderr
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


@pytest.mark.parametrize("override", ["~seed", "~eval.tokens", "~pos"])
def test_deleting_a_key_is_refused_naming_it(override, tmp_path):
    # Hydra deletes the key, then the schema check said "Key 'seed' not in 'Config'"
    says = f"'{override}': posx's config has a fixed schema, so a key cannot be deleted; give it a value instead"
    with pytest.raises(PosxError, match=says):
        compose([override])
    # `--latest ~key`: the override lands where RUN goes and is read as one, not as a run's name
    for command in (["train", override], ["eval-extrapolate", "--latest", override]):
        out = run_posx(*command, cwd=tmp_path, check=False)
        assert out.returncode == 2 and says in " ".join(out.stderr.split()) and "Traceback" not in out.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("override", ["+experiment=quick", "++model=tiny"])
def test_adding_a_group_says_to_choose_it(override):
    group = override.lstrip("+").split("=")[0]
    says = rf"{group} is a config group: choose one of configs/{group}/ as {group}=<name>$"
    with pytest.raises(PosxError, match=says):
        compose([override])


@pytest.mark.parametrize(
    "override, says",
    [
        ("train.steps=abc", r"train.steps=abc: Value 'abc' of type 'str' could not be converted to Integer"),
        ("eval.factors=[1,2,x]", r"eval.factors=\[1,2,x\]: Value 'x' .* could not be converted to Float"),
        # a value of the wrong type says how to write one of the right type
        ("train.steps=1e3", r"could not be converted to Integer; give a whole number, written without a point"),
        ("eval.factors=1", r"is not a ListConfig, list or tuple; write a list in brackets, e.g. eval.factors=\[1\]$"),
        ("train.lr=abc", r"could not be converted to Float; give a number$"),
        ("eval.after_train=maybe", r"is not a valid bool \(type str\); give true or false$"),
        ("train.stepz=100", r"^train.stepz is not a key of posx's config; did you mean train.steps\b"),
        ("model=bogus", r"Could not find 'model/bogus'; choose one of llama_small, llama_tiny, small, tiny$"),
        ("seed=-1", r"^seed=-1 must be in \[0, 9223372036854775807\]$"),
        ("seed=18446744073709551616", r"^seed=18446744073709551616 must be in \[0, "),
    ],
)
def test_a_composition_error_is_one_line_that_keeps_its_reason(override, says):
    with pytest.raises(PosxError, match=says) as info:
        compose([override])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "override, says",
    [
        ("eval=-1", "a config group (model, pos, data, train, eval, logger, experiment) takes the name"),
        ("eval.longrope='${oc.env:HOME}'", "eval.longrope='"),  # an interpolation in place of a group
    ],
)
def test_a_group_given_one_value_is_one_line(override, says):
    with pytest.raises(PosxError, match=None) as info:
        compose([override])
    assert says in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("overrides", "name", "schema"),
    [
        ([], "config", Config),
        (["pos=fire", "eval.scale=2", "eval.methods=[none,yarn]", "experiment=gpu_small"], "config", Config),
        (["pos=alibi", "data=text", "data.path=.", "data.val_fraction=0.1", "eval.factors=[1,3]"], "config", Config),
        (["parent=p", "method=yarn", "factor=4"], "extend", ExtendRootConfig),
    ],
)
def test_the_typed_config_holds_the_composed_data_and_writes_the_same_yaml(overrides, name, schema):
    """What a run's config.yaml holds does not depend on whether the composed config or its
    dataclasses write it, byte for byte."""
    composed = compose(overrides, name)
    cfg = typed(composed)
    assert type(cfg) is schema and isinstance(cfg.eval, EvalConfig)
    assert to_plain(cfg) == to_plain(composed) == plain(cfg) == dataclasses.asdict(cfg)
    assert to_yaml(cfg) == to_yaml(composed)


def test_plain_writes_choices_as_their_strings():
    cfg = Config()
    assert isinstance(cfg.pos.name, Encoding)
    data = plain(cfg)
    assert type(data["pos"]["name"]) is str and data["pos"]["name"] == "rope"
    assert all(type(m) is str for m in data["eval"]["methods"])
    assert to_plain(cfg)["eval"] == data["eval"]  # OmegaConf's own conversion says the same
