"""The model's own config: sizes and names, no Hydra. A run's ``model.json`` holds it, and
it is the one place a run config (``model.*``, ``pos.*``) turns into a model and back."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from functools import partial

from posx.fieldtypes import like
from posx.schema import Attention, AttnScale, Block, DataConfig, Encoding, ModelConfig, PosConfig

_m, _p = partial(like, ModelConfig), partial(like, PosConfig)


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
    vocab_size: int = like(DataConfig, "vocab_size", 256)  # byte-level tokens
    n_layer: int = _m("n_layer", 4)  # transformer blocks
    n_head: int = _m("n_head", 4)  # attention heads
    d_model: int = _m("d_model", 128)  # residual width; head_dim = d_model // n_head
    mlp_ratio: int = _m("mlp_ratio", 4)  # MLP hidden = mlp_ratio * d_model
    dropout: float = _m("dropout", 0.0)  # attention and residual dropout while training
    pos: Encoding = "rope"  # positional encoding name (posx.model.encodings.ENCODINGS)
    rope_base: float = _p("base", 10000.0)  # RoPE base
    max_positions: int = _p("max_positions", 128)  # learned-absolute table rows
    t5_num_buckets: int = _p("num_buckets", 32)  # T5 bias: relative-distance buckets
    t5_max_distance: int = _p("max_distance", 128)  # T5 bias: distances from here on share the last bucket
    t5_per_layer: bool = False  # T5 bias: one table per layer instead of one shared
    block: Block = "gpt2"  # gpt2 (LayerNorm + GELU) | llama (RMSNorm + SwiGLU), posx.model.blocks.BLOCKS
    multiple_of: int = _m("multiple_of", 8)  # llama: SwiGLU hidden rounded up to a multiple of this
    tie_embeddings: bool = True  # lm_head shares the token embedding matrix
    attention: Attention = "sdpa"  # sdpa | flex: how the bias encodings attend (posx.model.attention)
    rotary_fraction: float = _p("rotary_fraction", 1.0)  # rope, xpos: share of pairs that rotate (p-RoPE)
    xpos_scale_base: float = _p("xpos_scale_base", 512.0)  # xpos: B of zeta^(n/B)
    fire_threshold: float = _p("fire_threshold", 512.0)  # fire: initial threshold L (learned)
    fire_hidden: int = _p("fire_hidden", 32)  # fire: MLP hidden width
    cope_npos: int = _p("cope_npos", 129)  # cope: positions 0 .. cope_npos - 1
    attn_scale: AttnScale = "none"  # none | logn | ssmax (posx.model.scaling.ATTN_SCALES)
    attn_scale_length: int = _m("attn_scale_length", 128)  # T of attn_scale: the trained length
    nope_every: int = _m("nope_every", 0)  # layers with (layer + 1) % nope_every == 0 attend without positions; 0: none
    short_conv: int = _m("short_conv", 0)  # the causal depthwise convolution's kernel (posx.model.blocks); 0: off
    randomized: bool = False  # training positions: a sorted random subset of [0, randomized_max)
    randomized_max: int = _p("randomized_max", 1024)  # randomized: L_max
    pose_length: int = _p("pose_length", 0)  # PoSE: training ids cover [0, pose_length); 0: off

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)

    check = ModelConfig.check  # heads that divide d_model

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
