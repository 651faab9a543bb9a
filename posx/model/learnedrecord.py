"""The typed record of a model's learned positional scalars, as model.json holds them
(``learned``): FIRE's c and threshold, KERPLE's p and a per head, Scalable-Softmax's s per layer
and head. Read back through ``posx.core.validate`` without torch; learned tables (absolute, T5,
CoPE, FIRE's MLP) stay in the weights alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass(kw_only=True)
class LearnedScalars:
    """Each field None unless the model has it; every value a plain float."""

    fire_c: float | None = None  # FIRE's c in psi(x) = ln(|c x| + 1), one for all layers (starts at 0.1)
    fire_threshold: float | None = None  # FIRE's threshold L = |multiplier x pos.fire_threshold|, in positions
    fire_multiplier: float | None = None  # the learned multiplier of L (starts at 1)
    kerple_p: list[float] | None = None  # KERPLE's scale p (the paper's r1), per head, one kernel for all layers
    kerple_a: list[float] | None = None  # KERPLE's rate a (the paper's r2), per head
    ssmax_s: list[list[float]] | None = None  # Scalable-Softmax's s, per layer (from 0), per head

    @property
    def empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))

    def to_dict(self) -> dict:
        """The fields the model has (an absent one reads back as None)."""
        return {name: value for name, value in asdict(self).items() if value is not None}

    def problem(self, n_layer: int, n_head: int, at: str = "") -> str | None:
        """What does not fit a model of ``n_layer`` layers and ``n_head`` heads, or None: a list per
        head has one value a head, ``ssmax_s`` one such list a layer, FIRE's three come together."""
        fire = [self.fire_c, self.fire_threshold, self.fire_multiplier]
        if any(v is None for v in fire) and any(v is not None for v in fire):
            return f"{at}fire_c, fire_threshold and fire_multiplier must all be given or none"
        for name in ("kerple_p", "kerple_a"):
            values = getattr(self, name)
            if values is not None and len(values) != n_head:
                return f"{at}{name} has {len(values)} value(s); the model has {n_head} heads (one a head)"
        rows = self.ssmax_s
        if rows is not None and (len(rows) != n_layer or any(len(row) != n_head for row in rows)):
            shape = f"{len(rows)} layers of {sorted({len(row) for row in rows})} heads"
            return f"{at}ssmax_s has {shape}; the model has {n_layer} layers of {n_head} heads"
        return None
