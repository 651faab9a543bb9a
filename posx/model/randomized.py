"""Training-time position ids: randomized positions and PoSE; evaluation uses 0 .. n-1.

Randomized positions (Ruoss et al., ACL 2023, arXiv 2305.16843; google-deepmind/
randomized_positional_encodings): a training window of T tokens takes a sorted random subset of
[0, L_max) (``pos.randomized_max``; null: the longest evaluated length, as the paper sets L to the
longest test length). One draw per forward, shared by the batch, from torch's default generator
(seeded, checkpointed, the same on every DDP rank). ``eval.randomized_positions=sampled`` samples
at test time too, as the paper and the authors' code do, from a generator seeded by the length;
posx's dense default keeps the scored numbers free of a draw.

PoSE (Zhu et al., ICLR 2024, arXiv 2309.10400; dwzhu-pku/PoSE, ``train_preprocess_function_pose``):
two chunks of ids, the second shifted by a skip, reaching ``pos.pose_length``; the distributions
and why: docs/extending.md, "PoSE".
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor

AT_TEST = ("dense", "sampled")  # eval.randomized_positions


@contextlib.contextmanager
def sampled_at_test(model, how: str, seed: int):
    """Within it, a model trained with ``pos.randomized`` draws its positions in eval mode too when
    ``how`` is ``sampled`` (module docstring), from torch's CPU generator seeded by ``seed``
    (its state outside is as before); any other model, or ``dense``, is left as it is."""
    pos = getattr(getattr(model, "config", None), "pos", None)
    if how != "sampled" or not getattr(pos, "randomized", False):
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model.sampled_positions = True
        try:
            yield
        finally:
            model.sampled_positions = False


def random_positions(length: int, limit: int, device: torch.device) -> Tensor:
    """(length,) int64: a sorted subset of [0, limit) drawn uniformly, on ``device``."""
    return torch.randperm(limit)[:length].sort().values.to(device)


def pose_positions(length: int, target: int, device: torch.device) -> Tensor:
    """(length,) int64 PoSE ids of one window (docs/extending.md, "PoSE"); ``target`` >= ``length``."""
    first = int(torch.randint(1, (length + 1) // 2 + 1, ()))
    skip = int(torch.randint(0, target - length + 1, ()))
    positions = torch.arange(length)
    positions[first:] += skip
    return positions.to(device)
