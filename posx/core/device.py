"""Where tensors live and in which precision: the device a run asks for, bf16 autocast on
CUDA, and the dtype attention will see. Training, evaluation and the model all take these
from here."""

from __future__ import annotations

from contextlib import nullcontext

import torch

from posx.core.errors import PosxError

DEVICES = ("auto", "cpu", "cuda")


def pick_device(requested: str) -> torch.device:
    """``auto``: CUDA when present, else the CPU; ``cuda`` without CUDA is a user error."""
    if requested not in DEVICES:
        raise PosxError(f"device={requested} is not one of {', '.join(DEVICES)}")
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise PosxError("device=cuda but CUDA is not available here; use device=cpu or device=auto")
    return torch.device(requested)


def autocast(device: torch.device):
    """bf16 autocast on CUDA; full precision on the CPU."""
    if device.type == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return nullcontext()


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype q and k will have: the autocast dtype when autocast is on, else x's."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype
