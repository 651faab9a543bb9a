"""Block parts of ``model.block``: ``gpt2`` (LayerNorm with bias, GELU MLP) or ``llama`` (Touvron
et al. 2023): RMSNorm (Zhang & Sennrich 2019) exactly as transformers' ``LlamaRMSNorm``, so an
export computes the same numbers, and a SwiGLU MLP (Shazeer 2020) sized as Meta's ``FeedForward``
(meta-llama/llama, llama/model.py). No linear layer has a bias; attention is the same for both.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posx.core.errors import PosxError, unknown

BLOCKS = ("gpt2", "llama")  # model.block
RMS_EPS = 1e-6  # RMSNorm epsilon (transformers' LlamaConfig.rms_norm_eps default)


def check_block(block: str) -> None:
    if block not in BLOCKS:
        raise unknown("model.block", block, BLOCKS)


def swiglu_hidden(d_model: int, mlp_ratio: int, multiple_of: int) -> int:
    """Llama's SwiGLU width: int(2/3 * mlp_ratio * d_model) rounded up to ``multiple_of`` (Meta's
    code), so the three matrices hold the parameters of a GELU MLP of mlp_ratio * d_model."""
    if multiple_of < 1:
        raise PosxError(f"model.multiple_of={multiple_of} must be at least 1")
    hidden = int(2 * mlp_ratio * d_model / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, no bias; computed in float32 like LlamaRMSNorm."""

    def __init__(self, d_model: int, eps: float = RMS_EPS):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., C)
        return self.weight * h.to(dtype)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)), no biases; hidden width from ``swiglu_hidden``."""

    def __init__(self, d_model: int, hidden: int, dropout: float = 0.0):
        super().__init__()
        self.gate = nn.Linear(d_model, hidden, bias=False)
        self.up = nn.Linear(d_model, hidden, bias=False)
        self.down = nn.Linear(hidden, d_model, bias=False)
        self.dropout = dropout

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(self.down(F.silu(self.gate(x)) * self.up(x)), self.dropout, self.training)


def make_norm(block: str, d_model: int) -> nn.Module:
    """The block's normalisation: LayerNorm (gpt2) or RMSNorm (llama)."""
    check_block(block)
    return RMSNorm(d_model) if block == "llama" else nn.LayerNorm(d_model)


class ShortConv(nn.Module):
    """``model.short_conv``: x + a causal depthwise convolution of x over the last ``kernel``
    positions, before attention, so matching "the token before this one" needs no attention layer.
    The short convolution of zoology's BaseConv (Arora et al. 2023, arXiv 2312.04927;
    HazyResearch/zoology, ``mixers/base_conv.py``) and Based (arXiv 2402.18668), and Allen-Zhu's
    canon layers (2025). It gives any encoding learned local order (docs/tasks.md compares encodings
    with and without it) and acts on offsets 0 .. kernel - 1 only: no positions past T unseen at T."""

    def __init__(self, d_model: int, kernel: int):
        super().__init__()
        self.conv = nn.Conv1d(d_model, d_model, kernel, groups=d_model, padding=kernel - 1, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        T = x.shape[1]  # x: (B, T, C)
        return x + self.conv(x.transpose(1, 2))[..., :T].transpose(1, 2)  # the left-padded part only: causal
