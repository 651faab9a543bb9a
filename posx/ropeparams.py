"""The parameters of the RoPE methods (``eval.<method>`` in the config, ``posx.rope``'s
keyword arguments): a dataclass per method, each field with its published default and its
bounds, each rule across fields in the class's ``check``. Imports nothing of posx but the
field types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional


@dataclass
class YarnConfig:
    beta_fast: float = 32.0  # rotations above which a pair keeps its frequency
    beta_slow: float = 1.0  # rotations below which a pair is fully interpolated
    truncate: bool = True  # floor/ceil the ramp bounds, as the YaRN authors do
    attention_factor: Optional[float] = None  # yarn only; null: 0.1 * ln(s) + 1


@dataclass
class DynamicNTKConfig:
    factor: Optional[float] = None  # s in b * (s*l/T - (s-1))^(d/(d-2)); null: the row's scale


@dataclass
class Llama3Config:
    low_freq_factor: float = 1.0  # wavelengths above T / low_freq_factor are divided by s
    high_freq_factor: float = 4.0  # wavelengths below T / high_freq_factor are kept


@dataclass
class LongRopeConfig:
    short_factor: Optional[List[float]] = None  # per-pair divisors at lengths <= T; null: all 1
    long_factor: Optional[List[float]] = None  # per-pair divisors past T; null: all 1
    attention_factor: Optional[float] = None  # null: sqrt(1 + ln(s) / ln(T))


@dataclass
class SelfExtendConfig:
    group: int = 16  # G: past the window, G positions share one (posx.model.windowed)
    window: Optional[int] = None  # W: keys nearer than W keep exact positions; null: T / 2


@dataclass
class ReRoPEConfig:
    window: Optional[int] = None  # W: distances below W are exact; null: T / 4 (posx.model.windowed)
    leak_factor: Optional[float] = None  # k: null: every distance past W is W (ReRoPE); k: W + (n - W) / k (Leaky)
    log_scale: bool = True  # scale the query at i by max(1, log(i + 1) / log T), as the author's code does


@dataclass
class LMInfiniteConfig:
    window: Optional[int] = None  # W: keys nearer than W at exact positions; null: T (posx.model.windowed)
    global_tokens: int = 10  # the first keys, attended at distance W from queries past the window


@dataclass
class DCAConfig:
    chunk_size: Optional[int] = None  # s: the largest distance given; null: 3T/4 (posx.model.windowed)
    local_window: Optional[int] = None  # w: chunks hold s - w tokens; null: T/16


@dataclass
class StreamingLLMConfig:
    sinks: int = 4  # S: the first tokens, kept in the cache for good (posx.model.windowed)
    recent: Optional[int] = None  # R: the latest tokens kept besides the current one; null: T - S - 1
