"""The typed record of the RoPE frequencies a model trained with, as model.json and checkpoints
hold it. It reads and checks the record without computing anything, so listing runs needs no
torch; ``posx.model.rescale.trained_frequencies`` turns a record into frequencies."""

from __future__ import annotations

from dataclasses import dataclass, field

from posx.core import fieldcheck
from posx.core.errors import PosxError
from posx.ropeparams import MAX_FACTOR
from posx.schema import Method

METHOD_NAMES = Method.values()  # posx.rope.METHODS (tests/test_config_choices.py keeps them equal)


@dataclass
class RopeRecord:
    """The frequencies a model was trained with, as recorded in model.json and checkpoints.

    A recipe (``method``, ``factor``, ``params``, ``original_context``) and, for an extended
    run, the numbers themselves (``inv_freq``, ``attention_factor``), which win when present
    so evaluation uses exactly what training used.
    """

    method: str = "none"  # a posx.rope method
    factor: float = 1.0  # its scale s
    params: dict = field(default_factory=dict)  # its extra parameters (rope.frequencies **params)
    original_context: int | None = None  # the T it rescales from; None: the run's own T
    inv_freq: list[float] | None = None  # the frequencies themselves (extended runs)
    attention_factor: float | None = None  # with inv_freq: the attention factor they trained with

    @classmethod
    def identity(cls) -> "RopeRecord":
        """Plain RoPE (and the record of every model without RoPE)."""
        return cls()

    @property
    def is_identity(self) -> bool:
        return self.method == "none"

    def to_dict(self) -> dict:
        out = {"method": self.method, "factor": self.factor, "params": dict(self.params)}
        if self.original_context is not None:
            out["original_context"] = self.original_context
        if self.inv_freq is not None:
            out["inv_freq"] = list(self.inv_freq)
            out["attention_factor"] = self.attention_factor if self.attention_factor is not None else 1.0
        return out

    @classmethod
    def from_dict(cls, data, where: str) -> "RopeRecord":
        """Read a record written by ``to_dict`` (or by posx before this class): every field of
        its type, finite and in range, else a one-line PosxError naming ``where`` and the field."""
        if data is None:
            return cls.identity()
        fix = "re-run the extension (or re-train the run)"
        where = f"the rope record in {where}"
        if not isinstance(data, dict):
            raise fieldcheck.refuse(where, "rope", data, "a mapping", fix)
        if data.get("method") not in METHOD_NAMES:
            raise PosxError(
                f"{where} names an unknown RoPE method {data.get('method')!r} (rope.method); "
                f"posx knows {', '.join(METHOD_NAMES)}; {fix}"
            )
        params = data.get("params") or {}
        if not isinstance(params, dict):
            raise fieldcheck.refuse(where, "rope.params", params, "a mapping", fix)
        original, inv_freq, attention = (data.get(k) for k in ("original_context", "inv_freq", "attention_factor"))
        if inv_freq is not None and (not isinstance(inv_freq, list) or len(inv_freq) > fieldcheck.MAX_CONTEXT):
            raise fieldcheck.refuse(where, "rope.inv_freq", inv_freq, "a list of frequencies", fix)
        return cls(
            method=data["method"],
            factor=fieldcheck.number(data.get("factor", 1.0), "rope.factor", where, fix, hi=MAX_FACTOR, positive=True),
            params=fieldcheck.finite_tree(dict(params), "rope.params", where, fix),
            original_context=None
            if original is None
            else fieldcheck.integer(original, "rope.original_context", where, fix, lo=1, hi=fieldcheck.MAX_CONTEXT),
            inv_freq=None
            if inv_freq is None
            else [fieldcheck.number(v, f"rope.inv_freq[{i}]", where, fix, lo=0.0) for i, v in enumerate(inv_freq)],
            attention_factor=None
            if attention is None
            else fieldcheck.number(attention, "rope.attention_factor", where, fix, hi=MAX_FACTOR, positive=True),
        )
