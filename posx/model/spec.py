"""What a model is built from, and what a run's ``model.json`` records of it: the schema's own
``model`` and ``pos`` sections, with the values they leave null resolved against T, and the vocabulary."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from posx.schema.config import BYTES, Config, DataConfig, ModelConfig, PosConfig, evaluated_length
from posx.schema.fields import like

NULL_IS_A_VALUE = {("pos", "params")}  # a custom encoding's parameters: null gives none (all defaults)


@dataclass(kw_only=True)
class ModelSpec:
    vocab_size: int = like(DataConfig, "vocab_size", BYTES)  # the tokenizer's ids
    model: ModelConfig  # the transformer, as the config's model.* keys
    pos: PosConfig  # the positional encoding, as the config's pos.* keys

    @property
    def head_dim(self) -> int:
        return self.model.d_model // self.model.n_head

    def sections(self) -> dict[str, dict]:
        """The ``model`` and ``pos`` sections as plain mappings, keyed as the config."""
        return {"model": asdict(self.model), "pos": asdict(self.pos)}

    def check(self, at: str = "") -> str | None:
        """Every value resolved: a null (T's default) means nothing once T is not beside it."""
        nulls = [
            f"{at}{s}.{key}"
            for s, group in self.sections().items()
            for key, v in group.items()
            if v is None and (s, key) not in NULL_IS_A_VALUE
        ]
        return f"{nulls[0]} is null; a model record holds the value resolved against T" if nulls else None

    @classmethod
    def resolved(cls, model: ModelConfig, pos: PosConfig, T: int, longest: int, vocab_size: int) -> ModelSpec:
        """The sections with their nulls resolved against T (``longest``: the longest evaluated length)."""
        return cls(
            vocab_size=vocab_size,
            model=replace(model, attn_scale_length=model.attn_scale_length or T),  # attn_scale's T
            pos=replace(
                pos,
                max_positions=pos.max_positions or T,  # the learned table: one row per trained position
                cope_npos=pos.cope_npos or T + 1,  # CoPE counts from 0 to T, as the authors' block size + 1
                fire_threshold=pos.fire_threshold or T / 4,  # FIRE's L: T/4, the paper's 512 at T = 2048
                randomized_max=pos.randomized_max or longest,  # L_max: the longest evaluated length
            ),
        )

    @classmethod
    def from_config(cls, cfg: Config, vocab_size: int) -> ModelSpec:
        """The model a config describes (its ``model``, ``pos``, ``train`` and ``eval`` sections)."""
        T, model, pos = cfg.train.context_length, _section(ModelConfig, cfg.model), _section(PosConfig, cfg.pos)
        return cls.resolved(model, pos, T, evaluated_length(max(cfg.eval.factors), T), vocab_size)


def _section(kind: type, node):
    return kind(**{f.name: getattr(node, f.name) for f in fields(kind)})
