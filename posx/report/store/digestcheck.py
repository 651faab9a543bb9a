"""A digest checked field by field before anything in it is used: ``seal`` hashes every other field,
``valid`` checks the seal and each field's type and range, so what passes is what
``posx.report.store.digest.compute`` could have written; anything else is read from the files again."""

from __future__ import annotations

import hashlib
import json
import math

from posx.core.fieldcheck import is_number

KNOWN_TABLES = ("extrapolation.csv", "positions.csv", "passkey.csv", "metrics.csv", "tasks.csv")
HEX = set("0123456789abcdef")
LISTED = {"encoding", "T", "steps", "val_ppl", "evaluated_lengths", "parent"}  # a listing's keys (posx runs)


def seal(digest: dict) -> str:
    """A hash of the digest's fields but ``seal``."""
    body = {k: v for k, v in digest.items() if k != "seal"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


def sealed(digest: dict) -> dict:
    return {**digest, "seal": seal(digest)}


def _hex(value) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 64 and set(value) <= HEX


def _texts(value) -> bool:
    """A mapping of text to text (an identity)."""
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _names(value, allowed) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v in allowed for v in value)


def _columns(value) -> bool:
    return isinstance(value, dict) and all(
        k in KNOWN_TABLES and isinstance(v, list) and all(isinstance(c, str) for c in v) for k, v in value.items()
    )


def _lineage(value) -> bool:
    return value is None or (
        isinstance(value, dict)
        and set(value) == {"parent", "parent_path"}
        and isinstance(value["parent"], str)
        and (value["parent_path"] is None or isinstance(value["parent_path"], str))
    )


def _cell(value) -> bool:
    """A listed T or step count: a number, or what an unfinished run's config.yaml holds (text, null)."""
    return value is None or isinstance(value, str) or is_number(value)


def _listing(value) -> bool:
    if not isinstance(value, dict) or set(value) != LISTED:
        return False
    ppl = value["val_ppl"]
    ppl_ok = ppl is None or (isinstance(ppl, float) and (ppl == math.inf or (is_number(ppl) and ppl > 0)))
    lengths = value["evaluated_lengths"]
    return (
        ppl_ok
        and isinstance(value["encoding"], str)
        and isinstance(value["parent"], str)
        and _cell(value["T"])
        and _cell(value["steps"])
        and isinstance(lengths, str)
        and all(part.isdigit() for part in lengths.split(",") if lengths)
    )


def whole(value) -> bool:
    """A whole number a table's seed column (64-bit) can hold."""
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63


def valid(digest, fmt: str, damageable) -> bool:
    """Whether posx wrote ``digest`` in ``fmt``, unchanged (``damageable``: names ``damaged`` may hold)."""
    fields = {
        "format": lambda v: v == fmt,
        "stamp": _hex,
        "content": _hex,
        "seed": lambda v: v is None or whole(v),
        "config": lambda v: isinstance(v, bool),
        "finished": lambda v: isinstance(v, bool),
        "identity": _texts,
        "eval": _texts,
        "lineage": _lineage,
        "evaluated_at": lambda v: is_number(v) and v >= 0,
        "columns": _columns,
        "left_out": lambda v: _names(v, KNOWN_TABLES),
        "listing": _listing,
        "damaged": lambda v: _names(v, damageable),
        "seal": _hex,
    }
    if not isinstance(digest, dict) or set(digest) != set(fields):
        return False
    return all(check(digest[name]) for name, check in fields.items()) and digest["seal"] == seal(digest)
