"""Self-Extend: grouped attention past a neighbour window, without training (Jin et al.,
"LLM Maybe LongLM: Self-Extend LLM Context Window Without Tuning", ICML 2024, arXiv 2401.01325;
the authors' code: github.com/datamllab/LongLM, ``self_extend_patch/Llama.py``).

A query at position i and a key at position j, j <= i, with distance n = i - j:

* n < W (the neighbour window): ordinary RoPE at positions i and j.
* n >= W: RoPE at the *grouped* positions, the query at i // G + W - W / G and the key at
  j // G, so distances grow G times slower past the window; the shift W - W / G makes the
  grouped distance continue from W where the window ends.

The two logits are merged before one softmax. The largest grouped distance at length L is
(L - 1) // G + W - W / G, inside a trained context T while L <= (T - W) * G + W (the paper's
bound on the extended window). The frequencies are the model's own: Self-Extend changes which
positions meet, not how they rotate (``posx.rope`` lists it with theta_i, and its checks).

Decisions: W - W / G is a float when G does not divide W, as in the authors' code (RoPE takes
fractional positions); the authors' optional log scale of the query (``scale_base``, off by
default there) is left out; the logits are merged and softmaxed in float32, as the authors
upcast. Scores are materialised in chunks of query rows (no fused kernel takes two sets of
logits), so this path is for evaluation, not training.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

CHUNK_ELEMENTS = 1 << 24  # logits held at once per chunk of query rows (64 MiB in float32)

# rotate_at(q, k, q_positions, k_positions) -> (q, k) rotated: the encoding's RoPE at given positions
RotateAt = Callable[[Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]
QueryScale = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class Grouping:
    """Self-Extend's two numbers, resolved for one model."""

    group: int  # G: past the window, G positions share one
    window: int  # W: keys closer than W keep their exact positions

    @classmethod
    def resolve(cls, group: int, window: int | None, train_context: int) -> "Grouping":
        """``window`` None: half the trained context (posx's default, with G = 16 it reaches 8x T)."""
        return cls(int(group), int(window) if window is not None else max(1, train_context // 2))

    def reach(self, train_context: int) -> int:
        """The longest sequence whose grouped distances stay inside ``train_context``: (T - W) * G + W."""
        return max(self.window, (train_context - self.window) * self.group + self.window)


def grouped_positions(positions: Tensor, grouping: Grouping) -> tuple[Tensor, Tensor]:
    """The group branch's query and key positions (float32, shape of ``positions``)."""
    G, W = grouping.group, grouping.window
    coarse = torch.div(positions, G, rounding_mode="floor").float()
    return coarse + (W - W / G), coarse


def attend(
    q: Tensor, k: Tensor, v: Tensor, positions: Tensor, grouping: Grouping, rotate_at: RotateAt,
    query_scale: QueryScale | None = None,
) -> Tensor:  # fmt: skip
    """Causal Self-Extend attention of unrotated q, k and v (B, H, L, hd) -> (B, H, L, hd).

    ``positions`` (L,) are the tokens' positions; ``query_scale`` a per-row logit scale applied
    to q before rotating (a scale per query row commutes with its rotation)."""
    if query_scale is not None:
        q = query_scale(q)
    near_q, near_k = rotate_at(q, k, positions, positions)
    far_pos_q, far_pos_k = grouped_positions(positions, grouping)
    far_q, far_k = rotate_at(q, k, far_pos_q, far_pos_k)
    B, H, L, hd = q.shape
    rows = max(1, min(L, CHUNK_ELEMENTS // max(1, B * H * L)))
    scale = 1.0 / math.sqrt(hd)
    out = torch.empty_like(v)
    for r0 in range(0, L, rows):
        r1 = min(L, r0 + rows)
        distance = positions[r0:r1, None] - positions[None, :r1]  # (rows, r1)
        near = near_q[:, :, r0:r1] @ near_k[:, :, :r1].transpose(-1, -2)  # (B, H, rows, r1)
        far = far_q[:, :, r0:r1] @ far_k[:, :, :r1].transpose(-1, -2)
        logits = torch.where(distance < grouping.window, near, far).float() * scale
        logits = logits.masked_fill(distance < 0, float("-inf"))
        weights = torch.softmax(logits, dim=-1).to(v.dtype)
        out[:, :, r0:r1] = weights @ v[:, :, :r1]  # (B, H, rows, hd)
    return out
