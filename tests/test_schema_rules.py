"""The schema's rules (posx.schema.config, posx.schema.fields, posx.schema.methods) walked by posx.core.validate:
every default keeps its own bound, a value past a bound is one line naming its key, and a record
is walked against the same field metadata as the config key it comes from."""

from __future__ import annotations

import dataclasses

import pytest

from posx.core.errors import PosxError
from posx.core.validate import validate
from posx.model.spec import ModelSpec
from posx.schema.config import Config, ExtendRootConfig
from posx.schema.fields import Bound
from posx.schema.methods import RopeArgs

from helpers.model import spec


def _groups(kind: type, at: str = ""):
    """(dotted key, field) of every field of ``kind`` and of the groups below it."""
    for f in dataclasses.fields(kind):
        yield at + f.name, f
        if dataclasses.is_dataclass(f.default_factory):
            yield from _groups(f.default_factory, f"{at}{f.name}.")


BOUNDED = [(key, f) for key, f in _groups(ExtendRootConfig) if "bound" in f.metadata]


def test_the_schema_defaults_pass_their_own_rules():
    made = validate(dataclasses.asdict(ExtendRootConfig(parent="run")), ExtendRootConfig)
    assert made == ExtendRootConfig(parent="run")
    assert validate(dataclasses.asdict(Config()), Config) == Config()
    assert validate(dataclasses.asdict(spec()), ModelSpec, "model metadata") == spec()
    assert validate({}, RopeArgs) == RopeArgs()


@pytest.mark.parametrize("key, f", BOUNDED, ids=[k for k, _ in BOUNDED])
def test_a_value_past_a_bound_is_one_line_naming_its_key(key, f):
    rule: Bound = f.metadata["bound"]
    data = dataclasses.asdict(ExtendRootConfig(parent="run"))
    node = data
    *groups, name = key.split(".")
    for part in groups:
        node = node[part]
    if rule.lo is None and rule.hi is None:  # a list's rule only: each value once
        node[name] = [node[name][0]] * 2
    else:
        past = rule.lo - 1 if rule.lo is not None else rule.hi + 1
        assert rule.problem(key, past) is not None
        node[name] = [past] if isinstance(node[name], list) else past
    with pytest.raises(PosxError) as info:
        validate(data, ExtendRootConfig)
    message = str(info.value)
    assert "\n" not in message and key in message, message


def test_a_model_record_keeps_the_bound_of_its_config_key():
    """A model record holds the schema's own sections, and its vocab_size the bound of data.vocab_size."""
    record = {f.name: f for f in dataclasses.fields(ModelSpec)}
    assert record["vocab_size"].metadata == dict(_groups(Config))["data.vocab_size"].metadata
    data = {**dataclasses.asdict(spec()), "model": {"n_layer": 2000}}
    with pytest.raises(PosxError, match="^model metadata: model.n_layer=2000 must be at most 1024$"):
        validate(data, ModelSpec, "model metadata")
    data = {**dataclasses.asdict(spec()), "pos": {**dataclasses.asdict(spec())["pos"], "max_positions": None}}
    with pytest.raises(PosxError, match="^model metadata: pos.max_positions is null; a model record holds"):
        validate(data, ModelSpec, "model metadata")
