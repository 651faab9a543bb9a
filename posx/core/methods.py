"""RoPE methods declared outside posx: ``rope_method`` (frequencies) or ``attention_method``, each
with its parameters' dataclass, and ``user_method``, which loads one named in ``eval.methods``
and checks its declaration. Users import these from ``posx.rope``."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, NamedTuple, Optional

import torch

from posx.core import imports
from posx.core.errors import PosxError

_SIGNATURES = {"frequencies": "(inv_freq, original_context, length, params)", "window": "(params, original_context)"}


class RopeMethod(NamedTuple):
    """A method declared by ``rope_method`` or ``attention_method``, and its parameters' dataclass."""

    frequencies: Optional[Callable[..., tuple[torch.Tensor, float]]] = None
    window: Optional[Callable[[Any, int], Any]] = None
    params: Optional[type] = None


def rope_method(params: Optional[type] = None) -> Callable[[Callable], RopeMethod]:
    """Declare ``fn(inv_freq, original_context, length, params) -> (inv_freq, attention_factor)``:
    theta_i (float64, shape (head_dim // 2,)), T, the length to reach (round(s * T)) and the
    validated ``params`` (an instance of the dataclass, or None) give the new inverse frequencies
    and the factor that multiplies cos and sin (1.0: none)."""
    return lambda fn: RopeMethod(frequencies=fn, params=params)


def attention_method(params: Optional[type] = None) -> Callable[[Callable], RopeMethod]:
    """Declare ``fn(params, original_context) -> posx.model.windowed.Windowed``: a method that
    keeps theta and changes which positions meet in attention, as Self-Extend does."""
    return lambda fn: RopeMethod(window=fn, params=params)


def user_method(name: str, own: str) -> tuple[RopeMethod, imports.Source]:
    """The method ``name`` designates outside posx, checked: its declaration, signature, parameters."""
    obj, source = imports.load(name, imports.METHOD_GROUP, "eval.methods", own)
    named = f"eval.methods: {name}"
    if not isinstance(obj, RopeMethod):
        raise PosxError(
            f"{named} is a {type(obj).__name__}, not a declared method; decorate it with "
            "@posx.rope.rope_method(Params) or @posx.rope.attention_method(Params)"
        )
    if obj.params is not None and not (isinstance(obj.params, type) and dataclasses.is_dataclass(obj.params)):
        raise PosxError(f"{named}: its params must be a dataclass (or None), got {obj.params!r}")
    kind = "frequencies" if obj.frequencies is not None else "window"
    fn = getattr(obj, kind)
    try:
        inspect.signature(fn).bind(*(None for _ in _SIGNATURES[kind].split(",")))
    except (TypeError, ValueError):
        raise PosxError(f"{named}: {getattr(fn, '__name__', fn)!s} must take {_SIGNATURES[kind]}") from None
    return obj, source
