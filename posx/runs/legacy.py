"""The one reader of records in the spellings posx wrote before (docs/run-directory.md, old runs):
``model.json``'s flat ``posx-run/1``, and ABF's base once ``eval.abf_base`` or an extension's
``new_base``, now ``eval.abf.new_base`` (``first_spelled``: as an evaluation's id first hashed it)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import fields

from posx.core.errors import PosxError
from posx.schema.config import ModelConfig, PosConfig

FORMAT = "posx-run/1"
# Format 1's keys that the pos section names otherwise; any other key is the model.* or pos.* key of its name.
_RENAMED = {"pos": "name", "rope_base": "base", **{f"t5_{k}": k for k in ("num_buckets", "max_distance", "per_layer")}}
_SPELLED = {new: old for old, new in _RENAMED.items()}
# What format 1 built for a key its record lacks (it predates the option), where the sections hold null.
_ABSENT = dict(max_positions=128, cope_npos=129, fire_threshold=512.0, attn_scale_length=128, randomized_max=1024)
_SECTION_KEY = re.compile(r"\bmodel\.(model|pos)\b(?:\.(\w+))?")  # a section, or a key in one (pos: renamed)
_ABF = ("abf", "new_base")  # eval.abf.new_base: the one key of ABF's base
_ABF_FIRST = "abf_base"  # eval.abf_base, its first spelling


def upgrade(record: Mapping, found: str) -> dict:
    """A record of format ``found``; of format 1, its flat ``model`` as the sections (a key of
    neither stays beside them, for the walker to refuse)."""
    flat = record.get("model")
    if found != FORMAT or not isinstance(flat, Mapping):
        return dict(record)  # a current record, or one the walker says what is wrong with
    model_keys, pos_keys = ({f.name for f in fields(kind)} for kind in (ModelConfig, PosConfig))
    spec: dict = {"model": {}, "pos": {}}
    for key, value in {**_ABSENT, **flat}.items():
        name = _RENAMED.get(key, key)
        if key in _RENAMED or name in pos_keys - model_keys:
            spec["pos"][name] = value
        elif name in model_keys - pos_keys or key in spec:  # "model" (no format-1 key): refused in its section
            spec["model"][name] = value
        else:
            spec[key] = value
    return {**record, "model": spec}


@contextlib.contextmanager
def spelled(found: str) -> Iterator[None]:
    try:
        yield
    except PosxError as exc:
        if found != FORMAT:
            raise
        raise PosxError(
            _SECTION_KEY.sub(lambda m: "model" + (f".{_SPELLED.get(m[2], m[2])}" if m[2] else ""), str(exc))
        ) from None


def _with_abf_base(section: Mapping, base) -> dict:
    group, name = _ABF
    return {**section, group: {**(section.get(group) or {}), name: base}}


def upgrade_eval(settings: Mapping) -> dict:
    """An ``eval`` section (config.yaml, eval.yaml) with ``abf_base`` read as ``abf.new_base``."""
    out = dict(settings)
    return _with_abf_base(out, out.pop(_ABF_FIRST)) if _ABF_FIRST in out else out


def upgrade_config(config: Mapping) -> dict:
    """A config.yaml as written now (an abf extension's top-level ``new_base``: ``eval.abf.new_base``)."""
    out = dict(config)
    if isinstance(out.get("eval"), Mapping):
        out["eval"] = upgrade_eval(out["eval"])
    if "new_base" in out:
        new_base = out.pop("new_base")
        if out.get("method") == "abf" and isinstance(out.get("eval"), Mapping):
            out["eval"] = _with_abf_base(out["eval"], new_base)
    return out


def first_spelled(settings: Mapping) -> dict:
    """Evaluation settings spelled as first written (``eval.abf_base``): what its identity hashes."""
    out = dict(settings)
    group, name = _ABF
    if isinstance(out.get(group), Mapping) and set(out[group]) == {name}:
        out[_ABF_FIRST] = out.pop(group)[name]
    return out
