"""RoPE rescaling applied to a model: which ``posx.rope.frequencies`` call each evaluation row
makes (its parameters from ``eval.<method>``), the frequencies a model trained with, and context
managers that install other frequencies (or a window) and always put the trained ones back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import typing
from collections.abc import Mapping, Sequence
from typing import Callable, Iterator

import torch

from posx import rope
from posx.core.errors import PosxError
from posx.core.validate import validate
from posx.model.gpt import GPT
from posx.model.roperecord import RopeRecord
from posx.model.windowed import DualChunk, Grouping, Lambda, Rectified, Sinks, Windowed
from posx.schema.config import EvalConfig
from posx.schema.methods import METHOD_PARAMS

# Each method's group of ``eval``: the field of ``EvalConfig`` of its dataclass in ``METHOD_PARAMS``
# (``eval.yarn`` also holds the ramp of dynamic_yarn, ntk_by_parts and resonance_yarn).
_FIELD_OF = {kind: name for name, kind in typing.get_type_hints(EvalConfig).items() if dataclasses.is_dataclass(kind)}
_GROUP = {method: _FIELD_OF[kind] for method, kind in METHOD_PARAMS.items() if kind is not None}
# Methods whose factor is not the row's scale s: (ev, s) -> factor, and the key that sets it.
_FACTOR: dict[str, tuple[Callable[[object, float], float], str | None]] = {
    "dynamic_ntk": (
        lambda ev, s: s if ev.dynamic_ntk.factor is None else float(ev.dynamic_ntk.factor),
        "eval.dynamic_ntk.factor",
    ),
    "dynamic_yarn": (lambda ev, s: 1.0, None),  # s = max(1, L / T) inside
}


def _plain(value):
    """A config value as ``rope.frequencies`` and model.json take it: a list for a list."""
    return list(value) if isinstance(value, Sequence) and not isinstance(value, str) else value


# Methods that act in attention (``posx.model.windowed``): their window from their parameters and T.
_WINDOWS: dict[str, Callable[[dict, int], Windowed]] = {
    "self_extend": lambda p, T: Grouping.resolve(p["group"], p["window"], T),
    "rerope": lambda p, T: Rectified.resolve(p["window"], p["leak_factor"], p["log_scale"], T),
    "lm_infinite": lambda p, T: Lambda.resolve(p["window"], p["global_tokens"], T),
    "dca": lambda p, T: DualChunk.resolve(p["chunk_size"], p["local_window"], T),
    "streaming_llm": lambda p, T: Sinks.resolve(p["sinks"], p["recent"], T),
}
WINDOWED = frozenset(_WINDOWS)


def param_key(method: str) -> str:
    """The ``eval.params`` key of a method from outside posx: the name after its ``:``, or its entry point's."""
    return str(method).rpartition(":")[2]


def user_params(method: str, ev: EvalConfig) -> dict:
    """The parameters ``eval.params`` gives a method from outside posx (none: its defaults)."""
    given = (ev.params or {}).get(param_key(method)) or {}
    if not isinstance(given, Mapping):
        raise PosxError(f"eval.params.{param_key(method)}={given!r} must be a mapping of {method}'s parameters")
    return dict(given)


def method_args(method: str, ev: EvalConfig, scale: float, length: int) -> tuple[float, dict]:
    """(factor, params) of ``rope.frequencies`` for ``method`` at a row of ``scale`` and ``length``: its
    group's fields (``_GROUP``) and, if dynamic, the length; one from outside posx, eval.params.<name>."""
    if method not in rope.METHODS:
        return scale, user_params(method, ev)
    group = getattr(ev, _GROUP[method]) if method in _GROUP else None
    params = {name: length if name == "length" else _plain(getattr(group, name)) for name in rope.method_params(method)}
    factor = _FACTOR[method][0](ev, scale) if method in _FACTOR else scale
    return factor, params


def _where(method: str) -> str | None:
    """The config key a failing method's error names: its group, or the key of its factor."""
    if method not in rope.METHODS:
        return f"eval.params.{param_key(method)}"
    return f"eval.{_GROUP[method]}" if method in _GROUP else _FACTOR.get(method, (None, None))[1]


