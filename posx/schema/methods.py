"""The arguments of the RoPE methods (``posx.rope.frequencies``): ``RopeArgs``, which every
method takes, and a dataclass per method of its extra parameters (``eval.<method>``), each field
with its published default and bounds. ``METHOD_PARAMS`` declares every method once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from posx.schema.fields import MAX_SIZE, at_least, bound, choice, positive

MAX_FACTOR = 1e6  # a context a million times the trained one: past any use, short of overflow
_BETA = dict(lo=1e-9, hi=1e9, note=" (the published values are 1 and 32)")  # rotations over the trained context
_ATTENTION = " (or null for the method's formula)"


@dataclass
class RopeArgs:
    """The arguments every method takes (not config keys: a model and its evaluation give them)."""

    head_dim: int = at_least(2, 2, MAX_SIZE, " (d_model / n_head)")  # even: the pairs that rotate
    base: float = bound(10000.0, lo=1, lo_open=True, note=" (the usual value is 10000)")
    factor: float = at_least(1.0, 1, MAX_FACTOR, " (eval_length / original_context; 1: no scaling)")
    original_context: Optional[int] = positive(None, MAX_SIZE, " (the context length the model trained at)")
    length: Optional[int] = positive(None, note=" (the current sequence length)")  # dynamic methods

    def check(self, at: str = "") -> Optional[str]:
        if self.head_dim % 2:
            return f"{at}head_dim={self.head_dim} must be even; pick d_model / n_head even"
        return None


@dataclass
class YarnConfig:
    beta_fast: float = bound(32.0, **_BETA)  # rotations above which a pair keeps its frequency
    beta_slow: float = bound(1.0, **_BETA)  # rotations below which a pair is fully interpolated
    truncate: bool = True  # floor/ceil the ramp bounds, as the YaRN authors do
    attention_factor: Optional[float] = positive(None, note=_ATTENTION)  # yarn only; null: 0.1 * ln(s) + 1

    def check(self, at: str = "") -> Optional[str]:
        if not self.beta_slow < self.beta_fast:
            return (
                f"YaRN needs beta_slow < beta_fast, got {at}beta_slow={self.beta_slow}, "
                f"{at}beta_fast={self.beta_fast}; the published values are 1 and 32"
            )
        return None


@dataclass
class DynamicNTKConfig:
    factor: Optional[float] = at_least(None, 1, MAX_FACTOR)  # s in b * (s*l/T - (s-1))^(d/(d-2)); null: the row's scale


@dataclass
class ABFConfig:
    new_base: float = bound(
        500000.0, lo=1, lo_open=True, note=" (500000: Llama 2 Long; 1000000: Code Llama)"
    )  # the RoPE base b of theta_i = b^(-2i/d) in place of the trained one


@dataclass
class Llama3Config:
    low_freq_factor: float = positive(1.0)  # wavelengths above T / low_freq_factor are divided by s
    high_freq_factor: float = positive(4.0)  # wavelengths below T / high_freq_factor are kept

    def check(self, at: str = "") -> Optional[str]:
        if not self.low_freq_factor < self.high_freq_factor:
            return (
                f"llama3 needs low_freq_factor < high_freq_factor, got {self.low_freq_factor} and "
                f"{self.high_freq_factor}; the published values are 1 and 4"
            )
        return None


@dataclass
class LongRopeConfig:
    short_factor: Optional[List[float]] = positive(None)  # per-pair divisors at lengths <= T; null: all 1
    long_factor: Optional[List[float]] = positive(None)  # per-pair divisors past T; null: all 1
    attention_factor: Optional[float] = positive(None, note=_ATTENTION)  # null: sqrt(1 + ln(s) / ln(T))


@dataclass
class SelfExtendConfig:
    group: int = positive(16, MAX_SIZE)  # G: past the window, G positions share one (posx.model.windowed)
    window: Optional[int] = positive(None, MAX_SIZE)  # W: keys nearer than W keep exact positions; null: T / 2


@dataclass
class ReRoPEConfig:
    window: Optional[int] = positive(None, MAX_SIZE)  # W: distances below W are exact; null: T / 4
    leak_factor: Optional[float] = at_least(None, 1)  # k: distance n past W is W + (n - W) / k; null: W (ReRoPE)
    log_scale: bool = True  # scale the query at i by max(1, log(i + 1) / log T), as the author's code does


@dataclass
class LMInfiniteConfig:
    window: Optional[int] = positive(None, MAX_SIZE)  # W: keys nearer than W at exact positions; null: T
    global_tokens: int = at_least(10, 0, MAX_SIZE)  # the first keys, seen at distance W by queries past it


@dataclass
class DCAConfig:
    chunk_size: Optional[int] = positive(None, MAX_SIZE)  # s: the largest distance given; null: 3T/4
    local_window: Optional[int] = at_least(None, 0, MAX_SIZE)  # w: chunks hold s - w tokens; null: T/16

    def check(self, at: str = "") -> Optional[str]:
        if self.chunk_size is not None and self.local_window is not None and self.local_window >= self.chunk_size:
            return (
                f"{at}local_window={self.local_window} must be below {at}chunk_size={self.chunk_size}: "
                "chunks hold s - w tokens"
            )
        return None


@dataclass
class StreamingLLMConfig:
    sinks: int = at_least(4, 0, MAX_SIZE)  # S: the first tokens, kept in the cache for good (posx.model.windowed)
    recent: Optional[int] = positive(None, MAX_SIZE)  # R: the latest tokens kept besides the current; null: T - S - 1


# Every RoPE method, in the order tables list them, with the dataclass of its extra parameters (None:
# none beyond ``RopeArgs``): the ``Method`` choice and ``posx.rope``'s registry follow it.
METHOD_PARAMS: dict[str, Optional[type]] = {
    "none": None,
    "pi": None,
    "ntk": None,
    "dynamic_ntk": None,  # eval.dynamic_ntk.factor is its factor, not a parameter
    "yarn": YarnConfig,
    "dynamic_yarn": YarnConfig,  # the ramp only
    "ntk_by_parts": YarnConfig,  # the ramp only
    "abf": ABFConfig,
    "llama3": Llama3Config,
    "longrope": LongRopeConfig,
    "resonance": None,
    "resonance_yarn": YarnConfig,
    "self_extend": SelfExtendConfig,
    "rerope": ReRoPEConfig,
    "lm_infinite": LMInfiniteConfig,
    "dca": DCAConfig,
    "streaming_llm": StreamingLLMConfig,
}
Method = choice("Method", " ".join(METHOD_PARAMS), "eval.methods: posx.rope.METHODS", __name__)
ExtendMethod = choice(
    "ExtendMethod",
    " ".join(METHOD_PARAMS) + " interpolate",
    "posx extend's method: posx.rope.METHODS, or interpolate (learned absolute)",
    __name__,
)
