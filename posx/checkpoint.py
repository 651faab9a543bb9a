"""Resumable training checkpoints: weights, optimizer, step, RNG states and metrics so far.

Layout inside a run directory::

  checkpoint/
    latest.json              {"format", "step", "dir"}: names the newest complete checkpoint
    step-00000120/
      model.safetensors      the weights
      optimizer.safetensors  the optimizer's tensors, keyed state.<param index>.<name>
      rng.safetensors        torch's CPU RNG, the batch generator, CUDA RNGs (uint8 tensors)
      state.json             step, the caller's scalars, optimizer param groups, file checksums
      metrics.csv            the metric rows so far

A checkpoint is written into a hidden temporary directory (every file fsynced), renamed to
``step-N``, and only then named by ``latest.json`` (itself replaced atomically). A kill at any
instant leaves ``latest.json`` naming a complete checkpoint; older step directories and
leftovers of killed writers are removed after. Nothing is pickled: tensors go to safetensors,
the rest to JSON, and ``load`` verifies each file's sha256 before trusting it.

The learning-rate schedule needs no state of its own: its position is the step.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pandas as pd
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file, save_model

from posx import io
from posx.errors import PosxError

DIRNAME = "checkpoint"
LATEST = "latest.json"
FORMAT = "posx-checkpoint/1"
LOCK = ".posx-run.lock"


@dataclass
class TrainState:
    """What ``load`` hands back besides the restored objects."""

    step: int  # optimizer steps taken
    metrics: list[dict] = field(default_factory=list)  # metric rows up to ``step``
    extra: dict = field(default_factory=dict)  # the caller's JSON scalars (val loss, data hash, ...)


def root(run_dir: Path) -> Path:
    return Path(run_dir) / DIRNAME


def latest_step(run_dir: Path) -> int | None:
    """Step of the newest complete checkpoint, or None when there is none."""
    info = _read_latest(root(run_dir), missing_ok=True)
    return None if info is None else int(info["step"])


def exists(run_dir: Path) -> bool:
    return (root(run_dir) / LATEST).is_file()


@contextlib.contextmanager
def locked_run(run_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on a run directory: two processes never train into one run.

    The lock dies with its process (kill -9 included), so a resumed run never waits on a
    dead one.
    """
    with open(Path(run_dir) / LOCK, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PosxError(f"{run_dir} is being trained by another posx process; wait for it to stop "
                            "(or stop it) before resuming") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ---------------------------------------------------------------- saving


def save(run_dir: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
         generator: torch.Generator, metrics: list[dict] | None = None, extra: dict | None = None) -> Path:
    """Write a checkpoint of ``step`` and make it the latest; returns its directory.

    Refuses non-finite weights, so a good checkpoint is never replaced by a broken one.
    """
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise PosxError(f"weight {name} is non-finite at step {step}; not checkpointing it "
                            f"(the previous checkpoint is kept); lower train.lr or check the data")
    ckpt_root = root(run_dir)
    ckpt_root.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:08d}"
    final = ckpt_root / name
    previous = _read_latest(ckpt_root, missing_ok=True)
    if previous is not None and previous["dir"] == name and final.is_dir():
        return final  # this very step is already the latest checkpoint
    tmp = ckpt_root / f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    tmp.mkdir()
    try:
        _write_files(tmp, step, model, optimizer, generator, metrics or [], extra or {})
        if final.exists():  # complete but never named by latest.json: a writer was killed
            shutil.rmtree(final)
        os.replace(tmp, final)
        io._fsync_dir(ckpt_root)
        io.write_text(ckpt_root / LATEST, json.dumps({"format": FORMAT, "step": step, "dir": name}) + "\n")
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if exc.errno == errno.ENOSPC:
            kept = f"the previous checkpoint (step {previous['step']}) is intact" if previous else "no earlier checkpoint exists"
            raise PosxError(f"disk full while writing the step-{step} checkpoint in {ckpt_root}; {kept}; "
                            "free space and continue with `posx train --resume`") from exc
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _prune(ckpt_root, keep=name)
    return final


