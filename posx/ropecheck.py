"""The checks of ``posx.rope``'s arguments: each refuses a bad value with one PosxError line
that names it and says what would do.

One check per method, of its extra parameters alone (no head_dim needed), so a config can be
checked before any model exists; ``posx.rope``'s registry pairs each method with its check and
``posx.rope.check_params`` runs it, with every parameter given (the published defaults, which
the registry states, under the caller's values). Beside them, the checks of the arguments every
method shares (head_dim, base, factor, original_context, length), and the bounds they use.
"""

from __future__ import annotations

import math

from posx.core.errors import PosxError
from posx.core.fieldcheck import is_integer, is_real

MAX_FACTOR = 1e6  # a context a million times the trained one: past any use, short of overflow
MIN_BETA, MAX_BETA = 1e-9, 1e9  # rotations over the trained context, far past the published 1 and 32 both ways


# --------------------------------------------------------------------------- shared arguments


def check_head_dim(head_dim) -> None:
    """head_dim: an even integer >= 2."""
    if not is_integer(head_dim) or head_dim < 2 or head_dim % 2:
        raise PosxError(f"RoPE head_dim must be an even integer >= 2, got {head_dim!r}; pick n_embd / n_head even")


def check_base(base, what: str = "RoPE base", usual: str = "10000") -> None:
    """A rotary base (``what``): a finite number > 1."""
    if not is_real(base) or not (1 < base < math.inf):
        raise PosxError(f"{what} must be a finite number > 1, got {base!r}; the usual value is {usual}")


def check_factor(factor) -> None:
    """The scale factor s: a finite number from 1 to ``MAX_FACTOR``."""
    if not is_real(factor) or not (1 <= factor <= MAX_FACTOR):
        raise PosxError(
            f"RoPE factor must be a finite number from 1 to {MAX_FACTOR:g}, got {factor!r}; "
            "use eval_length / original_context, or 1 for no scaling"
        )


def check_original_context(original_context, method: str, needs_context: bool) -> None:
    """original_context: a positive integer, or None where ``method`` does not need it."""
    if original_context is not None and (not is_integer(original_context) or original_context < 1):
        raise PosxError(
            f"original_context must be a positive integer, got "
            f"{original_context!r}; pass the context length the model was trained at"
        )
    if needs_context and original_context is None:
        raise PosxError(
            f"RoPE method {method!r} needs original_context (the trained context "
            "length); pass original_context=<block size used in training>"
        )


def current_length(length, original_context: int) -> int:
    """The current sequence length of a dynamic method: ``length``, or ``original_context`` when None."""
    if length is None:
        return original_context
    if not is_integer(length) or length < 1:
        raise PosxError(f"RoPE length must be a positive integer, got {length!r}; pass the current sequence length")
    return int(length)


def _check_betas(beta_fast: float, beta_slow: float) -> None:
    if not (is_real(beta_fast) and is_real(beta_slow) and MIN_BETA <= beta_slow < beta_fast <= MAX_BETA):
        raise PosxError(
            f"YaRN needs {MIN_BETA:g} <= beta_slow < beta_fast <= {MAX_BETA:g}, got beta_slow={beta_slow!r}, "
            f"beta_fast={beta_fast!r}; the published values are 1 and 32"
        )


def _given_attention(value, method: str) -> float:
    """A user-given attention factor: a finite positive number."""
    if not is_real(value) or not (0 < value < math.inf):
        raise PosxError(
            f"{method} attention_factor must be a finite positive number (or null for the "
            f"method's formula), got {value!r}"
        )
    return float(value)


# --------------------------------------------------------------------------- one per method
# Each is called with all of its method's parameters (``posx.rope.check_params``).


def check_none(**params) -> None:
    """No extra parameters to check."""


def check_ramp(*, beta_fast, beta_slow, truncate, **_) -> None:
    """The YaRN ramp's betas (yarn, dynamic_yarn, ntk_by_parts, resonance_yarn)."""
    _check_betas(beta_fast, beta_slow)


def check_yarn(*, attention_factor, **params) -> None:
    """The ramp, and a given attention factor."""
    check_ramp(**params)
    if attention_factor is not None:
        _given_attention(attention_factor, "yarn")


