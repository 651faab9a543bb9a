"""What a model is built from: the schema's own ``model`` and ``pos`` sections, with the values
they leave null resolved against the trained length T, and the vocabulary. A run's
``model.json`` records it (``posx.runs.records``); a composed config turns into one here."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, is_dataclass, replace

from posx.fieldtypes import like
from posx.schema import DataConfig, ModelConfig, PosConfig


@dataclass(kw_only=True)
class ModelSpec:
    vocab_size: int = like(DataConfig, "vocab_size", 256)  # the tokenizer's ids (256: bytes)
    model: ModelConfig  # the transformer, as the config's model.* keys
    pos: PosConfig  # the positional encoding, as the config's pos.* keys

    @property
    def head_dim(self) -> int:
        return self.model.d_model // self.model.n_head

    def sections(self) -> dict[str, dict]:
        """The ``model`` and ``pos`` sections as plain mappings, keyed as the config."""
        return {f.name: asdict(getattr(self, f.name)) for f in fields(self) if is_dataclass(getattr(self, f.name))}

    def to_dict(self) -> dict:
        return {"vocab_size": self.vocab_size, **self.sections()}

    def check(self, at: str = "") -> str | None:
        """Every value resolved: a null (T's default) has no meaning once T is not beside it."""
        for section, values in self.sections().items():
            unresolved = [key for key, value in values.items() if value is None]
            if unresolved:
                return f"{at}{section}.{unresolved[0]} is null; a model record holds the value resolved against T"
        return None

    @classmethod
    def resolved(cls, model: ModelConfig, pos: PosConfig, T: int, longest: int, vocab_size: int) -> "ModelSpec":
        """The sections with their nulls resolved against T (``longest``: the longest evaluated length)."""
        return cls(
            vocab_size=vocab_size,
            model=replace(model, attn_scale_length=_or(model.attn_scale_length, T)),  # attn_scale's T
            pos=replace(
                pos,
                max_positions=_or(pos.max_positions, T),  # the learned table: one row per trained position
                cope_npos=_or(pos.cope_npos, T + 1),  # CoPE counts from 0 to T, as the authors' block size + 1
                fire_threshold=_or(pos.fire_threshold, T / 4),  # FIRE's L: T/4, the paper's 512 at T = 2048
                randomized_max=_or(pos.randomized_max, longest),  # L_max: the longest evaluated length
            ),
        )

    @classmethod
    def from_config(cls, cfg, vocab_size: int) -> "ModelSpec":
        """The model a composed config describes (Hydra's or the schema's dataclasses)."""
        T = cfg.train.context_length
        longest = round(max(cfg.eval.factors) * T)
        return cls.resolved(_section(ModelConfig, cfg.model), _section(PosConfig, cfg.pos), T, longest, vocab_size)


def _or(value, default):
    return default if value is None else value


def _section(kind: type, node):
    """``kind`` with the values of the config node ``node`` (a DictConfig or a ``kind`` itself)."""
    return kind(**{f.name: getattr(node, f.name) for f in fields(kind)})
