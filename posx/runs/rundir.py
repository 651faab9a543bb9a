"""Run directories: saving and loading a trained model, without Hydra (``posx.runs.paths`` names
their files; docs/run-directory.md lists them). ``load_run`` installs the RoPE frequencies a run
trained with (``rope``); nothing is ever unpickled from a run directory.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_model

from posx.core import files
from posx.core.errors import PosxError
from posx.model.gpt import GPT
from posx.model.rescale import install_trained
from posx.runs.paths import META, WEIGHTS, read_meta
from posx.runs.records import RunMeta
from posx.runs.weights import check_shapes, expected_shapes, load_weights


def save_run(run_dir: Path, model: GPT, meta: RunMeta) -> None:
    """Weights first, then metadata with their checksum and the positional scalars the model
    learned (``GPT.learned_scalars``): a run with model.json always has matching weights, and a
    weights file changed afterwards is caught on load."""
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
        check_shapes(weights, expected_shapes(GPT(spec)), described)
    model = GPT(spec)
    load_weights(model, weights, described, device)
    install_trained(model, meta.rope, meta.train_context, f"{run_dir / META}")
    return model.to(device), meta
