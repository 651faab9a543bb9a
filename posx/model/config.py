"""The model's own config: sizes and names, no Hydra. A run's ``model.json`` holds it, and
it is the one place a run config (``model.*``, ``pos.*``) turns into a model and back."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from posx.core.errors import PosxError


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
    attention: str = "sdpa"  # sdpa | flex: how the bias encodings attend (posx.model.attention)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "GPTConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise PosxError(f"model metadata has unknown keys {unknown}; was it written by a newer posx?")
        return cls(**data)

    @classmethod
    def from_run_config(cls, cfg, vocab_size: int) -> "GPTConfig":
        """The model a run config describes (``cfg``: the composed config, Hydra or not)."""
        return cls(
            vocab_size=vocab_size,
            n_layer=cfg.model.n_layer,
            n_head=cfg.model.n_head,
            d_model=cfg.model.d_model,
            mlp_ratio=cfg.model.mlp_ratio,
            dropout=cfg.model.dropout,
            pos=cfg.pos.name,
            rope_base=cfg.pos.base,
            max_positions=cfg.pos.max_positions or cfg.train.context_length,
            t5_num_buckets=cfg.pos.num_buckets,
            t5_max_distance=cfg.pos.max_distance,
            t5_per_layer=cfg.pos.per_layer,
            attention=cfg.model.attention,
        )

    def run_config_values(self) -> dict[str, object]:
        """The inverse of ``from_run_config``: dotted run-config keys and their values."""
        return {
            "model.n_layer": self.n_layer, "model.n_head": self.n_head, "model.d_model": self.d_model,
            "model.mlp_ratio": self.mlp_ratio, "model.dropout": self.dropout, "pos.name": self.pos,
            "pos.base": self.rope_base, "pos.max_positions": self.max_positions,
            "pos.num_buckets": self.t5_num_buckets, "pos.max_distance": self.t5_max_distance,
            "pos.per_layer": self.t5_per_layer, "model.attention": self.attention,
        }
