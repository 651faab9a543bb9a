"""xPos and partial rotation: the pure functions behind ``pos=xpos`` and ``pos.rotary_fraction``.

xPos (Sun et al., ACL 2023, arXiv 2212.10554; microsoft/torchscale, ``xpos_relative_position.py``):
RoPE whose query at n is scaled by zeta^(n/B) and key at m by zeta^(-m/B) per pair, zeta_i =
(2i + gamma*d) / ((1 + gamma)*d), gamma = 0.4, B = 512, so a logit decays as zeta_i^((n - m)/B).
As torchscale does, the exponent is taken about the window's centre (factors near 1, same logits).
Partial rotation (p-RoPE: Barbero et al., ICLR 2025, arXiv 2410.06205): only the highest-frequency
fraction p of the pairs rotate; the others get frequency 0 and, under xPos, scale 1 (p = 0: NoPE).
"""

from __future__ import annotations

import torch
from torch import Tensor

from posx.core.errors import PosxError

GAMMA = 0.4  # torchscale's XPOS: (arange(0, d, 2) + 0.4 * d) / (1.4 * d)
SCALE_BASE = 512.0  # torchscale's scale_base


def rotating_pairs(head_dim: int, fraction: float) -> int:
    """How many pairs rotate: round(fraction * head_dim / 2), the highest frequencies first."""
    if not 0.0 <= fraction <= 1.0:
        raise PosxError(f"pos.rotary_fraction={fraction} must be in [0, 1] (1: every pair rotates, 0: NoPE)")
    return round(fraction * (head_dim // 2))


def rotation_mask(head_dim: int, fraction: float) -> Tensor:
    """(head_dim // 2,) float32: 1 for the pairs that rotate (pair 0 has the highest frequency), 0 else."""
    mask = torch.zeros(head_dim // 2)
    mask[: rotating_pairs(head_dim, fraction)] = 1.0
    return mask


def xpos_zeta(head_dim: int, gamma: float = GAMMA) -> Tensor:
    """zeta_i = (2i + gamma*d) / ((1 + gamma)*d) for the d/2 pairs, float64, each in (0, 1)."""
    return (torch.arange(0, head_dim, 2, dtype=torch.float64) + gamma * head_dim) / ((1 + gamma) * head_dim)


def xpos_scales(log_zeta: Tensor, positions: Tensor, scale_base: float, centre: Tensor | None = None) -> Tensor:
    """(T, d/2) float32: zeta^((n - c)/B) for each position n, from ``log_zeta`` = ln(zeta) (0 where a
    pair does not rotate); the query takes it, the key its inverse. ``centre`` c, None: the middle
    of ``positions``; queries and keys at different positions pass one centre, so it cancels."""
    if centre is None:
        centre = torch.div(positions[0] + positions[-1], 2, rounding_mode="floor")
    offset = (positions - centre).float() / scale_base  # (T,)
    return torch.exp(torch.outer(offset, log_zeta))  # (T, d/2)
