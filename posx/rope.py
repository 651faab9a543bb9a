"""RoPE inverse-frequency transforms for context-length extrapolation.

One pure function per method, one constant registry, one entry point: ``frequencies(method,
head_dim, base, factor, original_context, **params)`` returns the inverse frequencies (float32,
``(head_dim // 2,)``) and the attention factor, which the caller multiplies into cos and sin (so q
and k): the logits scale by its square. d = head_dim, theta_i = b^(-2i/d), b = base,
L = original_context (the trained length), s = factor; each formula and source: docs/encodings.md.

Decisions where the published definitions leave room:
  * ``none``, ``abf``, ``resonance`` and the windowed methods ignore ``factor`` (still checked
    >= 1); ``dynamic_yarn`` takes its scale from ``length`` alone, so ``factor`` must stay 1.0;
    ``length`` None reads as ``original_context`` (no scaling yet).
  * ``longrope`` without short_factor / long_factor divides by all ones (``none``'s
    frequencies); its attention factor still follows ``factor``.
  * The YaRN ramp follows the authors' code and transformers (linear in pair index between
    floor/ceil of the dimensions where a pair turns beta_fast and beta_slow times over L),
    not the paper's text, which ramps linearly in the rotation count itself.
  * ``resonance`` rounds only the wavelengths below L (the paper's "pre-critical" pairs); the
    authors' code (sheryc/resonance_rope) rounds every pair, which moves a wavelength >= L by
    less than 0.5 / L of itself. ``resonance_yarn`` takes yarn's factor.
  * The windowed methods (self_extend, rerope, lm_infinite, dca, streaming_llm) keep theta;
    their parameters are checked here and read by ``posx.model.windowed`` (their defaults:
    docs/encodings.md, "How the windowed methods place positions").
  * Where a method reduces to the identity (s = 1, or a dynamic method at length <= L) it
    returns theta itself, bit-identical to ``none``. All arithmetic is float64, cast to
    float32 once, at the end.

The arguments' bounds and rules are the dataclasses of ``posx.schema.methods``, walked by
``check_params``. A method from outside posx (``eval.methods=[module:function]`` or a ``posx.methods``
entry point, declared with ``posx.core.methods``) becomes the same registry record (``_lookup``).
"""

from __future__ import annotations

import dataclasses
import math
from types import MappingProxyType
from typing import Any, Callable, Mapping, NamedTuple, Optional

import torch

from posx.core.errors import PosxError, choose
from posx.core.methods import RopeMethod, attention_method, rope_method, user_method
from posx.core.validate import validate
from posx.schema.methods import MAX_FACTOR, METHOD_PARAMS, RopeArgs

__all__ = [
    "METHODS",
    "DYNAMIC_METHODS",
    "RopeMethod",
    "attention_method",
    "rope_method",
    "user_method",
    "window_of",
    "params_of",
    "MAX_FACTOR",  # the largest factor accepted, from posx.schema.methods
    "base_inv_freq",
    "check_params",
    "frequencies",
    "method_params",
    "wavelengths",
]


# --------------------------------------------------------------------------- helpers


