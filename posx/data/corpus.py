"""A corpus's token ids (a token store's memmap, or a tensor) as training batches: random windows,
and the length checks before them."""

from __future__ import annotations

import numpy as np
import torch

from posx.core.errors import PosxError


def require_tokens(tokens: torch.Tensor, needed: int, what: str) -> None:
    """Raise PosxError when ``tokens`` holds fewer than ``needed`` tokens."""
    n = len(tokens)  # a 1-D tensor or a numpy array (a token store's memmap)
    if n < needed:
        raise PosxError(
            f"{what} has {n} tokens, fewer than the {needed} needed; use more data or a shorter context length"
        )


def get_batch(
    tokens: torch.Tensor, batch_size: int, context_length: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of ``tokens`` (of a memmap only the windows are read): x and y (B, T) int64, y shifted."""
    if batch_size < 1 or context_length < 1:
        raise PosxError(
            f"batch size and context length must be at least 1, got {batch_size} and "
            f"{context_length}; fix train.batch_size / train.context_length"
        )
    n = len(tokens)
    if n < context_length + 1:
        raise PosxError(
            f"data has {n} tokens, fewer than one window of {context_length + 1}; "
            "use more data or a shorter train.context_length"
        )
    offsets = torch.randint(0, n - context_length, (batch_size,), generator=generator)
    idx = offsets[:, None] + torch.arange(context_length + 1)  # (B, T + 1)
    if isinstance(tokens, np.ndarray):
        windows = torch.from_numpy(tokens[idx.numpy()].astype(np.int64))  # (B, T + 1)
    else:
        windows = tokens.reshape(-1)[idx.to(tokens.device)].long()  # (B, T + 1)
    return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


def as_long(tokens) -> torch.Tensor:
    """A 1-D tensor or numpy array (a memmap slice) as an int64 tensor."""
    if isinstance(tokens, np.ndarray):
        return torch.from_numpy(tokens.astype(np.int64))
    return tokens.long()
