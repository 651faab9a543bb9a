"""The model's own config: sizes and names, no Hydra. A run's ``model.json`` holds it, and
it is the one place a run config (``model.*``, ``pos.*``) turns into a model and back."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from posx.core.errors import PosxError
from posx.core.fieldcheck import is_integer, is_number
from posx.schema import Attention, AttnScale, Block, Encoding, ModelConfig

# The names a model.json may give. They are the schema's choices, which mirror the registries
# that build the model (posx.model.encodings.ENCODINGS and the rest; tests/test_config_choices.py
# keeps them equal), so reading a run's metadata imports no torch.
_CHOICES = {
    name: e.values()
    for name, e in (("pos", Encoding), ("attention", Attention), ("attn_scale", AttnScale), ("block", Block))
}

# Largest value model.json may give an integer field: far beyond what posx trains, small
# enough that a crafted file cannot make it allocate without bound.
_MAX_INT = {
    "vocab_size": 1 << 22,
    "n_layer": 1024,
    "n_head": 1024,
    "d_model": 1 << 16,
    "mlp_ratio": 64,
    "multiple_of": 1 << 16,
    "short_conv": 1024,
}

_MIN_INT = {"nope_every": 0, "pose_length": 0, "short_conv": 0}  # 0: off; every other integer field is at least 1


# GPTConfig fields named otherwise in the run config; every other field is the model.* or pos.*
# key of its own name (RUN_KEYS, below the class: the one table both conversions read).
_RENAMED = {
    "pos": "pos.name",
    "rope_base": "pos.base",
    "t5_num_buckets": "pos.num_buckets",
    "t5_max_distance": "pos.max_distance",
    "t5_per_layer": "pos.per_layer",
}


def _select(cfg, dotted: str):
    node = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


@dataclass
class GPTConfig:
    vocab_size: int = 256  # byte-level tokens
    n_layer: int = 4  # transformer blocks
    n_head: int = 4  # attention heads
    d_model: int = 128  # residual width; head_dim = d_model // n_head
    mlp_ratio: int = 4  # MLP hidden = mlp_ratio * d_model
    dropout: float = 0.0  # attention and residual dropout while training
    pos: str = "rope"  # positional encoding name (posx.model.encodings.ENCODINGS)
    rope_base: float = 10000.0  # RoPE base
    max_positions: int = 128  # learned-absolute table rows
    t5_num_buckets: int = 32  # T5 bias: relative-distance buckets
    t5_max_distance: int = 128  # T5 bias: distances from here on share the last bucket
    t5_per_layer: bool = False  # T5 bias: one table per layer instead of one shared
    block: str = "gpt2"  # gpt2 (LayerNorm + GELU) | llama (RMSNorm + SwiGLU), posx.model.blocks.BLOCKS
    multiple_of: int = 8  # llama: SwiGLU hidden rounded up to a multiple of this
    tie_embeddings: bool = True  # lm_head shares the token embedding matrix
    attention: str = "sdpa"  # sdpa | flex: how the bias encodings attend (posx.model.attention)
    rotary_fraction: float = 1.0  # rope, xpos: share of pairs that rotate (p-RoPE), highest frequencies first
    xpos_scale_base: float = 512.0  # xpos: B of zeta^(n/B)
    fire_threshold: float = 512.0  # fire: initial threshold L (learned)
    fire_hidden: int = 32  # fire: MLP hidden width
    cope_npos: int = 129  # cope: positions 0 .. cope_npos - 1
    attn_scale: str = "none"  # none | logn | ssmax (posx.model.scaling.ATTN_SCALES)
    attn_scale_length: int = 128  # T of attn_scale: the trained length
    nope_every: int = 0  # layers with (layer + 1) % nope_every == 0 attend without positions; 0: none
    short_conv: int = 0  # kernel of the causal depthwise convolution before each attention (posx.model.blocks); 0: off
    randomized: bool = False  # training positions: a sorted random subset of [0, randomized_max)
    randomized_max: int = 1024  # randomized: L_max
    pose_length: int = 0  # PoSE: training ids cover [0, pose_length); 0: off

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "GPTConfig":
        """Read a config from model.json: every field of its type and in range, before any
        size is used to allocate (a damaged or crafted file is one PosxError)."""
        if not isinstance(data, dict):
            raise PosxError(f"model metadata is a {type(data).__name__}, not a mapping")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise PosxError(f"model metadata has unknown keys {unknown}; was it written by a newer posx?")
        config = cls(**data)
        config.validate()
        return config

    def validate(self, where: str = "model metadata") -> None:
        """Every field of its type and within bounds (``where`` names the source in messages)."""
        for f in fields(self):
            value, kind = getattr(self, f.name), f.type
            if kind == "bool":
                ok = isinstance(value, bool)
            elif kind == "int":
                ok = is_integer(value) and _MIN_INT.get(f.name, 1) <= value <= _MAX_INT.get(f.name, 1 << 24)
            else:
                ok = is_number(value) if kind == "float" else isinstance(value, str)
            if not ok:
                limit = f" from {_MIN_INT.get(f.name, 1)} to {_MAX_INT.get(f.name, 1 << 24)}" if kind == "int" else ""
                raise PosxError(f"{where}: {f.name}={value!r} is not a valid {kind}{limit}")
        if not 0 <= self.dropout < 1 or self.rope_base <= 1 or self.d_model % self.n_head:
            raise PosxError(
                f"{where} is inconsistent (dropout={self.dropout}, rope_base={self.rope_base}, "
                f"d_model={self.d_model} over n_head={self.n_head})"
            )
        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                raise PosxError(f"{where}: {name}={getattr(self, name)!r} is not one of {', '.join(choices)}")
        if not 0 <= self.rotary_fraction <= 1 or self.xpos_scale_base <= 0 or self.fire_threshold <= 0:
            raise PosxError(
                f"{where} is inconsistent (rotary_fraction={self.rotary_fraction} must be in [0, 1], "
                f"xpos_scale_base={self.xpos_scale_base} and fire_threshold={self.fire_threshold} positive)"
            )

    @classmethod
    def from_run_config(cls, cfg, vocab_size: int) -> "GPTConfig":
        """The model a run config describes (``cfg``: the composed config, Hydra or not)."""
        values = {name: _select(cfg, key) for name, key in RUN_KEYS.items()}
        if values["max_positions"] is None:  # the learned table's default: one row per trained position
            values["max_positions"] = cfg.train.context_length
        if values["cope_npos"] is None:  # CoPE counts from 0 to T, as the authors' block size + 1
            values["cope_npos"] = cfg.train.context_length + 1
        if values["fire_threshold"] is None:  # FIRE's L: T/4, the paper's 512 at T = 2048 (posx.model.fire)
            values["fire_threshold"] = cfg.train.context_length / 4
        if values["attn_scale_length"] is None:  # attn_scale's T: the trained length
            values["attn_scale_length"] = cfg.train.context_length
        if values["randomized_max"] is None:  # L_max: the longest evaluated length
            values["randomized_max"] = round(max(cfg.eval.factors) * cfg.train.context_length)
        return cls(vocab_size=vocab_size, **values)

    def run_config_values(self) -> dict[str, object]:
        """The inverse of ``from_run_config``: dotted run-config keys and their values."""
        return {key: getattr(self, name) for name, key in RUN_KEYS.items()}


_MODEL_KEYS = {f.name for f in fields(ModelConfig)}
RUN_KEYS = {
    f.name: _RENAMED.get(f.name, f"{'model' if f.name in _MODEL_KEYS else 'pos'}.{f.name}")
    for f in fields(GPTConfig)
    if f.name != "vocab_size"
}
