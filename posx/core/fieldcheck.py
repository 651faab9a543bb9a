"""Checks for one field of a record read from JSON or YAML: of its type, finite, in range; each
returns the value or raises a one-line PosxError naming the file and the field."""

from __future__ import annotations

import functools
import json
import math
import numbers
import re

import yaml

from posx.core.errors import PosxError

MAX_CONTEXT = 1 << 24  # the largest context length a record may give (far beyond what posx trains)
MAX_STEPS = 1 << 53  # the largest step count a record may give
SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_DEPTH = 32  # the deepest nesting a record may hold (posx writes none deeper than 8)
MAX_NODES = 1 << 20  # the most values a record may hold, aliases counted each time (a YAML alias bomb)


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def refuse(where, name: str, value, expected: str, fix: str) -> PosxError:
    """``where`` names the record (a file, or "the rope record in <file>"), ``name`` the field."""
    return PosxError(f"{where} is incomplete or corrupt: {name}={_show(value)} is not {expected}; {fix}")


def is_integer(value) -> bool:
    """An integer, not a bool (True is an int to Python, never a count to posx)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value) -> bool:
    """A real number, not a bool; NaN and inf included (a range check after it excludes them)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_number(value) -> bool:
    return is_real(value) and math.isfinite(value)


def integer(value, name: str, where, fix: str, lo: int = 0, hi: int = MAX_STEPS) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise refuse(where, name, value, f"an integer from {lo} to {hi}", fix)
    return value


def text(value, name: str, where, fix: str, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value):
        raise refuse(where, name, value, "a string" if empty else "a non-empty string", fix)
    return value


def sha256(value, name: str, where, fix: str, optional: bool = False) -> str | None:
    """A sha256 hex digest (None too with ``optional``)."""
    if optional and value is None:
        return None
    if not isinstance(value, str) or not SHA256.fullmatch(value):
        raise refuse(where, name, value, "a sha256 hex digest", fix)
    return value


def finite_tree(value, name: str, where, fix: str):
    """Plain data (mappings, lists, strings, bools, None) whose every number is finite."""
    if isinstance(value, dict):
        for k, v in value.items():
            finite_tree(v, f"{name}.{k}", where, fix)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            finite_tree(v, f"{name}[{i}]", where, fix)
    elif not (value is None or isinstance(value, (str, bool)) or is_number(value)):
        raise refuse(where, name, value, "a finite number, a string, a bool or null", fix)
    return value


def _too_deep(where, fix: str) -> PosxError:
    return PosxError(f"{where} is damaged: it nests more than {MAX_DEPTH} deep (posx writes none so deep); {fix}")


def bounded(value, where, fix: str):
    """``value`` when it nests at most MAX_DEPTH deep and holds at most MAX_NODES values (aliases
    counted each time), walked without recursion."""
    stack, seen = [(value, 1)], 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise PosxError(
                f"{where} is damaged: it holds more than {MAX_NODES} values (posx writes none so big); {fix}"
            )
        if isinstance(node, (dict, list)):
            if depth > MAX_DEPTH:
                raise _too_deep(where, fix)
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return value


def load_json(text: str | bytes, where, fix: str):
    """A JSON record, ``bounded`` (other parse errors are the caller's to word)."""
    return _parsed(json.loads, text, where, fix)


def load_yaml(text: str, where, fix: str):
    """A YAML record (plain data: no tags), as ``load_json``."""
    return _parsed(functools.partial(yaml.load, Loader=yaml.CSafeLoader), text, where, fix)


def _parsed(parse, text, where, fix: str):
    try:
        return bounded(parse(text), where, fix)
    except RecursionError:
        raise _too_deep(where, fix) from None
