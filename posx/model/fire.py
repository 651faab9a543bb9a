"""FIRE (Li et al., ICLR 2024, arXiv 2310.04418), as the PyTorch code of the paper's appendix: a
learned bias b(i, j) = f(psi(i - j) / psi(max(L, i))), psi(x) = ln(|c x| + 1), on the logit of
query i and key j <= i; f an MLP (1 -> hidden, ReLU, -> heads), c from 0.1, L = |multiplier · L0|
with the multiplier learned from 1 (L0 = ``pos.fire_threshold``, by default T/4: the paper's 512
at T = 2048), eps = 1e-6 in the normaliser. Every distance a query sees maps into [0, 1], so a
longer context interpolates the trained inputs. posx's choices: one FIRE for all layers (as T5
shares its table); i and j are indices in the window (as FlexAttention's q_idx, kv_idx).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posx.core.errors import PosxError

C_INIT = 0.1  # the paper's code: init_c
EPS = 1e-6  # added to the normaliser


class FireMLP(nn.Module):
    """f, c and L of FIRE; ``causal_bias`` for SDPA, ``score`` for FlexAttention's score_mod."""

    def __init__(self, n_head: int, hidden: int = 32, threshold: float = 512.0):
        super().__init__()
        if hidden < 1 or not threshold > 0:
            raise PosxError(f"FIRE needs pos.fire_hidden >= 1 and pos.fire_threshold > 0, got {hidden}, {threshold}")
        self.up = nn.Linear(1, hidden)
        self.down = nn.Linear(hidden, n_head)
        self.c = nn.Parameter(torch.tensor(C_INIT))
        self.multiplier = nn.Parameter(torch.tensor(1.0))
        self.register_buffer("threshold", torch.tensor(float(threshold)), persistent=False)  # L0

    def limit(self) -> Tensor:
        """L = |multiplier · L0|, the learned threshold (0-d)."""
        return (self.multiplier * self.threshold).abs()

    def normalized(self, i: Tensor, j: Tensor) -> Tensor:
        """psi(i - j) / psi(max(L, i)) for float positions i (query) and j (key), broadcast."""
        limit = self.limit()
        num = torch.log((self.c * (i - j).clamp(min=0)).abs() + 1)
        return num / (torch.log((self.c * torch.maximum(i, limit)).abs() + 1) + EPS)

    def causal_bias(self, length: int, device: torch.device) -> Tensor:
        """(1, H, L, L) float32: b(i, j) for j <= i, -inf above the diagonal."""
        pos = torch.arange(length, device=device, dtype=torch.float32)
        x = self.normalized(pos[:, None], pos[None, :])  # (L, L)
        bias = self.down(F.relu(self.up(x.unsqueeze(-1)))).permute(2, 0, 1)  # (H, L, L)
        future = torch.ones(length, length, dtype=torch.bool, device=device).triu(1)
        return bias.masked_fill(future, float("-inf")).unsqueeze(0)

    def score(self, score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        """FlexAttention score_mod: score + b(q_idx, kv_idx) at head h (the causal mask is separate)."""
        x = self.normalized(q_idx.float(), kv_idx.float())
        hidden = F.relu(self.up.weight[:, 0] * x + self.up.bias)  # (hidden,)
        return score + ((self.down.weight[h] * hidden).sum() + self.down.bias[h]).to(score.dtype)
