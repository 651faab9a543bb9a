"""Loading safetensors weights into a module, every mismatch a one-line PosxError."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_model

from posx.core.errors import PosxError


def load_weights(model: torch.nn.Module, weights: Path, described_by: str,
                 device: str | torch.device = "cpu") -> None:
    """Load safetensors ``weights`` into ``model``; any mismatch is a PosxError naming it."""
    try:
        missing, unexpected = load_model(model, str(weights), strict=False, device=str(device))
    except SafetensorError as exc:
        raise PosxError(f"{weights} is truncated or corrupt ({exc}); re-train the run") from exc
    except RuntimeError as exc:  # shape mismatch
        lines = str(exc).strip().splitlines()
        details = [line.strip() for line in lines if "size mismatch" in line]
        detail = "; ".join(details[:3]) or (lines[-1] if lines else "")
        raise PosxError(f"{weights} does not match {described_by}: {detail}") from exc
    if missing or unexpected:
        raise PosxError(
            f"{weights} does not match {described_by}: missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(unexpected)[:3]} (different n_layer or positional encoding?)"
        )
