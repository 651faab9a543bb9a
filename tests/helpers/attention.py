"""Shared by the windowed-attention tests: random q, k, v, a float64 RoPE written as a complex
product (which shares no code with posx's rotation), posx's windowed attention at positions from
an offset, and the encoding's own causal attention to compare with."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from posx.model import windowed
from posx.model.rotary import Rotary

HD, BASE = 8, 10000.0  # head dimension and RoPE base of every case


def qkv(L: int, seed: int = 0, B: int = 2, H: int = 3) -> tuple[torch.Tensor, ...]:
    """Unrotated q, k, v (B, H, L, HD), seeded."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, L, HD, generator=g) for _ in range(3))


def rotate_complex(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """RoFormer's rotation of interleaved pairs as a complex product, in float64."""
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
    theta = BASE ** (-torch.arange(0, HD, 2, dtype=torch.float64) / HD)
    angles = positions.double()[:, None] * theta[None, :]  # (L, hd/2)
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)).flatten(-2)


def windowed_attend(q, k, v, method, encoding=None, offset: int = 0) -> torch.Tensor:
    """posx's windowed attention of ``method`` at positions offset, offset + 1, ... (RoPE by default)."""
    encoding = encoding or Rotary(HD, BASE)
    return windowed.attend(q, k, v, torch.arange(offset, offset + q.shape[-2]), method, encoding.rotate_at)


def plain_attention(q, k, v, encoding) -> torch.Tensor:
    """The encoding's own causal attention at positions 0 .. L - 1."""
    rq, rk = encoding.rotate(q, k, torch.arange(q.shape[-2]))
    return F.scaled_dot_product_attention(rq, rk, v, is_causal=True)
