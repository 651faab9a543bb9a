"""A positional encoding from outside posx: ``pos=custom pos.impl=mymod:MyEncoding``, a
``PositionalEncoding`` subclass overriding at least one hook, built as ``MyEncoding(spec, params)``
with ``params`` its ``Params`` dataclass validated from ``pos.params`` (None without one). Importing
the class runs its module. See docs/own-method.md.
"""

from __future__ import annotations

import dataclasses
import inspect

from posx.core import imports
from posx.core.errors import PosxError
from posx.core.validate import validate
from posx.model.positional import PositionalEncoding

HOOKS = ("embed", "rotate", "distance_bias", "attn_masks", "attend")  # at least one is the class's own


def load_encoding(impl: str) -> tuple[type[PositionalEncoding], imports.Source]:
    """The class ``pos.impl`` names, checked before any work: every problem is one PosxError line."""
    if not impl:
        raise PosxError("pos=custom needs pos.impl=module:Class (or an entry point of posx.encodings)")
    cls, source = imports.load(impl, imports.ENCODING_GROUP, "pos.impl", "pos=custom takes a class")
    named = f"pos.impl={impl}"
    if not (isinstance(cls, type) and issubclass(cls, PositionalEncoding)):
        raise PosxError(f"{named} is not a subclass of posx.model.positional.PositionalEncoding")
    if not any(getattr(cls, hook) is not getattr(PositionalEncoding, hook) for hook in HOOKS):
        raise PosxError(
            f"{named} overrides none of the hooks {', '.join(HOOKS)}, so it adds no positions; "
            "implement one (or use pos=nope)"
        )
    kind = getattr(cls, "Params", None)
    if kind is not None and not (isinstance(kind, type) and dataclasses.is_dataclass(kind)):
        raise PosxError(f"{named}: its Params must be a dataclass (or absent), got {kind!r}")
    try:
        inspect.signature(cls).bind(None, None)
    except (TypeError, ValueError):
        raise PosxError(f"{named}: its __init__ must take (spec, params)") from None
    return cls, source


def check_params(impl: str, params) -> object:
    """``pos.params`` as the class's ``Params`` (None without one), each bound and rule checked."""
    cls, _ = load_encoding(impl)
    kind = getattr(cls, "Params", None)
    given = {} if params is None else params
    if kind is None:
        if given:
            raise PosxError(f"pos.params={given} is given, but pos.impl={impl} takes no parameters (no Params)")
        return None
    accepted = [f.name for f in dataclasses.fields(kind)]
    unknown = sorted(str(k) for k in given if k not in accepted)
    if unknown:
        raise PosxError(f"pos.params.{unknown[0]} is not a parameter of {impl}; accepted: {', '.join(accepted)}")
    return validate(given, kind, at="pos.params.")


def build_custom(spec) -> PositionalEncoding:
    """The encoding ``spec.pos.impl`` names, built from the model's spec and its parameters."""
    cls, _ = load_encoding(spec.pos.impl)
    return cls(spec, check_params(spec.pos.impl, spec.pos.params))
