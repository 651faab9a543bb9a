"""``--where KEY=VALUE`` of ``posx report`` and ``posx compare``: the runs whose identity holds every
condition. Values compare as text, or as numbers where both are written as numbers (``NUMBER``);
a condition that cannot select anything is refused in one line. See docs/evaluation.md.
"""

from __future__ import annotations

import re

from posx.core.errors import PosxError
from posx.report.store.groups import RENAMED, differences

SHOWN = 12  # keys or values a refusal lists


def parse(conditions: list[str] | None) -> list[tuple[str, str]]:
    """``["model.block=llama", ...]`` -> [("model.block", "llama"), ...]; a malformed one is refused."""
    out = []
    for raw in conditions or []:
        key, eq, value = str(raw).partition("=")
        key = key.strip()
        if not eq or not key or not value.strip():
            raise PosxError(f"--where {raw}: write KEY=VALUE, e.g. --where T=64 or --where model.block=llama")
        out.append((RENAMED.get(key, key), value.strip()))
    return out


# A number as posx writes one (digits, a point, an exponent): no underscores, spaces, nan or inf,
# which Python's float() would also read (T=3_2 is no way to write 32).
NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _number(text: str) -> float | None:
    return float(text) if NUMBER.fullmatch(text) else None


def _same(have, want: str) -> bool:
    """Whether ``have`` is ``want``: as numbers where both are written as numbers, else as text."""
    have = str(have)
    if have == want:
        return True
    a, b = _number(have), _number(want)
    return a is not None and b is not None and a == b


def _listed(items) -> str:
    items = sorted(items)
    return ", ".join(items[:SHOWN]) + (f", ... ({len(items)} in all)" if len(items) > SHOWN else "")


def _check(key: str, value: str, identities: list[dict]) -> None:
    """One condition against every run: its key must exist and its value occur."""
    values = {ident[key] for ident in identities if key in ident}
    if not values:
        hint = differences(identities) or sorted({k for ident in identities for k in ident})
        raise PosxError(f"--where {key}={value}: no run has the key {key}; keys that differ here: {_listed(hint)}")
    if not any(_same(v, value) for v in values):
        raise PosxError(f"--where {key}={value} matches no run; {key} here is one of: {_listed(values)}")


def keep(identities: list[dict], conditions: list[tuple[str, str]]) -> list[bool]:
    """Per identity, whether every condition holds; refuses a condition that selects nothing."""
    for key, value in conditions:
        _check(key, value, identities)
    kept = [all(k in ident and _same(ident[k], v) for k, v in conditions) for ident in identities]
    if conditions and not any(kept):
        said = " ".join(f"{k}={v}" for k, v in conditions)
        raise PosxError(f"--where {said}: each matches some run, but no run matches them all")
    return kept
