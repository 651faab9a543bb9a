"""The typed record of the RoPE frequencies a model trained with (model.json, checkpoints), checked
by ``posx.core.validate`` without torch; ``posx.model.rescale.trained_frequencies`` computes them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from posx.schema.fields import MAX_SIZE, at_least, bound, positive
from posx.schema.methods import MAX_FACTOR, Method


@dataclass
class RopeRecord:
    """A recipe (``method``, ``factor``, ``params``, ``original_context``) and, for an extended run, the
    numbers (``inv_freq``, ``attention_factor``), which win so evaluation uses what training used."""

    method: Method  # a posx.rope method
    factor: float = bound(1.0, lo=0, lo_open=True, hi=MAX_FACTOR)  # its scale s
    params: dict = field(default_factory=dict)  # its extra parameters (rope.frequencies **params)
    original_context: Optional[int] = positive(None, MAX_SIZE)  # the T it rescales from; None: the run's own T
    inv_freq: Optional[List[float]] = at_least(None, 0.0)  # the frequencies themselves (extended runs)
    attention_factor: Optional[float] = positive(None, MAX_FACTOR)  # with inv_freq: the factor they trained with

    @classmethod
    def identity(cls) -> "RopeRecord":
        """Plain RoPE (and the record of every model without RoPE)."""
        return cls("none")

    def to_dict(self) -> dict:
        out = {"method": self.method, "factor": self.factor, "params": dict(self.params)}
        if self.original_context is not None:
            out["original_context"] = self.original_context
        if self.inv_freq is not None:
            out["inv_freq"] = list(self.inv_freq)
            out["attention_factor"] = self.attention_factor if self.attention_factor is not None else 1.0
        return out
