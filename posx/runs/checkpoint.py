"""Resumable training checkpoints (layout and guarantees: docs/run-directory.md): ``checkpoint/step-N/``
named by ``latest.json`` only once complete; nothing pickled; ``load`` checks each file's sha256."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file, save_model

from posx.core import fieldcheck, files
from posx.core.errors import PosxError
from posx.runs.paths import WRITTEN_DIRS
from posx.runs.records import TrainExtras
from posx.runs.resumable import DIRNAME, FORMAT, LATEST, read_latest, root
from posx.runs.rundir import load_weights

_OURS = re.compile(r"step-\d{8}|\.step-\d{8}\.\d+\.[0-9a-f]{8}\.tmp|\.latest\.json\.\d+\.[0-9a-f]{8}\.tmp")


@dataclass
class TrainState:
    """What ``load`` hands back besides the restored objects."""

    step: int  # optimizer steps taken
    metrics: list[dict] = field(default_factory=list)  # metric rows up to ``step``
    extras: TrainExtras = field(default_factory=TrainExtras)  # val loss, corpus, frequencies, lineage


def save(
    run_dir: Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    metrics: list[dict] | None = None,
    extras: TrainExtras | None = None,
) -> Path:
    """Write a checkpoint of ``step``, make it the latest, return its directory (non-finite weights:
    refused before anything is written)."""
    for weight, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise PosxError(
                f"weight {weight} is non-finite at step {step}; not checkpointing it "
                f"(the previous checkpoint is kept); lower train.lr or check the data"
            )
    ckpt_root = files.real_dir(root(run_dir), WRITTEN_DIRS[DIRNAME])
    name = f"step-{step:08d}"
    final = ckpt_root / name
    previous = read_latest(ckpt_root, missing_ok=True)
    if previous is not None and previous["dir"] == name and final.is_dir():
        return final  # this very step is already the latest checkpoint
    tmp = ckpt_root / f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    tmp.mkdir()
    try:
        _write_files(tmp, step, model, optimizer, generator, metrics or [], (extras or TrainExtras()).to_dict())
        _publish(tmp, final, step)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            raise _disk_full(step, ckpt_root, previous) from exc
        raise
    _prune(ckpt_root, keep=name)
    return final


def _publish(tmp: Path, final: Path, step: int) -> None:
    """Rename the complete ``tmp`` to ``final``, then name it in latest.json (replaced atomically)."""
    ckpt_root = final.parent
    if final.exists():  # complete but never named by latest.json: a writer was killed
        shutil.rmtree(final)
    os.replace(tmp, final)
    files.fsync_dir(ckpt_root)
    files.write_text(ckpt_root / LATEST, json.dumps({"format": FORMAT, "step": step, "dir": final.name}) + "\n")


def _disk_full(step: int, ckpt_root: Path, previous: dict | None) -> PosxError:
    kept = (
        f"the previous checkpoint (step {previous['step']}) is intact" if previous else "no earlier checkpoint exists"
    )
    return PosxError(
        f"disk full while writing the step-{step} checkpoint in {ckpt_root}; {kept}; "
        "free space and continue with `posx train --resume`"
    )


def _write_files(where: Path, step: int, model, optimizer, generator, metrics: list[dict], extra: dict) -> None:
    files.safetensors_write(lambda: save_model(model, str(where / "model.safetensors")))
    opt_tensors, opt_json = _flatten_optimizer(optimizer)
    files.safetensors_write(lambda: save_file(opt_tensors, str(where / "optimizer.safetensors")))
    rng = {"torch_cpu": torch.get_rng_state(), "batches": generator.get_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng.update({f"cuda.{i}": state for i, state in enumerate(torch.cuda.get_rng_state_all())})
    files.safetensors_write(lambda: save_file(rng, str(where / "rng.safetensors")))
    if metrics:
        pd.DataFrame(metrics).to_csv(where / "metrics.csv", index=False)
    names = sorted(p.name for p in where.iterdir())
    state = {
        "format": FORMAT,
        "step": step,
        "extra": extra,
        "optimizer": opt_json,
        "sha256": {f: files.sha256_file(where / f) for f in names},
    }
    (where / "state.json").write_text(json.dumps(state, indent=1) + "\n", encoding="utf-8")
    for f in [*names, "state.json"]:
        files.fsync_file(where / f)
    files.fsync_dir(where)


def _prune(ckpt_root: Path, keep: str) -> None:
    """Remove every step directory but ``keep``, and killed writers' temporaries (never a link)."""
    for entry in ckpt_root.iterdir():
        if entry.name == keep or not _OURS.fullmatch(entry.name) or entry.is_symlink():
            continue
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _flatten_optimizer(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """Tensors of the optimizer state for safetensors; everything else for JSON."""
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, object] = {}
    for index, per_param in sd["state"].items():
        for key, value in per_param.items():
            if torch.is_tensor(value):
                tensors[f"state.{index}.{key}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{index}.{key}"] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def _read_state(where: Path) -> dict:
    """A checkpoint's state.json, its step and the checksum of every file checked."""
    path = where / "state.json"
    fix = "start a new run"
    try:
        state = fieldcheck.load_json(path.read_text(encoding="utf-8"), path, fix)
        sums = state["sha256"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise PosxError(f"checkpoint {where} is incomplete or corrupt ({exc}); {fix}") from exc
    if not isinstance(sums, dict) or not sums:
        raise fieldcheck.refuse(path, "sha256", sums, "a mapping of file names to checksums", fix)
    for fname, digest in sums.items():
        if "/" in fname or "\\" in fname or fname.startswith("."):
            raise fieldcheck.refuse(path, "sha256", fname, "a file name of the checkpoint", fix)
        fieldcheck.sha256(digest, f"sha256.{fname}", path, fix)
    fieldcheck.integer(state.get("step"), "step", path, fix)
    return state


def load(
    run_dir: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    device: torch.device | str = "cpu",
) -> TrainState:
    """Restore model, optimizer, torch RNGs and ``generator`` from the latest checkpoint."""
    ckpt_root = root(run_dir)
    info = read_latest(ckpt_root)
    where = ckpt_root / info["dir"]
    state = _read_state(where)
    for fname, expected in state["sha256"].items():
        path = where / fname
        if not path.is_file() or files.sha256_file(path) != expected:
            raise PosxError(
                f"checkpoint file {path} is missing or corrupt (checksum mismatch); "
                "it cannot be resumed — start a new run"
            )
    load_weights(model, where / "model.safetensors", "the checkpoint's model", device)
    try:
        _restore_optimizer(optimizer, load_file(str(where / "optimizer.safetensors")), state["optimizer"])
        rng = load_file(str(where / "rng.safetensors"))
        torch.set_rng_state(rng["torch_cpu"])
        generator.set_state(rng["batches"])
        cuda = [rng[k] for k in sorted(rng) if k.startswith("cuda.")]
        if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
    except (SafetensorError, KeyError, ValueError, RuntimeError) as exc:
        raise PosxError(
            f"checkpoint {where} does not fit this model or optimizer ({exc}); "
            "the run's config.yaml may have been edited — start a new run"
        ) from exc
    metrics_path = where / "metrics.csv"
    metrics = pd.read_csv(metrics_path).to_dict("records") if metrics_path.is_file() else []
    extras = TrainExtras.from_dict(state.get("extra") or {}, str(where / "state.json"))
    return TrainState(step=int(state["step"]), metrics=metrics, extras=extras)


def _restore_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], saved: dict) -> None:
    per_param: dict[int, dict] = {}
    for key, value in tensors.items():
        _, index, name = key.split(".", 2)
        per_param.setdefault(int(index), {})[name] = value
    for key, value in saved["scalars"].items():
        index, name = key.split(".", 1)
        per_param.setdefault(int(index), {})[name] = value
    optimizer.load_state_dict({"state": per_param, "param_groups": saved["param_groups"]})
