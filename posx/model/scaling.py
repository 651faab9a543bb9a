"""Per-layer attention options that are not an encoding. ``model.attn_scale`` multiplies the
queries after rotation, with n = i + 1 the keys query i sees and T ``attn_scale_length``:
``logn``, max(1, ln n / ln T), an exact identity up to T (Chiang & Cholak, ACL 2022, arXiv
2202.12172; Qwen's ``logn``); ``ssmax``, s_h · ln n with s_h learned per head and layer from
1 / ln T (Nakanishi 2025, arXiv 2501.19399; the start is posx's choice, the paper gives none).
``model.nope_every`` = K: layer i (from 0) skips the rotation and any bias when (i + 1) % K == 0,
as Llama 4's ``no_rope_layers`` (Yang et al. 2025, arXiv 2501.18795).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from posx.core.errors import PosxError, choose

ATTN_SCALES = ("none", "logn", "ssmax")  # model.attn_scale


def is_nope_layer(layer: int, nope_every: int) -> bool:
    """Whether layer ``layer`` (0-based) attends without positions; ``nope_every`` 0: never."""
    return nope_every > 0 and (layer + 1) % nope_every == 0


def logn_factor(length: int, trained: int) -> Tensor:
    """(length,) float32: max(1, ln(i + 1) / ln T) for the query at index i."""
    n = torch.arange(1, length + 1, dtype=torch.float64)
    return (n.log() / math.log(trained)).clamp(min=1.0).float()


class LogitScale(nn.Module):
    """Multiplies the queries (B, H, L, hd) by the per-row logit scale of ``kind``."""

    def __init__(self, kind: str, n_head: int, trained: int):
        super().__init__()
        if kind not in ATTN_SCALES or kind == "none":
            raise PosxError(f"model.attn_scale={kind} is not a logit scale; {choose(ATTN_SCALES[1:])}")
        if trained < 2:
            raise PosxError(f"model.attn_scale_length={trained} must be at least 2 (its logarithm divides)")
        self.kind, self.trained = kind, trained
        if kind == "ssmax":
            self.s = nn.Parameter(torch.full((n_head,), 1.0 / math.log(trained)))  # (H,)

    def learned_s(self) -> list[float] | None:
        """Scalable-Softmax's s per head as plain floats; None for ``logn``, which learns nothing."""
        return self.s.detach().tolist() if self.kind == "ssmax" else None

    def forward(self, q: Tensor) -> Tensor:
        L = q.shape[-2]
        if self.kind == "logn":
            if L <= self.trained:
                return q  # the identity at and below T, without a multiply
            return q * logn_factor(L, self.trained).to(device=q.device, dtype=q.dtype)[:, None]
        log_n = torch.arange(1, L + 1, device=q.device, dtype=torch.float32).log()  # (L,)
        return q * (self.s[:, None, None] * log_n[:, None]).to(q.dtype)  # (H, L, 1) over (B, H, L, hd)
