"""The schema's choice fields are Enums that mirror the registries they name, refuse an
unknown value at composition, and behave as plain strings everywhere else."""

from __future__ import annotations

import importlib
import json

import pytest
import yaml

from posx.configure.compose import compose, to_yaml
from posx.core.errors import PosxError
from posx.model.encodings import ENCODINGS
from posx.rope import METHODS
from posx.schema.config import (
    Attention,
    AttnScale,
    Beyond,
    Block,
    Encoding,
    ExtendMethod,
    Logger,
    MixLoss,
    Protocol,
    Source,
    Task,
    TaskScoring,
)
from posx.schema.fields import Variant  # the passkey's choice, a field of posx.schema.tasks
from posx.schema.methods import Method

# Each choice with the registry it mirrors: (module, attribute); a dict's keys or a tuple's items.
REGISTRIES = {
    Encoding: ("posx.model.encodings", "encoding_names"),
    Block: ("posx.model.blocks", "BLOCKS"),
    Attention: ("posx.model.attention", "ATTENTION"),
    AttnScale: ("posx.model.scaling", "ATTN_SCALES"),
    Method: ("posx.rope", "METHODS"),
    Beyond: ("posx.model.encodings", "BEYOND"),
    Protocol: ("posx.eval.scoring", "PROTOCOLS"),
    Variant: ("posx.eval.passkey", "VARIANTS"),
    Source: ("posx.data.sources", "SOURCES"),
    Task: ("posx.tasks.registry", "TASKS"),
    Logger: ("posx.core.trackers", "LOGGERS"),
    TaskScoring: ("posx.tasks.scoring", "SCORINGS"),
    MixLoss: ("posx.train.taskmix", "MIX_LOSSES"),
}


@pytest.mark.parametrize("enum", list(REGISTRIES), ids=lambda e: e.__name__)
def test_each_choice_lists_exactly_its_registry(enum):
    module, name = REGISTRIES[enum]
    registry = getattr(importlib.import_module(module), name)
    registry = registry() if callable(registry) else registry
    assert [m.value for m in enum] == list(registry)


def test_extend_methods_are_the_rope_methods_and_interpolate():
    assert [m.value for m in ExtendMethod] == [*METHODS, "interpolate"]


def test_a_choice_is_its_string():
    cfg = compose(["pos=absolute", "eval.methods=[none,yarn]"])
    name = cfg.pos.name
    assert isinstance(name, Encoding) and name == "absolute" and f"{name}-T{128}" == "absolute-T128"
    assert ENCODINGS[name] is ENCODINGS["absolute"]
    assert (
        json.dumps({"pos": name, "methods": list(cfg.eval.methods)})
        == '{"pos": "absolute", "methods": ["none", "yarn"]}'
    )
    saved = yaml.safe_load(to_yaml(cfg))  # safe_load: plain strings only, no Python tags
    assert saved["pos"]["name"] == "absolute" and saved["eval"]["methods"] == ["none", "yarn"]
    assert all(m in METHODS for m in cfg.eval.methods) and Method.yarn in ["yarn"]


@pytest.mark.parametrize(
    "override,needle",
    [
        ("pos.name=bogus", "pos.name=bogus is unknown; choose one of absolute, rope, sinusoidal"),
        ("model.block=gpt3", "model.block=gpt3 is unknown; choose one of gpt2, llama"),
        ("eval.methods=[none,bogus]", "eval.methods has unknown value 'bogus'; choose one of none, pi"),
        ("eval.protocol=strided", "eval.protocol=strided is unknown; choose one of nonoverlapping, sliding"),
        ("logger.mode=cloud", "logger.mode=cloud is unknown; choose one of offline, online, disabled"),
        ("logger.mode=[[1]]", "logger.mode has unknown value '[1]'; choose one of offline"),  # a nested list
    ],
)
def test_an_unknown_choice_is_refused_at_composition_with_the_accepted_values(override, needle):
    with pytest.raises(PosxError) as raised:
        compose([override])
    assert needle in str(raised.value)


def test_every_value_of_a_choice_composes():
    for method in ExtendMethod:
        assert compose(["parent=p", f"method={method}"], "extend").method == method.value
    assert list(compose([f"eval.methods=[{','.join(METHODS)}]"]).eval.methods) == list(METHODS)