def method_frequencies(
    method: str, ev, head_dim: int, base: float, train_context: int, scale: float, length: int
) -> tuple[torch.Tensor, float]:
    """Inverse frequencies and attention factor of ``method`` for one (scale, length) row."""
    factor, params = method_args(method, ev, scale, length)
    try:
        return rope.frequencies(method, head_dim, base=base, factor=factor, original_context=train_context, **params)
    except PosxError as exc:
        group = _where(method)
        raise PosxError(f"{group}: {exc}" if group else str(exc)) from None


def is_windowed(method: str) -> bool:
    """Whether ``method`` acts in attention: posx's own (``WINDOWED``) or one from outside posx."""
    return method in WINDOWED or (method not in rope.METHODS and rope.window_of(method) is not None)


def method_window(method: str, ev: EvalConfig, train_context: int) -> Windowed | None:
    """The windowed attention of ``method``, None for a frequency method; an outside one's params checked."""
    if method in WINDOWED:
        _, params = method_args(method, ev, 1.0, train_context)
        return _WINDOWS[method](params, train_context)
    if not is_windowed(method):
        return None
    kind, given = rope.params_of(method), user_params(method, ev)
    made = validate(given, kind, at=f"eval.params.{param_key(method)}.") if kind is not None else None
    return rope.window_of(method)(made, train_context)


def check_methods(
    ev: EvalConfig, methods, head_dim: int, base: float, train_context: int, rows: list[tuple[float, int]]
) -> None:
    """Compute every method at every (scale, length) row once: a bad parameter fails before any work."""
    for method in methods:
        for scale, length in rows:
            method_frequencies(method, ev, head_dim, base, train_context, scale, length)


def trained_frequencies(
    record: RopeRecord, head_dim: int, base: float, train_context: int, where: str
) -> tuple[torch.Tensor, float]:
    """(inv_freq, attention_factor) of ``record``: its recorded numbers, else its recipe recomputed."""
    if record.inv_freq is not None:
        inv_freq = torch.tensor(record.inv_freq, dtype=torch.float32)
        if inv_freq.shape != (head_dim // 2,):
            raise PosxError(
                f"the rope record in {where} holds {inv_freq.numel()} frequencies, "
                f"expected head_dim // 2 = {head_dim // 2}; re-run the extension"
            )
        return inv_freq, 1.0 if record.attention_factor is None else record.attention_factor
    original = record.original_context if record.original_context is not None else train_context
    return rope.frequencies(
        record.method, head_dim, base=base, factor=record.factor, original_context=original, **record.params
    )


def install_trained(model: GPT, record: RopeRecord, train_context: int, where: str) -> None:
    """Make the model rotate with (and ``rescaled`` return to) the frequencies it trained with."""
    if model.pos.uses_rope:
        cfg = model.config
        trained = trained_frequencies(record, cfg.head_dim, cfg.pos.base, train_context, where)
        model.pos.set_trained_frequencies(*trained)
    elif record.method != "none":
        raise PosxError(
            f"{where} records RoPE method {record.method!r} but its model "
            f"({model.config.pos.name}) has no RoPE; it is inconsistent"
        )


@contextlib.contextmanager
def rescaled(model: GPT, inv_freq: torch.Tensor | None, attention_factor: float = 1.0) -> Iterator[GPT]:
    """Rotate with other frequencies inside the block; the trained ones come back on exit,
    whatever happens. ``inv_freq`` None, or a model without RoPE: the model as it is."""
    with contextlib.ExitStack() as undo:
        if inv_freq is not None and model.pos.uses_rope:
            model.pos.set_frequencies(inv_freq, attention_factor)
            undo.callback(model.pos.reset)
        yield model


@contextlib.contextmanager
def absolute_beyond(model: GPT, mode: str) -> Iterator[GPT]:
    """A learned-absolute model takes ``mode`` past its table inside the block (``none`` on exit)."""
    with contextlib.ExitStack() as undo:
        if model.pos.kind == "absolute":
            model.pos.set_beyond(mode)
            undo.callback(model.pos.set_beyond, "none")
        yield model


@contextlib.contextmanager
def windowed_attention(model: GPT, window: Windowed | None) -> Iterator[GPT]:
    """Attend with ``window`` inside the block, where the model has RoPE; ordinary attention on exit."""
    with contextlib.ExitStack() as undo:
        if window is not None and model.pos.uses_rope:
            model.pos.window = window
            undo.callback(setattr, model.pos, "window", None)
        yield model