def _theta(head_dim: int, base: float) -> torch.Tensor:
    """theta_i = base^(-2i/d) in float64."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim
    return 1.0 / (float(base) ** exponents)


def _yarn_attention(s: float) -> float:
    return 0.1 * math.log(s) + 1.0 if s > 1 else 1.0


def _yarn_inv_freq(
    head_dim: int, base: float, s: float, original_context: int, beta_fast: float, beta_slow: float, truncate: bool
) -> torch.Tensor:
    """YaRN's "NTK-by-parts" ramp between pure PI (low frequencies) and theta (high)."""
    theta = _theta(head_dim, base)
    if s == 1:
        return theta

    def corr_dim(rotations: float) -> float:
        # The dimension whose wavelength fits `rotations` times into the trained context.
        ratio = original_context / (2 * math.pi * rotations)
        return head_dim * math.log(ratio) / (2 * math.log(base))

    low, high = corr_dim(beta_fast), corr_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001
    pair = torch.arange(head_dim // 2, dtype=torch.float64)
    ramp = ((pair - low) / (high - low)).clamp(0.0, 1.0)
    gamma = 1.0 - ramp  # 1 keeps theta, 0 is pure interpolation
    return theta * (1.0 - gamma) / s + theta * gamma


# --------------------------------------------------------------------------- methods
# Each returns (float64 inverse frequencies, attention factor).


def _none(head_dim, base, factor, original_context, **_window):
    """theta itself: plain RoPE, and the methods that act in attention (Self-Extend, ReRoPE,
    LM-Infinite, DCA, StreamingLLM), whose parameters ``posx.model.windowed`` reads."""
    return _theta(head_dim, base), 1.0


def _pi(head_dim, base, factor, original_context):
    return _theta(head_dim, base) / factor, 1.0


def _ntk_base(head_dim, base, scale):
    """NTK-aware base, base · scale^(d / (d − 2)). With one pair (d = 2) its frequency is base'^0 = 1
    whatever base' is, so the base is left alone rather than raised to an infinite power."""
    return base if head_dim == 2 else base * scale ** (head_dim / (head_dim - 2))


def _ntk(head_dim, base, factor, original_context):
    return _theta(head_dim, _ntk_base(head_dim, base, factor)), 1.0


def _dynamic_ntk(head_dim, base, factor, original_context, *, length):
    ell = max(_current(length, original_context), original_context)
    if ell == original_context:
        return _theta(head_dim, base), 1.0
    scale = factor * ell / original_context - (factor - 1)
    return _theta(head_dim, _ntk_base(head_dim, base, scale)), 1.0


def _yarn(head_dim, base, factor, original_context, *, beta_fast, beta_slow, truncate, attention_factor):
    inv = _yarn_inv_freq(head_dim, base, factor, original_context, beta_fast, beta_slow, truncate)
    attention = _yarn_attention(factor) if attention_factor is None else float(attention_factor)
    return inv, attention


def _dynamic_yarn(head_dim, base, factor, original_context, *, length, beta_fast, beta_slow, truncate):
    if factor != 1:
        raise PosxError(
            f"dynamic_yarn takes its scale from length / original_context, got "
            f"factor={factor!r}; leave factor at 1 and pass length"
        )
    s = max(1.0, _current(length, original_context) / original_context)
    inv = _yarn_inv_freq(head_dim, base, s, original_context, beta_fast, beta_slow, truncate)
    return inv, _yarn_attention(s)


def _ntk_by_parts(head_dim, base, factor, original_context, *, beta_fast, beta_slow, truncate):
    return _yarn_inv_freq(head_dim, base, factor, original_context, beta_fast, beta_slow, truncate), 1.0


def _abf(head_dim, base, factor, original_context, *, new_base):
    return _theta(head_dim, new_base), 1.0


def _llama3(head_dim, base, factor, original_context, *, low_freq_factor, high_freq_factor):
    theta = _theta(head_dim, base)
    if factor == 1:
        return theta, 1.0
    wavelength = 2 * math.pi / theta
    long_wavelength = original_context / low_freq_factor  # longer than this: divide by s
    short_wavelength = original_context / high_freq_factor  # shorter than this: keep
    band = high_freq_factor - low_freq_factor
    smooth = (original_context / wavelength - low_freq_factor) / band  # 0 at long, 1 at short end
    mixed = (1.0 - smooth) * theta / factor + smooth * theta
    inv = torch.where(wavelength > long_wavelength, theta / factor, mixed)
    inv = torch.where(wavelength < short_wavelength, theta, inv)
    return inv, 1.0


def _longrope(head_dim, base, factor, original_context, *, short_factor, long_factor, length, attention_factor):
    is_long = _current(length, original_context) > original_context
    name, ext = ("long_factor", long_factor) if is_long else ("short_factor", short_factor)
    theta = _theta(head_dim, base)
    if ext is not None:
        ext = [float(x) for x in ext]  # checked by LongRopeConfig's bounds
        if len(ext) != head_dim // 2:
            raise PosxError(
                f"longrope {name} has {len(ext)} entries, expected head_dim // 2 = "
                f"{head_dim // 2}; give one factor per rotary pair"
            )
        theta = theta / torch.tensor(ext, dtype=torch.float64)
    if attention_factor is not None:
        return theta, float(attention_factor)  # checked by LongRopeConfig's bounds
    scaled = factor > 1 and original_context > 1
    return theta, math.sqrt(1 + math.log(factor) / math.log(original_context)) if scaled else 1.0


def resonance_round(inv_freq: torch.Tensor, original_context: int) -> torch.Tensor:
    """Resonance RoPE (Wang et al., ACL 2024 Findings, arXiv 2403.00071): each pair whose
    wavelength 2*pi/theta is below ``original_context`` gets the nearest integer wavelength, so
    its phase at position p + lambda equals that at p exactly; longer wavelengths are kept.
    None rounds to 0: the shortest wavelength is 2*pi."""
    wavelength = 2 * math.pi / inv_freq
    rounded = 2 * math.pi / torch.round(wavelength)
    return torch.where(wavelength < original_context, rounded, inv_freq)


def _resonance(head_dim, base, factor, original_context):
    return resonance_round(_theta(head_dim, base), original_context), 1.0


def _resonance_yarn(head_dim, base, factor, original_context, **yarn):
    inv, attention = _yarn(head_dim, base, factor, original_context, **yarn)
    return resonance_round(inv, original_context), attention


# --------------------------------------------------------------------------- registry


class _Method(NamedTuple):
    fn: Callable[..., tuple[torch.Tensor, float]]
    needs_context: bool = False  # original_context is required
    length: bool = False  # a dynamic method: it reads the current sequence length
    only: tuple[str, ...] = ()  # the fields of its dataclass (METHOD_PARAMS) it takes; empty: all
    params: Optional[type] = None  # the dataclass of its extra parameters (posx's own: METHOD_PARAMS)
    window: Optional[Callable[[Any, int], Any]] = None  # an attention-side method from outside posx


def _current(length, original_context: int) -> int:
    """The current sequence length of a dynamic method: ``length``, or ``original_context`` when None."""
    return original_context if length is None else int(length)


_RAMP = ("beta_fast", "beta_slow", "truncate")  # YarnConfig's ramp, without yarn's attention factor

# posx's own methods; ``params``, each one's dataclass, comes from METHOD_PARAMS below.
_OWN: dict[str, _Method] = {
    "none": _Method(_none),
    "pi": _Method(_pi),
    "ntk": _Method(_ntk),
    "dynamic_ntk": _Method(_dynamic_ntk, True, length=True),
    "yarn": _Method(_yarn, True),
    "dynamic_yarn": _Method(_dynamic_yarn, True, length=True, only=_RAMP),
    "ntk_by_parts": _Method(_ntk_by_parts, True, only=_RAMP),
    "abf": _Method(_abf),
    "llama3": _Method(_llama3, True),
    "longrope": _Method(_longrope, True, length=True),
    "resonance": _Method(_resonance, True),
    "resonance_yarn": _Method(_resonance_yarn, True),
    "self_extend": _Method(_none),
    "rerope": _Method(_none),
    "lm_infinite": _Method(_none),
    "dca": _Method(_none),
    "streaming_llm": _Method(_none),
}
_REGISTRY: Mapping[str, _Method] = MappingProxyType(
    {name: method._replace(params=METHOD_PARAMS[name]) for name, method in _OWN.items()}
)

METHODS: tuple[str, ...] = tuple(_REGISTRY)
DYNAMIC_METHODS: frozenset[str] = frozenset(name for name, method in _REGISTRY.items() if method.length)


# --------------------------------------------------------------------------- methods from outside posx


def _from_user(name: str) -> _Method:
    user, _ = user_method(name, choose(METHODS))
    if user.window is not None:
        return _Method(_none, params=user.params, window=user.window)

    def fn(head_dim, base, factor, original_context, **params):
        made = user.params(**params) if user.params is not None else None
        out = user.frequencies(_theta(head_dim, base), original_context, round(factor * original_context), made)
        return _checked(out, head_dim, name)

    return _Method(fn, True, params=user.params)


def _checked(out, head_dim: int, name: str) -> tuple[torch.Tensor, float]:
    """A frequency method's result from outside posx, as posx's own methods return it."""
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], torch.Tensor)):
        raise PosxError(
            f"eval.methods: {name} must return (inv_freq tensor, attention_factor), got {type(out).__name__}"
        )
    inv, attention = out[0].to(torch.float64), out[1]
    if inv.shape != (head_dim // 2,) or not bool(torch.isfinite(inv).all() and (inv > 0).all()):
        raise PosxError(
            f"eval.methods: {name} returned inverse frequencies of shape {tuple(inv.shape)}; expected "
            f"{head_dim // 2} finite positive numbers (head_dim // 2)"
        )
    if not (isinstance(attention, (int, float)) and math.isfinite(attention) and attention > 0):
        raise PosxError(f"eval.methods: {name} returned attention_factor={attention!r}; expected a positive number")
    return inv, float(attention)


# --------------------------------------------------------------------------- public API


def _lookup(method: str) -> _Method:
    """posx's own method ``method``, or the one it designates outside posx (``user_method``)."""
    if not isinstance(method, str):
        raise PosxError(f"unknown RoPE method {method!r}; {choose(METHODS)}")
    return _REGISTRY[method] if method in _REGISTRY else _from_user(method)


def window_of(method: str) -> Optional[Callable[[Any, int], Any]]:
    """An attention-side method's window maker from outside posx; None for posx's own and frequency methods."""
    return _lookup(method).window


def params_of(method: str) -> Optional[type]:
    """The dataclass of ``method``'s extra parameters (None: it takes none)."""
    return _lookup(method).params


def base_inv_freq(head_dim: int, base: float) -> torch.Tensor:
    """theta_i = base^(-2i/head_dim) for i < head_dim // 2, as float32."""
    validate({"head_dim": head_dim, "base": base}, RopeArgs, "RoPE")
    return _theta(head_dim, base).float()


def method_params(method: str) -> dict[str, object]:
    """The method's extra parameters and published defaults (a fresh dict); None: derived (length:
    original_context, attention_factor: the method's formula, longrope's factors: all ones)."""
    spec = _lookup(method)
    fields = dataclasses.fields(spec.params) if spec.params else ()
    defaults = {f.name: f.default for f in fields if not spec.only or f.name in spec.only}
    return {**defaults, **({"length": None} if spec.length else {})}


def check_params(method: str, factor: float = 1.0, **params) -> None:
    """Check a method's factor and extra parameters without a model (``frequencies`` does it first)."""
    accepted, schema = method_params(method), _lookup(method).params
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise PosxError(
            f"unknown parameter {unknown[0]!r} for RoPE method {method!r}; accepted: {', '.join(accepted) or 'none'}"
        )
    where = f"RoPE method {method!r}"
    validate({"factor": factor, "length": params.get("length")}, RopeArgs, where)
    if schema is not None:
        validate({k: v for k, v in {**accepted, **params}.items() if k != "length"}, schema, where)


def frequencies(
    method: str,
    head_dim: int,
    base: float = 10000.0,
    factor: float = 1.0,
    original_context: int | None = None,
    **params,
) -> tuple[torch.Tensor, float]:
    """Inverse frequencies (float32, (head_dim // 2,)) and the attention factor. Dynamic methods
    (DYNAMIC_METHODS) read ``length``, the current sequence length: recompute whenever it changes."""
    spec = _lookup(method)
    check_params(method, factor, **params)
    validate({"head_dim": head_dim, "base": base, "original_context": original_context}, RopeArgs, "RoPE")
    if spec.needs_context and original_context is None:
        raise PosxError(
            f"RoPE method {method!r} needs original_context (the trained context length); "
            "pass original_context=<block size used in training>"
        )
    context = None if original_context is None else int(original_context)
    inv, attention = spec.fn(int(head_dim), float(base), float(factor), context, **{**method_params(method), **params})
    return inv.to(torch.float32), float(attention)


def wavelengths(inv_freq: torch.Tensor) -> torch.Tensor:
    """Wavelength in positions of each rotary pair: 2*pi / inv_freq."""
    return 2 * math.pi / torch.as_tensor(inv_freq)
