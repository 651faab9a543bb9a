"""CoPE, contextual position encoding (Golovneva et al. 2024, arXiv 2405.18719; facebookresearch/RAM,
``projects/cope/src/cope/context_position.py``): query i counts the keys its gates
g_it = sigmoid(q_i . k_t / sqrt(d)) let through, p_ij = sum over t = j .. i of g_it clamped at
npos - 1, and its logit to key j is (q_i . k_j + q_i . e[p_ij]) / sqrt(d), e a learned table per
layer (zeros at first) read between e[floor p] and e[ceil p]. The positions depend on the logits,
so those are materialised a block of query rows at a time. The authors' defaults: gates from the
same keys, a table per layer, npos = T + 1 (past T a count stays at T).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posx.core.errors import PosxError
from posx.model.attention import row_blocks
from posx.model.positional import PositionalEncoding


class CoPE(PositionalEncoding):
    """One (1, head_dim, npos) table per layer; the attention itself (``attend``)."""

    kind = "cope"
    contextual = True

    def __init__(self, n_layer: int, head_dim: int, npos: int):
        super().__init__()
        if npos < 2:
            raise PosxError(f"pos.cope_npos={npos} must be at least 2 (positions 0 .. npos - 1)")
        self.npos = npos
        self.tables = nn.ParameterList(nn.Parameter(torch.zeros(1, head_dim, npos)) for _ in range(n_layer))

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor, dropout: float) -> Tensor:
        """Causal attention of q, k, v (B, H, L, hd) with layer ``layer``'s contextual positions."""
        B, H, L, _ = q.shape
        out = torch.empty_like(v)
        for r0, r1 in row_blocks(B, H, L, q.device):
            out[:, :, r0:r1] = self._rows(layer, q[:, :, r0:r1], k[:, :, :r1], v[:, :, :r1], r0, dropout)
        return out

    def _rows(self, layer: int, q: Tensor, k: Tensor, v: Tensor, r0: int, dropout: float) -> Tensor:
        """Query rows r0 .. r0 + rows - 1 against the keys before them: (B, H, rows, hd)."""
        rows, keys, hd = q.shape[-2], k.shape[-2], q.shape[-1]
        causal = torch.arange(r0, r0 + rows, device=q.device)[:, None] >= torch.arange(keys, device=q.device)
        logits = (q @ k.transpose(-1, -2)).float()  # (B, H, rows, keys)
        gates = torch.sigmoid(logits / math.sqrt(hd)) * causal
        positions = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=self.npos - 1)  # p_ij, 0 past the query
        fixed = (q @ self.tables[layer].to(q.dtype)).float()  # (B, H, rows, npos): q . e[n] at every n
        floor = positions.floor()
        low = fixed.gather(-1, floor.long())
        high = fixed.gather(-1, positions.ceil().long())
        weight = positions - floor  # differentiable, as the gates' only way into the loss
        logits = (logits + high * weight + low * (1 - weight)) / math.sqrt(hd)
        attn = torch.softmax(logits.masked_fill(~causal, float("-inf")), dim=-1).to(v.dtype)
        return (F.dropout(attn, dropout) if dropout else attn) @ v
