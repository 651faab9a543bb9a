"""Shared by the windowed-attention tests: random q, k, v and a float64 RoPE written as a
complex product, which shares no code with posx's rotation."""

from __future__ import annotations

import torch

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
