"""The configuration reference, generated from the schema: a key's description is the comment at
the end of its line in ``posx.schema.config`` (read with ``ast`` and ``tokenize``), so the schema
stays one readable line per key and no second place can drift. A key without one fails a test."""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import io
import textwrap
import tokenize
import typing
from collections.abc import Iterator
from functools import cache
from typing import Any

from posx.schema.config import Config, ExtendRootConfig

INTRO = """\
Every key below is set on the command line as `dotted.key=value` (`posx train eval.tokens=4096`);
`posx train --cfg job` prints the composed config. The defaults are the schema's
(`posx/schema/config.py`); a group option such as `model=small` or `train=gpu` changes only
the keys its file in `configs/` names.
"""


@cache
def comments(cls: type) -> dict[str, str]:
    """Field name -> the comment at the end of its line, for the fields ``cls`` itself defines."""
    source = textwrap.dedent(inspect.getsource(cls))
    by_line = {
        tok.start[0]: tok.string.lstrip("#").strip()
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }
    body = ast.parse(source).body[0].body
    return {
        node.target.id: by_line[node.end_lineno]
        for node in body
        if isinstance(node, ast.AnnAssign) and node.end_lineno in by_line
    }


def description(cls: type, name: str) -> str:
    """The schema's comment on ``cls.name`` (from the class of its MRO that declares it); "" if none."""
    owner = next(c for c in cls.__mro__ if name in c.__dict__.get("__annotations__", {}))
    return comments(owner).get(name, "")


def _type_name(hint: Any) -> str:
    """``int``, ``float or null``, ``list of choice``, ``any`` ..."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    origin = typing.get_origin(hint)
    if origin is typing.Union:
        return f"{_type_name(args[0])} or null" if len(args) == 1 else " or ".join(map(_type_name, args))
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "choice"
    return "any" if hint is Any else getattr(hint, "__name__", str(hint))


def _choices(hint: Any) -> list[str]:
    """The members of an Enum type (also inside Optional or List)."""
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return [m.value for m in hint]
    return [c for a in typing.get_args(hint) for c in _choices(a)]


def _yaml(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, bool) or value is None:
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, list):
        return "[" + ", ".join(map(_yaml, value)) + "]"
    return str(value)


def dotted(tree: dict | None, prefix: str = "") -> dict:
    """{dotted key: value} of a nested dict (lists are values; None reads as empty)."""
    out = {}
    for key, value in (tree or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(dotted(value, name + "."))
        else:
            out[name] = value
    return out


def keys(cls: type, prefix: str = "") -> Iterator[tuple[str, type, dataclasses.Field, Any]]:
    """(dotted key, the class declaring it, its field, its type) for every field, depth first."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        yield f"{prefix}{f.name}", cls, f, hints[f.name]
        if dataclasses.is_dataclass(hints[f.name]):
            yield from keys(hints[f.name], f"{prefix}{f.name}.")


def _cell(text: str) -> str:
    """Text for a Markdown table cell: no column break, no HTML tag (``<run>`` is text)."""
    return text.replace("|", "\\|").replace("<", "&lt;")


def _table(rows: list[tuple[str, type, dataclasses.Field, Any]]) -> list[str]:
    lines = ["| key | type | default | description |", "| --- | --- | --- | --- |"]
    for key, cls, f, hint in rows:
        text = description(cls, f.name)
        if _choices(hint):
            each = "each " if typing.get_origin(hint) is list else ""
            text += f" ({each}one of: {', '.join(f'`{c}`' for c in _choices(hint))})"
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        lines.append(f"| `{key}` | {_type_name(hint)} | `{_cell(_yaml(default))}` | {_cell(text)} |")
    return lines


def _sections(cls: type, skip: set[str]) -> list[str]:
    """A table of the top-level keys of ``cls``, then one per nested config (but ``skip``'s keys)."""
    rows = [r for r in keys(cls) if r[0] not in skip and not any(r[0].startswith(s + ".") for s in skip)]
    groups = {r[0]: r for r in rows if dataclasses.is_dataclass(r[3])}
    out = _table([r for r in rows if "." not in r[0] and r[0] not in groups])
    for key, (_, owner, f, _) in groups.items():
        members = [r for r in rows if r[0].rsplit(".", 1)[0] == key and r[0] not in groups]
        text = description(owner, f.name)
        out += ["", f"### `{key}`", "", _cell(text[:1].upper() + text[1:]) + ".", "", *_table(members)]
    return out


def render_markdown() -> str:
    """The configuration reference as Markdown: ``Config``'s keys, then those ``ExtendRootConfig`` adds."""
    train = {key for key, *_ in keys(Config)}
    lines = [
        INTRO,
        "## posx train",
        "",
        *_sections(Config, set()),
        "",
        "## posx extend",
        "",
        "`posx extend` takes every key above (the model and positional encoding come from the parent run) and these:",
        "",
        *_sections(ExtendRootConfig, train),
    ]
    return "\n".join(lines) + "\n"
