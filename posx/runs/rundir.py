"""Saving and loading a trained model, without Hydra (``load_run`` installs the frequencies it trained
with), and safetensors weights loaded with every mismatch one line; nothing is ever unpickled."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model, save_model

from posx.core import files
from posx.core.errors import PosxError
from posx.model.gpt import GPT
from posx.model.rescale import install_trained
from posx.runs.paths import META, WEIGHTS, read_meta
from posx.runs.records import RunMeta


def save_run(run_dir: Path, model: GPT, meta: RunMeta) -> None:
    """Weights first, then model.json with their checksum (a later change is caught on load)."""
    meta.learned = model.learned_scalars()
    with files.atomic_path(run_dir / WEIGHTS) as tmp:
        files.safetensors_write(lambda: save_model(model, str(tmp)))
        meta.weights_sha256 = files.sha256_file(tmp)
    files.write_text(run_dir / META, json.dumps(meta.to_dict(), indent=2) + "\n")


def load_run(run_dir: str | Path, device: str | torch.device = "cpu") -> tuple[GPT, RunMeta]:
    """Rebuild the model from model.json and load its safetensors weights."""
    run_dir = Path(run_dir)
    meta = read_meta(run_dir)
    weights = run_dir / WEIGHTS
    if not weights.is_file():
        raise PosxError(
            f"{run_dir} holds no weights ({WEIGHTS}); the run did not finish — "
            f"continue it with `posx train --resume {run_dir}` or re-train it"
        )
    if meta.weights_sha256 and files.sha256_file(weights) != meta.weights_sha256:
        raise PosxError(f"{weights} is corrupt: its checksum differs from the one in {META}; re-train the run")
    spec, m = meta.model, meta.model.model
    described = (
        f"{META} (vocab_size={spec.vocab_size}, n_layer={m.n_layer}, d_model={m.d_model}, "
        f"mlp_ratio={m.mlp_ratio}, block={m.block}, pos={spec.pos.name}, max_positions={spec.pos.max_positions})"
    )
    with torch.device("meta"):  # shapes only: nothing is allocated before the file agrees
        check_shapes(weights, GPT(spec), described)
    model = GPT(spec)
    load_weights(model, weights, described, device)
    install_trained(model, meta.rope, meta.train_context, f"{run_dir / META}")
    return model.to(device), meta


def load_weights(model: torch.nn.Module, weights: Path, described_by: str, device: str | torch.device = "cpu") -> None:
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


def check_shapes(weights: Path, model: torch.nn.Module, described_by: str) -> None:
    """The safetensors header's shapes against ``model``'s, before anything is allocated."""
    expected: dict[int, tuple[list[str], tuple[int, ...]]] = {}  # (names, shape) per tensor: tied ones share one
    for name, tensor in model.state_dict(keep_vars=True).items():
        expected.setdefault(id(tensor), ([], tuple(tensor.shape)))[0].append(name)
    try:
        with safe_open(str(weights), framework="pt") as f:
            found = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    except (SafetensorError, OSError) as exc:
        raise PosxError(f"{weights} is truncated or corrupt ({exc}); re-train the run") from exc
    shape_of = {name: shape for names, shape in expected.values() for name in names}  # a file holds tied ones once
    missing = [names[0] for names, _ in expected.values() if not any(n in found for n in names)]
    unexpected = sorted(found.keys() - shape_of.keys())
    if missing or unexpected:
        raise PosxError(
            f"{weights} does not match {described_by}: missing {missing[:3]}, unexpected "
            f"{unexpected[:3]} (different n_layer or positional encoding?)"
        )
    wrong = [f"{k}: {found[k]} vs {shape_of[k]}" for k in sorted(found) if found[k] != shape_of[k]]
    if wrong:
        raise PosxError(f"{weights} does not match {described_by}: size mismatch {'; '.join(wrong[:3])}")
