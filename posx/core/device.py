"""Where tensors live and in which precision: the device, bf16 autocast on CUDA, TF32, the dtype
attention sees, and the device's bf16 peak (for MFU)."""

from __future__ import annotations

import re
from contextlib import nullcontext

import torch

from posx.core.errors import PosxError, unknown

DEVICES = ("auto", "cpu", "cuda", "cuda:N")
COMPILE = ("auto", "true", "false")  # train.compile (Hydra may hand true/false over as booleans)
# Dense bf16 tensor-core peak, FLOP/s, from NVIDIA's data sheets without sparsity. A device name
# ("NVIDIA H100 80GB HBM3") matches a key whose words it holds whole, in order; the key with the
# most words wins ("H100 NVL" beats "H100", "L40S" never matches "L4"); a tie has no peak.
BF16_PEAK = {
    "H200": 989e12,  # SXM
    "H200 NVL": 835e12,
    "H100": 989e12,  # SXM (HBM3)
    "H100 NVL": 835e12,
    "H100 PCIe": 756e12,
    "A100": 312e12,
    "L40S": 362e12,
    "L40": 181e12,
    "L4": 121e12,
}


def check_device(requested: str) -> None:
    if requested not in DEVICES[:3] and not re.fullmatch(r"cuda:\d+", str(requested)):
        raise PosxError(f"device={requested} is not one of {', '.join(DEVICES)}")


def pick_device(requested: str) -> torch.device:
    """``auto``: CUDA when present, else the CPU; a GPU that is not there is a user error."""
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
    """torch's intra-op threads (None: torch's default, one per core)."""
    if threads is not None:
        torch.set_num_threads(int(threads))


def autocast(device: torch.device):
    if device.type == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return nullcontext()


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype q and k will have: the autocast dtype when autocast is on, else x's."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


def use_tf32(device: torch.device, enabled: bool) -> None:
    """TF32 on CUDA (train.tf32) through ``fp32_precision``, which inductor reads (``allow_tf32`` is
    deprecated, and torch refuses to mix the two)."""
    if device.type == "cuda":
        precision = "tf32" if enabled else "ieee"
        torch.backends.cuda.matmul.fp32_precision = precision
        torch.backends.cudnn.conv.fp32_precision = precision


def use_compile(setting: object, device: torch.device) -> bool:
    """``auto`` compiles on CUDA only: on the CPU compiling outweighs the gain for small models."""
    value = check_compile(setting)
    return device.type == "cuda" if value == "auto" else value == "true"


def check_compile(setting: object) -> str:
    value = str(setting).lower()
    if value not in COMPILE:
        raise unknown("train.compile", setting, COMPILE)
    return value


def peak_for_name(name: str) -> float | None:
    """The bf16 peak of the GPU called ``name`` from ``BF16_PEAK`` (None: no single best key)."""
    words = re.findall(r"[A-Za-z0-9]+", name.upper())
    matches = [key for key in BF16_PEAK if _in_order(key.upper().split(), words)]
    if not matches:
        return None
    longest = max(len(key.split()) for key in matches)
    best = {BF16_PEAK[key] for key in matches if len(key.split()) == longest}
    return best.pop() if len(best) == 1 else None


def _in_order(needle: list[str], words: list[str]) -> bool:
    n = len(needle)
    return any(words[i : i + n] == needle for i in range(len(words) - n + 1))


def bf16_peak_flops(device: torch.device) -> float | None:
    """None on the CPU and for GPUs not listed: MFU is then unknown, never against a guessed peak."""
    if device.type != "cuda":
        return None
    return peak_for_name(torch.cuda.get_device_name(device))
