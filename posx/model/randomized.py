"""Randomized positions (Ruoss, Delétang, Genewein, Grau-Moya, Csordás, Bennani, Legg, Veness,
"Randomized Positional Encodings Boost Length Generalization of Transformers", ACL 2023, arXiv
2305.16843; code: google-deepmind/randomized_positional_encodings).

While training, a window of T tokens takes as its positions a sorted random subset of
[0, L_max), L_max >= T (``pos.randomized_max``; null: the longest evaluated length, max of
``eval.factors`` x T, as the paper sets L to the longest test length). The encoding then sees
every position up to L_max, and distances of every size up to L_max, at the cost of length T.
One draw per forward pass, shared by the batch, from torch's default generator: seeded by
``seed`` like the weights, saved in checkpoints (resume draws what an uninterrupted run draws),
the same on every DDP rank.

At evaluation (``model.eval()``) the positions are the plain 0 .. n-1: the scored numbers then
do not depend on a draw (a choice of posx; the authors' code samples at test time too).
Applies to the encodings that read positions: rope, xpos, absolute (its table needs L_max
rows) and sinusoidal; the bias encodings read the distance in the window and ignore them.
"""

from __future__ import annotations

import torch
from torch import Tensor

TAKES_POSITIONS = ("rope", "xpos", "absolute", "sinusoidal")  # encodings pos.randomized applies to


def random_positions(length: int, limit: int, device: torch.device) -> Tensor:
    """(length,) int64: a sorted subset of [0, limit) drawn uniformly, on ``device``."""
    return torch.randperm(limit)[:length].sort().values.to(device)
