"""A model spec in one line, by schema key: ``spec(n_layer=2, pos="alibi", base=500.0)``."""

from __future__ import annotations

from dataclasses import fields, replace

from posx.model.spec import ModelSpec
from posx.schema.config import ModelConfig, PosConfig

_MODEL = {f.name for f in fields(ModelConfig)} - {"name"}
_POS = {f.name for f in fields(PosConfig)} - {"name"}


def _split(keys: dict) -> tuple[dict, dict]:
    unknown = set(keys) - _MODEL - _POS
    if unknown:
        raise TypeError(f"neither a model.* nor a pos.* key: {sorted(unknown)}")
    return {k: v for k, v in keys.items() if k in _MODEL}, {k: v for k, v in keys.items() if k in _POS}


def spec(pos: str = "rope", vocab_size: int = 256, T: int = 128, **keys) -> ModelSpec:
    """The schema's defaults but ``keys`` (each a ``model.*`` or ``pos.*`` key; ``pos``: pos.name),
    the nulls resolved against T, as a run that trains at T and is evaluated to 8T has them."""
    model, positions = _split(keys)
    return ModelSpec.resolved(ModelConfig(**model), PosConfig(name=pos, **positions), T, 8 * T, vocab_size)


def changed(base: ModelSpec, **keys) -> ModelSpec:
    """``base`` with ``keys`` (as ``spec`` takes them) set."""
    model, positions = _split({k: v for k, v in keys.items() if k != "pos"})
    if "pos" in keys:
        positions["name"] = keys["pos"]
    return replace(base, model=replace(base.model, **model), pos=replace(base.pos, **positions))
