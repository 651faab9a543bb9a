"""A training run's memory, estimated before its first step, so a run too large for the machine
says so instead of being killed without a word (the OOM killer's SIGKILL runs no handler).

Per token and layer (A + MLP) x d_model activations kept for backward: A = 10 for gpt2, 13 for
llama (float32 RMSNorm copies); MLP = 2 x mlp_ratio for gpt2, 4 x SwiGLU hidden / d_model for
llama (Korthikanti et al. 2022, section 4.1, without the scores a flash kernel never stores; A
fitted to the default model's peak RSS, docs/measurements.md). Per token three float32
vocab-wide tensors; per parameter 16 bytes (weights, gradients, AdamW's moments). Elements are 4
bytes on the CPU, 2 under bf16 autocast. It catches a run several times too large; posx warns
and trains anyway.
"""

from __future__ import annotations

from pathlib import Path

import torch

from posx.model.blocks import swiglu_hidden
from posx.model.spec import ModelSpec
from posx.schema.config import ModelConfig

GIB = 1024**3
MEMINFO = Path("/proc/meminfo")
CGROUP = Path("/sys/fs/cgroup")  # cgroup v2: memory.max and memory.current (a SLURM job's limit)


def activation_elements(m: ModelConfig) -> int:
    """Activations kept for backward per token, over every layer, in elements (``m``: the model section)."""
    if m.block == "llama":
        return m.n_layer * (13 * m.d_model + 4 * swiglu_hidden(m.d_model, m.mlp_ratio, m.multiple_of))
    return m.n_layer * (10 * m.d_model + 2 * m.mlp_ratio * m.d_model)


def estimate_bytes(config: ModelSpec, tokens: int, n_params: int, device: torch.device) -> int:
    """Training memory of one micro-batch of ``tokens`` tokens, with the optimizer's state."""
    element = 2 if device.type == "cuda" else 4
    per_token = activation_elements(config.model) * element + 3 * 4 * config.vocab_size
    return tokens * per_token + 16 * n_params


def _meminfo_available() -> int | None:
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_available() -> int | None:
    try:
        limit = (CGROUP / "memory.max").read_text().strip()
        used = int((CGROUP / "memory.current").read_text().strip())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else max(0, int(limit) - used)


def available_bytes(device: torch.device) -> int | None:
    """Free memory for the run: the GPU's, else the machine's (within a cgroup limit); None: unknown."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    known = [b for b in (_meminfo_available(), _cgroup_available()) if b is not None]
    return min(known) if known else None


def warning(config: ModelSpec, micro: int, context: int, n_params: int, device: torch.device) -> str | None:
    """One line (without its ``warning:``) when the estimate exceeds the free memory, else None."""
    need, free = estimate_bytes(config, micro * context, n_params, device), available_bytes(device)
    if free is None or need <= free:
        return None
    where = "GPU" if device.type == "cuda" else "machine"
    return (
        f"this run needs about {need / GIB:.1f} GiB ({micro} x {context} tokens a forward pass) "
        f"and the {where} has {free / GIB:.1f} GiB free; it may be stopped without a message. "
        "Set train.micro_batch_size lower (the same batch in more passes) or shorten train.context_length"
    )
