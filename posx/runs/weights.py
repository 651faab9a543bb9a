"""Loading safetensors weights into a module, every mismatch a one-line PosxError."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model

from posx.core.errors import PosxError


def load_weights(model: torch.nn.Module, weights: Path, described_by: str, device: str | torch.device = "cpu") -> None:
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


def expected_shapes(model: torch.nn.Module) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
    """(names, shape) per tensor of ``model``: tied tensors (the embeddings and the output
    head) are one entry with all their names, since a file holds them once under any one."""
    groups: dict[int, tuple[list[str], tuple[int, ...]]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(tensor), ([], tuple(tensor.shape)))[0].append(name)
    return [(tuple(names), shape) for names, shape in groups.values()]


def check_shapes(weights: Path, expected: list[tuple[tuple[str, ...], tuple[int, ...]]], described_by: str) -> None:
    """Compare the tensor shapes in the safetensors header with ``expected`` (from
    ``expected_shapes``) before anything is allocated: only the header is read."""
    try:
        with safe_open(str(weights), framework="pt") as f:
            found = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    except (SafetensorError, OSError) as exc:
        raise PosxError(f"{weights} is truncated or corrupt ({exc}); re-train the run") from exc
    shape_of = {name: shape for names, shape in expected for name in names}
    missing = [names[0] for names, _ in expected if not any(n in found for n in names)]
    unexpected = sorted(found.keys() - shape_of.keys())
    if missing or unexpected:
        raise PosxError(
            f"{weights} does not match {described_by}: missing {missing[:3]}, unexpected "
            f"{unexpected[:3]} (different n_layer or positional encoding?)"
        )
    wrong = [f"{k}: {found[k]} vs {shape_of[k]}" for k in sorted(found) if found[k] != shape_of[k]]
    if wrong:
        raise PosxError(f"{weights} does not match {described_by}: size mismatch {'; '.join(wrong[:3])}")
