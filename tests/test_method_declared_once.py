"""A RoPE method is declared once, in posx.schema.methods.METHOD_PARAMS with the dataclass of its
parameters: the Method choice, posx.rope's registry and defaults, and the eval.<method> groups
follow it; the code map's walkthrough names the files a new method touches."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

from posx import rope
from posx.schema.config import EvalConfig, ExtendMethod
from posx.schema.methods import METHOD_PARAMS, Method

REPO = Path(__file__).resolve().parents[1]


def test_the_choices_and_the_registry_list_the_declared_methods_in_order():
    assert [m.value for m in Method] == list(METHOD_PARAMS) == list(rope.METHODS)
    assert [m.value for m in ExtendMethod] == [*METHOD_PARAMS, "interpolate"]


def test_each_method_takes_its_dataclass_fields_with_their_defaults():
    for method, params in METHOD_PARAMS.items():
        taken = {k: v for k, v in rope.method_params(method).items() if k != "length"}
        declared = {f.name: f.default for f in dataclasses.fields(params)} if params else {}
        assert taken.items() <= declared.items(), method
        assert taken or not declared, method  # a dataclass declared is a dataclass read


def test_each_parameter_dataclass_is_a_group_of_the_eval_config():
    groups = {kind: name for name, kind in typing.get_type_hints(EvalConfig).items() if dataclasses.is_dataclass(kind)}
    for method, params in METHOD_PARAMS.items():
        if params is None or method == "abf":  # abf's one parameter is eval.abf_base
            continue
        assert params in groups, method
        assert groups[params] == method or METHOD_PARAMS.get(groups[params]) is params, method


def test_the_code_map_walkthrough_names_files_that_exist():
    text = (REPO / "docs" / "code-map.md").read_text(encoding="utf-8")
    for question in ("How do I add a RoPE method?", "How do I add a `pos` field?"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {question}"))
        named = re.findall(r"`(posx/[\w/]+\.py)`", row)
        assert named, question
        assert all((REPO / path).is_file() for path in named), named
