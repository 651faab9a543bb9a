"""Run directories: naming, finding, saving and loading a trained model without Hydra.

A run directory holds:
  config.yaml        the resolved config it was trained with
  model.json         what is needed to rebuild the model (GPTConfig, T, data fingerprint)
  model.safetensors  the weights
  metrics.csv        step, train_loss, val_loss, lr, tokens_per_s
  extrapolation.csv / .md   after `posx eval-extrapolate`
An extended run (`posx extend`) also records its parent in model.json (``extended_from``)
and the RoPE frequencies it trained with (``rope``); ``load_run`` installs exactly those.
Nothing is ever unpickled from a run directory.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model

from posx import __version__, io, rope
from posx.errors import PosxError
from posx.model import GPT, GPTConfig

WEIGHTS = "model.safetensors"
META = "model.json"
META_FORMAT = "posx-run/1"


@dataclass
class RunMeta:
    model: GPTConfig
    train_context: int  # T, the length the model trained at
    data: dict  # corpus fingerprint and the data config it came from
    step: int  # optimizer steps taken
    rope: dict  # frequencies the model was trained with: {"method": ..., "factor": ..., "params": ...}
    #   and, for an extended run, "original_context" (the T the method rescales from)
    extended_from: dict | None = None  # posx extend: parent run, method, factor, steps, parent T
    weights_sha256: str | None = None  # checksum of model.safetensors (set by save_run; older runs lack it)

    def to_dict(self) -> dict:
        return {
            "format": META_FORMAT,
            "posx_version": __version__,
            "model": self.model.to_dict(),
            "train_context": self.train_context,
            "data": self.data,
            "step": self.step,
            "rope": self.rope,
            **({"extended_from": self.extended_from} if self.extended_from else {}),
            "weights_sha256": self.weights_sha256,
            "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }

    @classmethod
    def from_dict(cls, d: dict, where: Path) -> "RunMeta":
        if d.get("format") != META_FORMAT:
            raise PosxError(f"{where} is not posx run metadata (format {d.get('format')!r})")
        try:
            return cls(GPTConfig.from_dict(d["model"]), int(d["train_context"]), d.get("data", {}),
                       int(d.get("step", 0)), d.get("rope") or {"method": "none", "factor": 1.0, "params": {}},
                       extended_from=d.get("extended_from") or None,
                       weights_sha256=d.get("weights_sha256"))
        except (KeyError, TypeError, ValueError) as exc:
            raise PosxError(f"{where} is incomplete or corrupt ({exc}); re-train the run") from exc


def new_run_dir(results_dir: str | Path, name: str) -> Path:
    """Create results/runs/<name>/, or <name>-2, -3 ... if taken: never reuse a directory."""
    return io.unique_dir(Path(results_dir) / "runs", name, "choose another name=")


def save_run(run_dir: Path, model: GPT, meta: RunMeta) -> None:
    """Weights first, then metadata with their checksum: a run with model.json always has
    matching weights, and a weights file changed afterwards is caught on load."""
    with io.atomic_path(run_dir / WEIGHTS) as tmp:
        io.safetensors_write(lambda: save_model(model, str(tmp)))
        meta.weights_sha256 = io.sha256_file(tmp)
    io.write_text(run_dir / META, json.dumps(meta.to_dict(), indent=2) + "\n")


def read_meta(run_dir: Path) -> RunMeta:
    path = run_dir / META
    if not path.is_file():
        raise PosxError(f"{run_dir} has no {META}; is it a posx run directory? (train one with `posx train`)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PosxError(f"{path} is unreadable ({exc.__class__.__name__}); re-train the run") from exc
    return RunMeta.from_dict(data, path)


def load_run(run_dir: str | Path, device: str | torch.device = "cpu") -> tuple[GPT, RunMeta]:
    """Rebuild the model from model.json and load its safetensors weights."""
    run_dir = Path(run_dir)
    meta = read_meta(run_dir)
    weights = run_dir / WEIGHTS
    if not weights.is_file():
        raise PosxError(f"{run_dir} holds no weights ({WEIGHTS}); the run did not finish — "
                        f"continue it with `posx train --resume {run_dir}` or re-train it")
    if meta.weights_sha256 and io.sha256_file(weights) != meta.weights_sha256:
        raise PosxError(f"{weights} is corrupt: its checksum differs from the one in {META}; re-train the run")
    model = GPT(meta.model)
    m = meta.model
    load_weights(model, weights, f"{META} (vocab_size={m.vocab_size}, n_layer={m.n_layer}, d_model={m.d_model}, "
                                 f"mlp_ratio={m.mlp_ratio}, pos={m.pos}, max_positions={m.max_positions})", device)
    install_trained_frequencies(model, meta, where=run_dir)
    return model.to(device), meta


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


def trained_frequencies(meta: RunMeta) -> tuple[torch.Tensor, float]:
    """The inverse frequencies and attention factor recorded in ``meta.rope``: the numbers
    themselves when the record holds them (``inv_freq``, ``attention_factor``), else
    recomputed from its method with ``posx.rope.frequencies``."""
    record = meta.rope
    if isinstance(record, dict) and "inv_freq" in record:
        inv_freq = torch.tensor(record["inv_freq"], dtype=torch.float32)
        if inv_freq.shape != (meta.model.head_dim // 2,):
            raise PosxError(f"the rope record in {META} holds {inv_freq.numel()} frequencies, "
                            f"expected head_dim // 2 = {meta.model.head_dim // 2}; re-run the extension")
        return inv_freq, float(record.get("attention_factor", 1.0))
    try:
        method, factor = record["method"], float(record.get("factor", 1.0))
        params = dict(record.get("params") or {})
        original = int(record.get("original_context", meta.train_context))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise PosxError(f"the rope record in {META} is malformed ({record!r}); re-run the extension") from exc
    return rope.frequencies(method, meta.model.head_dim, base=meta.model.rope_base, factor=factor,
                            original_context=original, **params)


def install_trained_frequencies(model: GPT, meta: RunMeta, where: Path | str = "the run") -> None:
    """Make the model rotate with (and ``reset`` to) the frequencies it was trained with."""
    if model.pos.uses_rope:
        model.pos.set_trained_frequencies(*trained_frequencies(meta))
    elif meta.rope.get("method", "none") != "none":
        raise PosxError(f"{where} records RoPE method {meta.rope.get('method')!r} but its model "
                        f"({meta.model.pos}) has no RoPE; {META} is inconsistent")


def is_run(path: Path) -> bool:
    return (path / META).is_file()


def find_runs(results_dir: str | Path) -> list[Path]:
    """Every finished run under results/runs and results/sweeps, oldest first."""
    root = Path(results_dir)
    found = [p.parent for p in root.glob("runs/*/" + META)]
    found += [p.parent for p in root.glob("sweeps/*/*/" + META)]
    return sorted(found, key=lambda p: (p / META).stat().st_mtime)


def resolve_run(run: str | None, results_dir: str | Path, latest: bool = False) -> Path:
    """A run given as a path or a name under results/runs, or the most recent one."""
    if latest:
        runs = find_runs(results_dir)
        if not runs:
            raise PosxError(f"no runs under {results_dir}/; train one first with `posx train`")
        return runs[-1]
    if not run:
        raise PosxError("name a run directory, or pass --latest for the most recent run")
    for candidate in (Path(run), Path(results_dir) / "runs" / run, Path(results_dir) / run):
        if candidate.is_dir():
            return candidate
    raise PosxError(f"run '{run}' not found (looked for it as a path and under {results_dir}/runs); "
                    "list runs with `ls results/runs`")