def check_abf(*, new_base) -> None:
    """ABF's new base."""
    check_base(new_base, "abf new_base", "500000 (Llama 2 Long) or 1000000 (Code Llama)")


def check_llama3(*, low_freq_factor, high_freq_factor) -> None:
    """Llama 3's band: 0 < low_freq_factor < high_freq_factor."""
    if not (is_real(low_freq_factor) and is_real(high_freq_factor) and 0 < low_freq_factor < high_freq_factor):
        raise PosxError(
            f"llama3 needs 0 < low_freq_factor < high_freq_factor, got "
            f"{low_freq_factor!r} and {high_freq_factor!r}; "
            "the published values are 1 and 4"
        )


def check_longrope(*, short_factor, long_factor, length, attention_factor) -> None:
    """LongRoPE's factor lists (finite positive numbers; their length needs head_dim) and attention factor."""
    for name, values in (("short_factor", short_factor), ("long_factor", long_factor)):
        if values is None:
            continue
        try:
            listed = [float(x) for x in values]
        except (TypeError, ValueError):
            raise PosxError(f"longrope {name} must be a list of numbers, got {values!r}") from None
        if not all(0 < x < math.inf for x in listed):
            raise PosxError(f"longrope {name} must hold finite positive numbers, got {listed!r}")
    if attention_factor is not None:
        _given_attention(attention_factor, "longrope")


def _count(method: str, name: str, value, lo: int, null: str = "", note: str = "") -> None:
    """``value``: an integer >= ``lo``; None too where ``null`` says what None stands for."""
    if null and value is None:
        return
    if not is_integer(value) or value < lo:
        either = f" (or null for {null})" if null else ""
        raise PosxError(f"{method} {name} must be an integer >= {lo}{either}{note}, got {value!r}")


def check_self_extend(*, group, window) -> None:
    """Self-Extend's group size G (an integer >= 1) and neighbour window W (an integer >= 1, or None)."""
    _count("self_extend", "group", group, 1, note=" (posx's default is 16)")
    _count("self_extend", "window", window, 1, "half the trained context")


def check_rerope(*, window, leak_factor, log_scale) -> None:
    """ReRoPE's window W (an integer >= 1, or None), Leaky ReRoPE's factor k (a number >= 1, or
    None for ReRoPE) and whether the query takes the log-n scale (a bool)."""
    _count("rerope", "window", window, 1, "a quarter of the trained context")
    if leak_factor is not None and (not is_real(leak_factor) or not 1 <= float(leak_factor) < math.inf):
        raise PosxError(
            f"rerope leak_factor must be a number >= 1 (Leaky ReRoPE; the author's code uses 16) or null "
            f"(ReRoPE), got {leak_factor!r}"
        )
    if not isinstance(log_scale, bool):
        raise PosxError(f"rerope log_scale must be true or false, got {log_scale!r}")


def check_dca(*, chunk_size, local_window) -> None:
    """Dual Chunk Attention's chunk size s (an integer >= 1, or None) and local window w (an
    integer >= 0, or None); s <= T and w < s need T and are checked where it is known."""
    _count("dca", "chunk_size", chunk_size, 1, "3/4 of the trained context")
    _count("dca", "local_window", local_window, 0, "1/16 of the trained context")
    if chunk_size is not None and local_window is not None and local_window >= chunk_size:
        raise PosxError(
            f"dca local_window ({local_window}) must be below chunk_size ({chunk_size}): chunks hold s - w tokens"
        )


def check_streaming_llm(*, sinks, recent) -> None:
    """StreamingLLM's sinks S (an integer >= 0) and recent tokens R (an integer >= 1, or None);
    S + R < T needs T and is checked where it is known."""
    _count("streaming_llm", "sinks", sinks, 0, note=" (the authors keep 4)")
    _count("streaming_llm", "recent", recent, 1, "T - sinks - 1")


def check_lm_infinite(*, window, global_tokens) -> None:
    """LM-Infinite's window W (an integer >= 1, or None) and global tokens (an integer >= 0)."""
    _count("lm_infinite", "window", window, 1, "the trained context")
    _count("lm_infinite", "global_tokens", global_tokens, 0, note=" (the authors use 10)")
