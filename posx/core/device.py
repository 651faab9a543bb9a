"""Where tensors live and in which precision: the device a run asks for, bf16 autocast on
CUDA, TF32 matmuls, the dtype attention will see, and the device's bf16 peak (for MFU).
Training, evaluation and the model all take these from here."""

from __future__ import annotations

import re
from contextlib import nullcontext

import torch

from posx.core.errors import PosxError

DEVICES = ("auto", "cpu", "cuda", "cuda:N")


def check_device(requested: str) -> None:
    """auto, cpu, cuda or cuda:N (N a GPU index), else a one-line error."""
    if requested not in DEVICES[:3] and not re.fullmatch(r"cuda:\d+", str(requested)):
        raise PosxError(f"device={requested} is not one of {', '.join(DEVICES)}")


COMPILE = ("auto", "true", "false")  # train.compile (Hydra may hand true/false over as booleans)


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
        raise PosxError(
            f"device={requested} but this machine has {torch.cuda.device_count()} GPU(s) "
            f"(cuda:0 to cuda:{torch.cuda.device_count() - 1})"
        )
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


def use_tf32(device: torch.device, enabled: bool) -> None:
    """TF32 for float32 matmuls and convolutions on CUDA (train.tf32); nothing on the CPU.
    Under bf16 autocast it covers what stays float32 (e.g. the loss's log-softmax inputs)."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled


def use_compile(setting: object, device: torch.device) -> bool:
    """train.compile: ``auto`` compiles on CUDA only (on the CPU compile time outweighs the
    gain for posx's small models); ``true`` / ``false`` (strings or Hydra's booleans) decide."""
    value = str(setting).lower()
    if value not in COMPILE:
        raise PosxError(f"train.compile={setting} is unknown; choose one of {', '.join(COMPILE)}")
    return device.type == "cuda" if value == "auto" else value == "true"


# Dense bf16 tensor-core peak, FLOP/s, by a substring of torch.cuda.get_device_name (first
# match wins, so the specific names come first). From NVIDIA's data sheets, without sparsity.
BF16_PEAK = (
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
)


def bf16_peak_flops(device: torch.device) -> float | None:
    """The device's bf16 peak from ``BF16_PEAK``; None on the CPU and for GPUs not listed."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in BF16_PEAK if key in name), None)
