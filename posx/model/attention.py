"""How a block attends: SDPA (the reference; ``is_causal``, or the encoding's additive (1, H, L, L)
mask, which keeps SDPA off its flash kernel) or, for the bias encodings with
``model.attention=flex``, FlexAttention with the encoding's ``score_mod`` and a causal
``BlockMask``, fused under ``torch.compile`` on CUDA, eager elsewhere; with dropout, or gradients
off CUDA, the SDPA path (``flex_applies``). After the PyTorch FlexAttention documentation and
pytorch-labs/attention-gym's examples.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

ATTENTION = ("sdpa", "flex")  # model.attention

# Eager FlexAttention off CUDA is chosen on purpose: its warning would print once per layer and call.
warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")

ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]

# Attention that materialises its logits (the windowed methods, CoPE) holds at most this many at
# once, in blocks of query rows: on the CPU, 4 MiB blocks ran the windowed methods about 2x and
# CoPE 4 to 5x faster than 64 MiB ones at 8x T (docs/measurements.md, "Materialised attention on
# the CPU"); on CUDA, large blocks keep the kernels large (not yet measured there).
CHUNK_ELEMENTS = 1 << 24  # 64 MiB in float32: CUDA and any other device
CPU_CHUNK_ELEMENTS = 1 << 20  # 4 MiB


def row_blocks(B: int, H: int, L: int, device: torch.device) -> Iterator[tuple[int, int]]:
    """(r0, r1) blocks of query rows whose (B, H, rows, L) logits fit in the device's limit."""
    limit = CPU_CHUNK_ELEMENTS if device.type == "cpu" else CHUNK_ELEMENTS
    rows = max(1, min(L, limit // max(1, B * H * L)))
    for r0 in range(0, L, rows):
        yield r0, min(L, r0 + rows)


@dataclass
class FlexBias:
    """One layer's flex attention: score_mod, causal block mask, CUDA tile sizes (None: torch's)."""

    score_mod: ScoreMod
    block_mask: BlockMask
    kernel_options: dict | None = None


def _causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    return q_idx >= kv_idx


# Devices on which PyTorch's public flex_attention runs backward (2.5 .. 2.13: CUDA only).
FLEX_GRAD_DEVICES = {"cuda"}


def flex_applies(device: torch.device, dropout: float) -> bool:
    """Whether a forward may take FlexAttention: no dropout, and no gradients without a flex backward."""
    return dropout == 0 and (not torch.is_grad_enabled() or device.type in FLEX_GRAD_DEVICES)


_block_masks: dict[tuple, BlockMask] = {}  # only the latest length is kept


def causal_block_mask(length: int, device: torch.device) -> BlockMask:
    """The causal BlockMask for (length, length), kept for the latest length (traced inside compile)."""
    if torch.compiler.is_compiling():
        return create_block_mask(_causal, None, None, length, length, device=device)
    key = (length, str(device))
    if key not in _block_masks:
        _block_masks.clear()
        _block_masks[key] = create_block_mask(_causal, None, None, length, length, device=device)
    return _block_masks[key]


_compiled: list = []  # torch.compile(flex_attention), made on first CUDA use


class FlexFallbackWarning(UserWarning):
    """Compiled FlexAttention failed for a call, which then ran the eager (unfused) flex."""


def _flex_fn(device: torch.device):
    """The fused kernel on CUDA, compiled once with automatic dynamic shapes (graphs stay few
    whatever the lengths) and one graph for every layer (score_mods differ only in tensors they
    hold); eager elsewhere, and the plain function inside a graph already being compiled."""
    if device.type != "cuda" or torch.compiler.is_compiling():
        return flex_attention
    if not _compiled:
        # fullgraph: past dynamo's recompile limit, or on a graph break, the call raises
        # instead of running eager flex unnoticed; _compiled_or_loud catches and says so.
        _compiled.append(torch.compile(flex_attention, fullgraph=True))
    return _compiled_or_loud


def _compiled_or_loud(
    q: Tensor, k: Tensor, v: Tensor, score_mod: ScoreMod, block_mask: BlockMask, kernel_options: dict | None = None
) -> Tensor:
    """Compiled FlexAttention; where compiling fails, the eager flex with a warning naming the cause."""
    try:
        return _compiled[0](q, k, v, score_mod=score_mod, block_mask=block_mask, kernel_options=kernel_options)
    except Exception as exc:  # any compile failure: fall back, but never silently
        cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        warnings.warn(
            f"compiled FlexAttention failed at shape {tuple(q.shape)} ({type(exc).__name__}: {cause}); "
            "running eager flex_attention, which materialises the (B, H, L, L) scores",
            FlexFallbackWarning,
            stacklevel=2,
        )
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, kernel_options=kernel_options)


def attend(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | FlexBias | None, dropout: float) -> Tensor:
    """Causal attention of q, k, v (B, H, T, hd) -> (B, H, T, hd). bias: None (plain causal, SDPA's
    flash path), the additive (1, H, T, T) mask (SDPA), or a ``FlexBias`` (dropout must be 0)."""
    if isinstance(bias, FlexBias):
        # Tile sizes are Triton's: on the CPU torch picks its own.
        options = bias.kernel_options if q.device.type == "cuda" else None
        return _flex_fn(q.device)(q, k, v, score_mod=bias.score_mod, block_mask=bias.block_mask, kernel_options=options)
    if bias is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)
    # (1, H, T, T) broadcast over the batch, never expanded
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout)
