"""The one reader of ``model.json``'s first format (``posx-run/1``), which every run written before
the model record took the schema's sections has: its ``model`` record was one flat mapping, the
``model.*`` keys and the ``pos.*`` keys side by side, five of them named otherwise. ``upgrade``
turns it into the sections of the current format, which the schema's walker then checks as it
checks a new record; ``spelled`` names a key in a refusal as that file spells it."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import fields

from posx.core.errors import PosxError
from posx.schema import ModelConfig, PosConfig

FORMAT = "posx-run/1"

# Format 1's keys that the pos section names otherwise; every other key is the model.* or pos.*
# key of its own name.
_RENAMED = {
    "pos": "name",
    "rope_base": "base",
    "t5_num_buckets": "num_buckets",
    "t5_max_distance": "max_distance",
    "t5_per_layer": "per_layer",
}
_SPELLED = {new: old for old, new in _RENAMED.items()}
# What format 1 built for a key its record lacks (written before the option existed): it held
# these values where the sections hold null (resolved against T when a run starts).
_ABSENT = {
    "max_positions": 128,
    "cope_npos": 129,
    "fire_threshold": 512.0,
    "attn_scale_length": 128,
    "randomized_max": 1024,
}
_SECTION_KEY = re.compile(r"\bmodel\.(model|pos)\b(?:\.(\w+))?")  # a section, or a key in one


def upgrade(record: Mapping) -> dict:
    """A format-1 record with its flat ``model`` as the current ``model``: ``vocab_size`` and the
    ``model`` and ``pos`` sections (a key of neither stays beside them, for the walker to refuse)."""
    flat = record.get("model")
    if not isinstance(flat, Mapping):
        return dict(record)  # the walker says what is wrong with it
    model_keys, pos_keys = ({f.name for f in fields(kind)} for kind in (ModelConfig, PosConfig))
    spec: dict = {"model": {}, "pos": {}}
    for key, value in {**_ABSENT, **flat}.items():
        name = _RENAMED.get(key, key)
        if key in _RENAMED or name in pos_keys - model_keys:
            spec["pos"][name] = value
        elif name in model_keys - pos_keys or key in spec:  # "model": not a format-1 key, refused in its section
            spec["model"][name] = value
        else:
            spec[key] = value
    return {**record, "model": spec}


@contextlib.contextmanager
def spelled() -> Iterator[None]:
    """A refusal of an upgraded record names the key as the format-1 file spells it."""
    try:
        yield
    except PosxError as exc:
        raise PosxError(_SECTION_KEY.sub(_format_1_key, str(exc))) from None


def _format_1_key(match: re.Match) -> str:
    section, key = match[1], match[2]
    return "model" if key is None else f"model.{_SPELLED.get(key, key) if section == 'pos' else key}"