def _write_files(where: Path, step: int, model, optimizer, generator, metrics: list[dict], extra: dict) -> None:
    io.safetensors_write(lambda: save_model(model, str(where / "model.safetensors")))
    opt_tensors, opt_json = _flatten_optimizer(optimizer)
    io.safetensors_write(lambda: save_file(opt_tensors, str(where / "optimizer.safetensors")))
    rng = _rng_tensors(generator)
    io.safetensors_write(lambda: save_file(rng, str(where / "rng.safetensors")))
    if metrics:
        pd.DataFrame(metrics).to_csv(where / "metrics.csv", index=False)
    files = sorted(p.name for p in where.iterdir())
    state = {"format": FORMAT, "step": step, "extra": extra, "optimizer": opt_json,
             "sha256": {f: io.sha256_file(where / f) for f in files}}
    (where / "state.json").write_text(json.dumps(state, indent=1) + "\n", encoding="utf-8")
    for f in [*files, "state.json"]:
        _fsync_file(where / f)
    io._fsync_dir(where)


def _prune(ckpt_root: Path, keep: str) -> None:
    """Remove every step directory but ``keep``, and temporaries of killed writers."""
    for entry in ckpt_root.iterdir():
        if entry.name in (keep, LATEST) or not entry.is_dir() and not entry.name.endswith(".tmp"):
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


def _rng_tensors(generator: torch.Generator) -> dict[str, torch.Tensor]:
    tensors = {"torch_cpu": torch.get_rng_state(), "batches": generator.get_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda.{i}"] = state
    return tensors


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


# ---------------------------------------------------------------- loading


def _read_latest(ckpt_root: Path, missing_ok: bool = False) -> dict | None:
    path = ckpt_root / LATEST
    if not path.is_file():
        if missing_ok:
            return None
        raise PosxError(f"{ckpt_root.parent} has no checkpoint ({DIRNAME}/{LATEST}); nothing to resume from")
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        if info.get("format") != FORMAT:
            raise ValueError(f"format {info.get('format')!r}")
        int(info["step"]), str(info["dir"])
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PosxError(f"{path} is unreadable ({exc}); the checkpoint cannot be trusted — start a new run") from exc
    return info


def saved_extra(run_dir: Path) -> dict:
    """The caller's JSON record of the latest checkpoint (no tensor is read); {} without one."""
    info = _read_latest(root(run_dir), missing_ok=True)
    if info is None:
        return {}
    where = root(run_dir) / info["dir"]
    try:
        return dict(json.loads((where / "state.json").read_text(encoding="utf-8")).get("extra") or {})
    except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError) as exc:
        raise PosxError(f"checkpoint {where} is incomplete or corrupt ({exc}); start a new run") from exc


def load(run_dir: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
         generator: torch.Generator, device: torch.device | str = "cpu") -> TrainState:
    """Restore model, optimizer, torch RNGs and ``generator`` from the latest checkpoint."""
    from posx.runs import load_weights  # runs imports model code; keep this module light

    ckpt_root = root(run_dir)
    info = _read_latest(ckpt_root)
    where = ckpt_root / info["dir"]
    try:
        state = json.loads((where / "state.json").read_text(encoding="utf-8"))
        sums = dict(state["sha256"])
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise PosxError(f"checkpoint {where} is incomplete or corrupt ({exc}); start a new run") from exc
    for fname, expected in sums.items():
        path = where / fname
        if not path.is_file() or io.sha256_file(path) != expected:
            raise PosxError(f"checkpoint file {path} is missing or corrupt (checksum mismatch); "
                            "it cannot be resumed — start a new run")
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
        raise PosxError(f"checkpoint {where} does not fit this model or optimizer ({exc}); "
                        "the run's config.yaml may have been edited — start a new run") from exc
    metrics_path = where / "metrics.csv"
    metrics = pd.read_csv(metrics_path).to_dict("records") if metrics_path.is_file() else []
    return TrainState(step=int(state["step"]), metrics=metrics, extra=dict(state.get("extra", {})))


def _restore_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], saved: dict) -> None:
    per_param: dict[int, dict] = {}
    for key, value in tensors.items():
        _, index, name = key.split(".", 2)
        per_param.setdefault(int(index), {})[name] = value
    for key, value in saved["scalars"].items():
        index, name = key.split(".", 1)
        per_param.setdefault(int(index), {})[name] = value
    optimizer.load_state_dict({"state": per_param, "param_groups": saved["param_groups"]})
