"""A training run's memory, estimated before its first step, so a run too large for the machine
says so instead of being stopped without a word by the kernel's out-of-memory killer (which
sends SIGKILL: no Python handler runs, and the run directory is left without a checkpoint).

The estimate is what one micro-batch keeps for its backward pass plus the optimizer's state:

* per token and layer, (A + MLP) x d_model activations: A = 10 for the gpt2 block, 13 for
  llama (its RMSNorm keeps float32 copies); MLP = 2 x mlp_ratio for gpt2 (the up projection's
  output and its GELU) and 4 x SwiGLU hidden / d_model for llama (gate, up, their SiLU and
  product). Attention is SDPA's flash path, linear in the length. The form follows Korthikanti
  et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", section 4.1:
  34 x hidden bytes per token and layer in 16-bit, without the attention scores a flash
  kernel never stores); A was fitted to the peak RSS of the default model on the CPU
  (docs/measurements.md: peak RSS runs 0.5 to 1.6 GiB above the estimate, the interpreter,
  torch and allocator slack, for estimates of 0.2 to 5 GiB).
* per token, three float32 vocab-wide tensors: the logits, their float copy's log-softmax and
  its gradient;
* per parameter, 16 bytes: float32 weights, gradients and AdamW's two moments.

Elements are 4 bytes on the CPU and 2 under CUDA's bf16 autocast. It is an estimate, meant to
catch a run several times too large (a context of 100k tokens on a laptop), not to budget a
tight one: posx warns when it exceeds the memory available, and trains anyway.
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
