"""A RoPE method is declared once, in posx.schema.methods.METHOD_PARAMS with the dataclass of its
parameters: the Method choice, posx.rope's registry, defaults and dynamic methods, the eval.<method>
groups the evaluation and posx extend read, and the parameters the transformers export writes
follow it; the code map's walkthrough names the files a new method touches."""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest

from posx import rope
from posx.core.errors import PosxError
from posx.hf.export import rope_parameters
from posx.model.rescale import method_args
from posx.model.roperecord import RopeRecord
from posx.schema.config import EvalConfig, ExtendMethod
from posx.schema.methods import METHOD_PARAMS, Method

REPO = Path(__file__).resolve().parents[1]
T, D = 64, 16


def test_the_choices_and_the_registry_list_the_declared_methods_in_order():
    assert [m.value for m in Method] == list(METHOD_PARAMS) == list(rope.METHODS)
    assert [m.value for m in ExtendMethod] == [*METHOD_PARAMS, "interpolate"]


def test_each_method_takes_its_dataclass_fields_with_their_defaults():
    for method, params in METHOD_PARAMS.items():
        taken = {k: v for k, v in rope.method_params(method).items() if k != "length"}
        declared = {f.name: f.default for f in dataclasses.fields(params)} if params else {}
        assert taken.items() <= declared.items(), method
        assert taken or not declared, method  # a dataclass declared is a dataclass read


def test_the_method_functions_state_no_defaults_of_their_own():
    """Their parameters' defaults are the dataclasses' alone (``rope.frequencies`` passes them all)."""
    for method in rope.METHODS:
        fn = rope._lookup(method).fn
        stated = [p.name for p in inspect.signature(fn).parameters.values() if p.default is not p.empty]
        assert not stated, (method, stated)


@pytest.mark.parametrize("method", rope.METHODS)
def test_a_length_is_taken_by_the_dynamic_methods_only(method):
    if method in rope.DYNAMIC_METHODS:
        rope.check_params(method, length=2 * T)
    else:
        with pytest.raises(PosxError, match="unknown parameter 'length'"):
            rope.check_params(method, length=2 * T)


def test_each_parameter_dataclass_is_a_group_of_the_eval_config():
    groups = {kind: name for name, kind in typing.get_type_hints(EvalConfig).items() if dataclasses.is_dataclass(kind)}
    for method, params in METHOD_PARAMS.items():
        if params is None:
            continue
        assert params in groups, method
        assert groups[params] == method or METHOD_PARAMS.get(groups[params]) is params, method


def _other(hint, default):
    """A value of the field's type that is not its default, valid for the config."""
    kind = next((a for a in typing.get_args(hint) if a is not type(None)), hint)
    if typing.get_origin(kind) is list:
        return [2.0] * (D // 2)
    if kind is bool:
        return not default
    return kind(2) if default is None else kind(default + 1)


@pytest.mark.parametrize("method", [m for m, kind in METHOD_PARAMS.items() if kind is not None])
def test_the_evaluation_and_extend_read_each_parameter_from_the_methods_group(method):
    """Each parameter a method takes is read from the group of its dataclass in ``eval``, by its name."""
    kind = METHOD_PARAMS[method]
    group = next(n for n, k in typing.get_type_hints(EvalConfig).items() if k is kind)
    hints = typing.get_type_hints(kind)
    for name, default in rope.method_params(method).items():
        if name == "length":
            continue
        ev = EvalConfig()
        setattr(getattr(ev, group), name, _other(hints[name], default))
        _, params = method_args(method, ev, 2.0, 2 * T)
        assert params[name] == _other(hints[name], default) != default, (method, name)


@pytest.mark.parametrize("method", ["yarn", "dynamic_yarn", "ntk_by_parts", "llama3"])
def test_the_export_writes_each_parameter_a_method_takes_under_its_name(method):
    """transformers' yarn and llama3 types name their parameters as posx's dataclasses do."""
    hints = typing.get_type_hints(METHOD_PARAMS[method])
    ev = EvalConfig()
    given = {}
    for name, default in rope.method_params(method).items():
        if name != "length":
            given[name] = _other(hints[name], default)
            setattr(getattr(ev, "llama3" if method == "llama3" else "yarn"), name, given[name])
    factor, params = method_args(method, ev, 2.0, 2 * T)
    record = RopeRecord(method=method, factor=factor, params=params, original_context=T)
    model = SimpleNamespace(pos=SimpleNamespace(base=10000.0), head_dim=D)
    written = rope_parameters(SimpleNamespace(rope=record, model=model, train_context=2 * T))
    assert {name: written[name] for name in given} == given


def test_the_code_map_walkthrough_names_files_that_exist():
    text = (REPO / "docs" / "code-map.md").read_text(encoding="utf-8")
    for question in ("How do I add a RoPE method?", "How do I add a `pos` field?"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {question}"))
        named = re.findall(r"`(posx/[\w/]+\.py)`", row)
        assert named, question
        assert all((REPO / path).is_file() for path in named), named
