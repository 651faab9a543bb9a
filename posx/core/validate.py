"""The one walker of the schema's rules, for a composed config and every record read back: each
value against its field's type, ``Bound`` and Enum, then each group's ``check``; one line on failure."""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any

from posx.core.errors import PosxError, unknown
from posx.core.fieldcheck import is_integer, is_real

_TYPES = {bool: lambda v: isinstance(v, bool), int: is_integer, float: is_real, str: lambda v: isinstance(v, str)}


def validate(data: Any, kind: type, where: str = "", fix: str = "", at: str = "") -> Any:
    """``data`` as the dataclass ``kind`` (``where`` names a record, ``fix`` mends one, ``at`` prefixes keys)."""
    try:
        if not isinstance(data, Mapping):
            named = _fail(where, at.rstrip(".")) if at else PosxError(where or "the config")
            raise PosxError(f"{named} is a {type(data).__name__}, not a mapping")
        return _group(data, kind, at, where)
    except PosxError as exc:
        if not fix:
            raise
        raise PosxError(f"{exc}; {fix}") from None


def known(data: Any, kind: type) -> Any:
    """``data`` with only the keys ``kind`` has (a record of another posx version, checked for what this reads)."""
    if not isinstance(data, Mapping):
        return data
    fields = {f.name: f for f in dataclasses.fields(kind)}
    hints = _hints(kind)
    out = {}
    for name, value in data.items():
        if name not in fields:
            continue
        hint = hints[name]
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        out[name] = known(value, hint) if dataclasses.is_dataclass(hint) else value
    return out


def _fail(where: str, message: str) -> PosxError:
    """One line, whatever the value it quotes holds (a newline in a record's string stays ``\\n``)."""
    line = message.replace("\r", "\\r").replace("\n", "\\n")
    return PosxError(f"{where}: {line}" if where else line)


@cache
def _hints(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind)


def _group(data: Any, kind: type, at: str, where: str) -> Any:
    if not isinstance(data, Mapping):
        key = at.rstrip(".")  # a record (named by where) holds mappings; a config, groups of settings
        said = "is not a mapping" if where else f"must be a group of settings ({key}.<name>=<value>), not one value"
        raise _fail(where, f"{key}={data!r} {said}")
    fields = {f.name: f for f in dataclasses.fields(kind)}
    extra = sorted(str(k) for k in data if k not in fields)
    if extra:
        said = f"{at.rstrip('.') or where or 'the config'} has unknown keys {extra}; was it written by a newer posx?"
        raise _fail(where if at else "", said)
    missing = [n for n, f in fields.items() if n not in data and f.default is f.default_factory is dataclasses.MISSING]
    if missing:
        raise _fail(where, f"{at}{missing[0]} is missing")
    hints = _hints(kind)
    values = {
        name: _value(data[name], hints[name], fields[name].metadata.get("bound"), at + name, where)
        for name in fields
        if name in data
    }
    made = kind(**values)
    problem = made.check(at) if hasattr(made, "check") else None
    if problem:
        raise _fail(where, problem)
    return made


def _value(value: Any, hint: Any, rule: Any, key: str, where: str) -> Any:
    """One field's value, of type ``hint``, within ``rule`` (a ``posx.schema.fields.Bound`` or None)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if value is None:
            return None
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if dataclasses.is_dataclass(hint):
        return _group(value, hint, key + ".", where)
    if typing.get_origin(hint) is dict or hint is dict:
        if not isinstance(value, Mapping):
            raise _fail(where, f"{key}={value!r} is not a mapping")
        return _plain(dict(value), key, where)
    if typing.get_origin(hint) is list:
        return _list(value, typing.get_args(hint)[0], rule, key, where)
    if hint is Any:
        return _plain(value, key, where)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        if value not in hint.values():
            raise _fail(where, str(unknown(key, value, hint.values())))
        return value
    if not _TYPES[hint](value):
        raise _fail(where, f"{key}={value!r} is not a valid {hint.__name__}")
    if hint is float and not math.isfinite(value):
        raise _fail(where, f"{key}={value} must be a finite number")
    problem = rule.problem(key, value) if rule is not None and hint in (int, float) else None
    if problem:
        raise _fail(where, problem)
    return value


def _list(value: Any, hint: Any, rule: Any, key: str, where: str) -> list:
    """A list of plain values of type ``hint`` (or of such lists); with ``rule``: not empty, no repeats."""
    if not isinstance(value, (list, tuple)):
        raise _fail(where, f"{key}={value!r} is not a list; write a list in brackets, e.g. {key}=[{value!r}]")
    rows = typing.get_origin(hint) is list
    for i, item in enumerate(value):
        if isinstance(item, Mapping) or (isinstance(item, (list, tuple)) and not rows):
            kind = "mapping" if isinstance(item, Mapping) else "list"
            raise _fail(
                where, f"{key}[{i}]={item} is a {kind} inside a list; {key} takes plain values, e.g. {key}=[a,b]"
            )
    items = [_value(item, hint, rule, f"{key}[{i}]", where) for i, item in enumerate(value)]
    if rule is not None and rule.example and not items:
        raise _fail(where, f"{key} is empty; give at least one, e.g. {key}={rule.example}")
    repeated = [v for i, v in enumerate(items) if v in items[:i]] if rule is not None and rule.unique else []
    if repeated:
        raise _fail(where, f"{key} lists {repeated[0]} twice; give each value once")
    return items


def _plain(value: Any, key: str, where: str) -> Any:
    """Plain data of any shape (mappings, lists, strings, bools, None) whose every number is finite."""
    if isinstance(value, Mapping):
        return {k: _plain(v, f"{key}.{k}", where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{key}[{i}]", where) for i, v in enumerate(value)]
    if is_real(value) and not math.isfinite(value):
        raise _fail(where, f"{key}={value} must be a finite number")
    if not (value is None or isinstance(value, (str, bool)) or is_real(value)):
        raise _fail(where, f"{key}={value!r} is not plain data (a number, a string, a bool or null)")
    return value
