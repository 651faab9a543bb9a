"""Per-layer attention options that are not an encoding: a length-dependent logit scale
(``model.attn_scale``) and layers that attend without positions (``model.nope_every``).

Logit scale, applied to the queries after the encoding rotates them (so to every logit of the
query's row, before the softmax; the causal mask and any bias are added after it). With n the
number of keys query i sees (i + 1, counted in its window) and T ``attn_scale_length``:

* ``logn``: max(1, ln n / ln T). The identity (an exact multiply by 1.0) up to T; past it the
  logits grow with ln n, so the softmax entropy does not grow with the length (Chiang & Cholak,
  "Overcoming a Theoretical Limitation of Self-Attention", ACL 2022, arXiv 2202.12172; the
  ``logn`` attention of Qwen: log_T(n) for n > T, else 1).
* ``ssmax``: s_h · ln n with s_h a learned scalar per head and layer (Nakanishi, "Scalable-
  Softmax Is Superior for Attention", 2025, arXiv 2501.19399: softmax(s · ln n · z)). s starts
  at 1 / ln T, so at the start of training a query that sees T keys is unscaled (a choice of
  posx; the paper gives no initialisation for s).

Hybrid NoPE layers: layer i (from 0) attends without positions when (i + 1) % K == 0, K =
``nope_every``: every K-th layer, the last of each group of K, as Llama 4's interleaved NoPE
layers (transformers' Llama4TextConfig: ``no_rope_layers``, a layer uses RoPE unless
(i + 1) % no_rope_layer_interval == 0; Yang et al., "Rope to Nope and Back Again: A New Hybrid
Attention Strategy", 2025, arXiv 2501.18795). Such a layer skips the rotation and any bias.
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


def make_scale(config) -> LogitScale | None:
    """The layer's logit scale for the ``model`` section (``ModelConfig``), or None (``attn_scale=none``)."""
    if config.attn_scale == "none":
        return None
    return LogitScale(config.attn_scale, config.n_head, config.attn_scale_length)
