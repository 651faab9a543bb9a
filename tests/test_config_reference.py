"""The configuration reference is generated from the schema, and documents every key."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from posx.configure.reference import description, keys, render_markdown
from posx.schema.config import Config, ExtendRootConfig

REPO = Path(__file__).resolve().parents[1]
ALL_KEYS = list(keys(ExtendRootConfig))


@pytest.mark.parametrize("key,cls,field,hint", ALL_KEYS, ids=[k[0] for k in ALL_KEYS])
def test_every_schema_key_has_a_description(key, cls, field, hint):
    assert description(cls, field.name).strip(), f"{key}: add a comment at the end of its line in posx/schema/"


def test_the_reference_has_a_row_for_every_key_with_its_default_and_description():
    page = render_markdown()
    assert "| `train.steps` | int | `800` | optimizer steps |" in page
    assert "| `eval.methods` | list of " in page and "`[none, pi, ntk, yarn, abf]`" in page
    assert "| `extend.lr` | float | `0.0003` |" in page
    for key, *_ in ALL_KEYS:
        assert f"`{key}`" in page, key
    # extend's section holds only the keys posx extend adds
    assert page.split("## posx extend")[1].count("`train.") == 0
    assert "&lt;run&gt;" not in page and "&lt;run>" in page  # a <run> placeholder is text, not a tag


def test_inherited_fields_take_their_description_from_the_declaring_class():
    assert description(ExtendRootConfig, "seed") == description(Config, "seed") != ""


def test_the_mkdocs_hook_replaces_the_placeholder():
    spec = importlib.util.spec_from_file_location("posx_docs_hooks", REPO / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = (REPO / "docs" / "reference" / "configuration.md").read_text()
    out = hooks.on_page_markdown(page, page=None, config={}, files=[])
    assert hooks.PLACEHOLDER in page and hooks.PLACEHOLDER not in out
    assert out.startswith("# Configuration reference") and render_markdown() in out
    assert hooks.on_page_markdown("# Other page\n", page=None, config={}, files=[]) == "# Other page\n"
