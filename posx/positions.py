"""Positional encodings as one pluggable component.

Every encoding is a ``PositionalEncoding`` with three hooks, each a no-op by default:

* ``embed(x, positions)``      add something to the token embeddings   (absolute, sinusoidal)
* ``rotate(q, k, positions)``  rotate queries and keys                  (RoPE)
* ``attn_bias(layer, q_len, k_len)``  an additive bias on the logits   (ALiBi, T5)

The attention block calls all three and never asks which encoding it has, so a new
encoding is a new subclass plus one line in ``ENCODINGS``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posx import rope
from posx.errors import PosxError


class PositionOutOfRange(PosxError):
    """A position past what the encoding can represent (learned absolute past its table)."""


class PositionalEncoding(nn.Module):
    """Base class: no positional signal at all. Subclasses override the hooks they need."""

    kind = "nope"
    uses_rope = False  # True when RoPE rescaling methods apply

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return x  # x: (B, T, C), positions: (T,)

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        return q, k  # q, k: (B, H, T, head_dim)

    def attn_bias(self, layer: int, q_len: int, k_len: int) -> Tensor | None:
        return None  # else (H, q_len, k_len), added to the logits before softmax

    def max_length(self) -> int | None:
        return None  # longest sequence it represents; None: unbounded


class LearnedAbsolute(PositionalEncoding):
    """GPT-2's learned table of ``max_positions`` rows added to the token embeddings."""

    kind = "absolute"

    def __init__(self, max_positions: int, d_model: int):
        super().__init__()
        self.table = nn.Embedding(max_positions, d_model)
        nn.init.normal_(self.table.weight, std=0.02)

    def max_length(self) -> int:
        return self.table.num_embeddings

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        last = int(positions.max())
        if last >= self.table.num_embeddings:
            raise PositionOutOfRange(
                f"position {last} is past the learned table of {self.table.num_embeddings} rows"
            )
        return x + self.table(positions)  # (B, T, C) + (T, C)


def rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate each (even, odd) pair of the last dim of x by the given angles.

    x: (..., T, head_dim); cos, sin: (T, head_dim // 2). Pair i of position p is
    rotated by p * inv_freq[i], as in RoFormer and the background article.
    """
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, hd/2) each
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (..., T, hd/2, 2)
    return out.flatten(-2)  # (..., T, hd)


class Rotary(PositionalEncoding):
    """RoPE. The inverse frequencies are a non-persistent buffer: rescaling is a recompute.

    ``set_frequencies`` installs the output of ``posx.rope.frequencies``; the attention
    factor multiplies both cos and sin, so q and k each carry it once.
    """

    kind = "rope"
    uses_rope = True

    def __init__(self, head_dim: int, base: float):
        super().__init__()
        self.head_dim = head_dim
        self.base = base
        inv_freq, attention_factor = rope.frequencies("none", head_dim, base=base)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attention_factor = attention_factor
        # What reset() returns to: the frequencies the weights were trained with (plain RoPE
        # unless set_trained_frequencies installs others, as for an extended run).
        self.register_buffer("trained_inv_freq", inv_freq.clone(), persistent=False)
        self.trained_attention_factor = attention_factor

    def set_frequencies(self, inv_freq: Tensor, attention_factor: float = 1.0) -> None:
        if inv_freq.shape != self.inv_freq.shape:
            raise PosxError(
                f"frequencies of shape {tuple(inv_freq.shape)} do not fit head_dim {self.head_dim}"
            )
        self.inv_freq = inv_freq.to(device=self.inv_freq.device, dtype=torch.float32)
        self.attention_factor = float(attention_factor)

    def set_trained_frequencies(self, inv_freq: Tensor, attention_factor: float = 1.0) -> None:
        """Install frequencies and make them the ones ``reset`` returns to (a trained model's)."""
        self.set_frequencies(inv_freq, attention_factor)
        self.trained_inv_freq = self.inv_freq.clone()
        self.trained_attention_factor = self.attention_factor

    def reset(self) -> None:
        """Back to the frequencies the model trained with (plain RoPE unless extended)."""
        self.set_frequencies(self.trained_inv_freq.clone(), self.trained_attention_factor)

    def cos_sin(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        # Angles in float32 even under bf16 autocast: p * theta loses all precision in bf16.
        with torch.autocast(device_type=positions.device.type, enabled=False):
            angles = torch.outer(positions.float(), self.inv_freq)  # (T, hd/2)
            return angles.cos() * self.attention_factor, angles.sin() * self.attention_factor

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        cos, sin = self.cos_sin(positions)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        return rotate_pairs(q, cos, sin), rotate_pairs(k, cos, sin)


# Name -> maker. A maker takes the model's config (posx.model.GPTConfig) and returns the
# component; configs and run files hold only the name.
ENCODINGS = {
    "absolute": lambda c: LearnedAbsolute(c.max_positions, c.d_model),
    "rope": lambda c: Rotary(c.d_model // c.n_head, c.rope_base),
    "nope": lambda c: PositionalEncoding(),
}


def build_encoding(config) -> PositionalEncoding:
    """Make the encoding named by ``config.pos`` (a ``GPTConfig``)."""
    if config.pos not in ENCODINGS:
        raise PosxError(f"unknown positional encoding '{config.pos}'; choose one of {', '.join(ENCODINGS)}")
    return ENCODINGS[config.pos](config)
