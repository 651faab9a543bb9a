"""Training-time position ids: randomized positions and PoSE. Both change only training
forwards (``model.train()``); evaluation always uses the plain positions 0 .. n-1.

Randomized positions (Ruoss, Delétang, Genewein, Grau-Moya, Csordás, Bennani, Legg, Veness,
"Randomized Positional Encodings Boost Length Generalization of Transformers", ACL 2023, arXiv
2305.16843; code: google-deepmind/randomized_positional_encodings).

While training, a window of T tokens takes as its positions a sorted random subset of
[0, L_max), L_max >= T (``pos.randomized_max``; null: the longest evaluated length, max of
``eval.factors`` x T, as the paper sets L to the longest test length). The encoding then sees
every position up to L_max, and distances of every size up to L_max, at the cost of length T.
One draw per forward pass, shared by the batch, from torch's default generator: seeded by
``seed`` like the weights, saved in checkpoints (resume draws what an uninterrupted run draws),
the same on every DDP rank.

At evaluation the positions are the plain 0 .. n-1 unless ``eval.randomized_positions=sampled``
(``sampled_at_test``): the published protocol samples them at test time too (a sorted subset
of [0, L_max) for every forward pass, as in training), which the authors' code does; posx's
dense default keeps the scored numbers free of a draw. Sampled evaluation draws from a
generator seeded by the length, so it is the same on every evaluation of the run.
Applies to the encodings that read positions: rope, xpos, absolute (its table needs L_max
rows) and sinusoidal; the bias encodings read the distance in the window and ignore them.

PoSE, positional skip-wise training (Zhu, Yang, Wang, Song, Wu, Wei, Li, "PoSE: Efficient
Context Window Extension of LLMs via Positional Skip-wise Training", ICLR 2024, arXiv
2309.10400; code: dwzhu-pku/PoSE): a window of T tokens is split into N = 2 chunks whose
position ids are contiguous within a chunk, the second shifted by a skip, so that the ids
reach up to the target length L_t > T (``pos.pose_length``, set to factor x T by
``posx extend ... extend.pose=true``). As in the authors' ``train_preprocess_function_pose``:
the first chunk has l_0 ~ U{1 .. ceil(T/2)} tokens at ids 0 .. l_0 - 1; the second chunk's ids
start at l_0 + u with u ~ U{0 .. L_t - T}, so the largest id is at most L_t - 1 and every
relative distance up to L_t - 1 can occur. The tokens stay contiguous text (the authors take
the second chunk's text from further on in a long document; posx windows are contiguous).
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
    """(length,) int64 PoSE ids of one window (module docstring): two chunks, the second
    shifted by a skip drawn from torch's default generator; ``target`` >= ``length``."""
    first = int(torch.randint(1, (length + 1) // 2 + 1, ()))
    skip = int(torch.randint(0, target - length + 1, ()))
    positions = torch.arange(length)
    positions[first:] += skip
    return positions.to(device)
