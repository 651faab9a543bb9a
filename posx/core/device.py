"""Where tensors live and in which precision: the device a run asks for, bf16 autocast on
CUDA, and the dtype attention will see. Training, evaluation and the model all take these
from here."""

from __future__ import annotations

from contextlib import nullcontext

import re

import torch

from posx.core.errors import PosxError

DEVICES = ("auto", "cpu", "cuda", "cuda:N")


def check_device(requested: str) -> None:
    """auto, cpu, cuda or cuda:N (N a GPU index), else a one-line error."""
    if requested not in DEVICES[:3] and not re.fullmatch(r"cuda:\d+", str(requested)):
        raise PosxError(f"device={requested} is not one of {', '.join(DEVICES)}")


def pick_device(requested: str) -> torch.device:
    """``auto``: CUDA when present, else the CPU; ``cuda`` without CUDA, or ``cuda:N`` past the
    GPUs there are, is a user error."""
    check_device(requested)
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise PosxError(f"device={requested} but CUDA is not available here; use device=cpu or device=auto")
    device = torch.device(requested)
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise PosxError(f"device={requested} but this machine has {torch.cuda.device_count()} GPU(s) "
                        f"(cuda:0 to cuda:{torch.cuda.device_count() - 1})")
    return device


def set_threads(threads: int | None) -> None:
    """torch's intra-op threads (``threads``; None leaves torch's default: one per core)."""
    if threads is not None:
        torch.set_num_threads(int(threads))


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
