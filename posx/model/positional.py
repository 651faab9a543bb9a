"""The base of every positional encoding, its hooks each a no-op (``embed``: add to the token
embeddings; ``rotate``: rotate q and k; ``distance_bias``: a logit bias by distance), the error
for a position past what an encoding represents, and the causal Toeplitz mask of a bias.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posx.core.errors import PosxError
from posx.model.learnedrecord import LearnedScalars
from posx.model.windowed import Windowed


class PositionOutOfRange(PosxError):
    """A position past what the encoding can represent (learned absolute past its table)."""


class PositionalEncoding(nn.Module):
    """Base class: no positional signal at all. Subclasses override the hooks they need."""

    kind = "nope"
    uses_rope = False  # True when RoPE rescaling methods apply
    # A windowed method while an evaluation installs it (``posx.model.rescale.windowed_attention``;
    # RoPE encodings only, which then also need ``rotate_at``); None: ordinary attention.
    window: Windowed | None = None

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return x  # x: (B, T, C), positions: (T,)

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        return q, k  # q, k: (B, H, T, head_dim)

    bias_per_layer = False  # True when distance_bias differs between layers

    def distance_bias(self, layer: int, length: int) -> Tensor | None:
        return None  # else (H, length): the logit bias at query - key distance 0 .. length-1

    def attn_masks(self, length: int, n_layer: int, dtype: torch.dtype, device: torch.device) -> list[Tensor | None]:
        """Per layer: None (plain causal) or the additive (1, H, L, L) mask, one tensor for shared biases."""
        layers = range(n_layer) if self.bias_per_layer else range(1)
        masks = []
        for layer in layers:
            bias = self.distance_bias(layer, length)  # (H, L) or None
            masks.append(None if bias is None else causal_toeplitz(bias.to(device=device, dtype=dtype)))
        return masks if self.bias_per_layer else masks * n_layer

    def score_mod(self, layer: int):
        """None, or FlexAttention's score_mod(score, b, h, q_idx, kv_idx) adding ``distance_bias``'s bias
        (the causal mask is separate): one function for every layer and length, what differs entering as a
        tensor, so a compiled FlexAttention shares one graph; bound once, as ``_score_mod``, where it can."""
        return self._score_mod

    _score_mod = None

    # FlexAttention's Triton tile sizes for this encoding's score_mod, on CUDA only; None: torch's defaults.
    flex_kernel_options: dict | None = None

    def max_length(self) -> int | None:
        return None  # longest sequence it represents; None: unbounded

    contextual = False  # True: positions come from the logits, and the encoding attends itself (CoPE)

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor, dropout: float) -> Tensor:
        """A contextual encoding's causal attention of q, k, v (B, H, L, hd) in layer ``layer``."""
        raise NotImplementedError(f"{self.kind} does not attend itself; the attention block does")

    def project_(self) -> None:
        """Put learned parameters back in range, in place, after every optimizer step (KERPLE's floor)."""

    def learned_scalars(self) -> LearnedScalars:
        """The encoding's learned scalars, as model.json records them; none by default."""
        return LearnedScalars()


def causal_toeplitz(by_distance: Tensor) -> Tensor:
    """(H, L) bias by distance n = i - j -> (1, H, L, L) mask: bias[n] for j <= i, -inf above.
    mask[i, j] = w[L - 1 - i + j], w = (bias[L-1], ..., bias[0], -inf x (L-1)): unfold gives every
    window w[r : r + L], and flipping the rows puts window L - 1 - i at row i (no index tensor)."""
    H, L = by_distance.shape
    future = by_distance.new_full((H, L - 1), float("-inf"))
    w = torch.cat([by_distance.flip(-1), future], dim=-1)  # (H, 2L - 1)
    windows = w.unfold(-1, L, 1)  # (H, L, L) view: windows[h, r, j] = w[h, r + j]
    return windows.flip(1).unsqueeze(0)  # (1, H, L, L), a fresh contiguous tensor
