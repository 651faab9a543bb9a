"""Shared fixtures: a tiny config and a trained tiny run, both on small local data."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]

# Overrides that make a run take seconds on a CPU.
TINY = [
    "model.n_layer=2", "model.n_head=2", "model.d_model=32",
    "train.context_length=32", "train.steps=6", "train.batch_size=4",
    "train.eval_every=3", "train.eval_batches=1", "train.warmup_steps=2",
    "eval.tokens=512", "eval.batch_tokens=512", "device=cpu",
]


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` skip where there is no CUDA GPU (scripts/gpu_check.sh runs them)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (run scripts/gpu_check.sh on a GPU machine)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def text_corpus(tmp_path_factory) -> Path:
    """A small deterministic UTF-8 corpus: many files of Python-like text."""
    root = tmp_path_factory.mktemp("corpus")
    for i in range(40):
        lines = [f"def f{i}_{j}(x):\n    return x * {j} + {i}  # line {j}\n" for j in range(30)]
        (root / f"mod{i:02d}.py").write_text("".join(lines), encoding="utf-8")
    return root


def run_posx(*args: str, cwd: Path, check: bool = True, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess, the way a user does."""
    # PYTHONPATH pins the checkout under test, whichever posx is installed.
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "COLUMNS": "200", "HYDRA_FULL_ERROR": "0", "PYTHONPATH": pythonpath}
    proc = subprocess.run([sys.executable, "-m", "posx", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"posx {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def stop_with_sigterm(*args: str, cwd: Path) -> tuple[int, str]:
    """Start `posx ARGS`, send SIGTERM once its training loop prints progress; (exit code, stderr)."""
    import signal

    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": pythonpath, "COLUMNS": "200"}
    proc = subprocess.Popen([sys.executable, "-m", "posx", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:  # a progress line means the loop is running
        if line.startswith("train "):
            break
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


@pytest.fixture(scope="session")
def tiny_args(text_corpus) -> list[str]:
    return [*TINY, "data=text", f"data.path={text_corpus}"]


@pytest.fixture(scope="session")
def trained_runs(tmp_path_factory, tiny_args) -> dict[str, Path]:
    """One tiny RoPE run and one tiny learned-absolute run, trained through the CLI."""
    work = tmp_path_factory.mktemp("work")
    runs = {}
    for pos in ("rope", "absolute"):
        run_posx("train", f"pos={pos}", f"name={pos}", *tiny_args, cwd=work)
        runs[pos] = work / "results" / "runs" / pos
    runs["work"] = work
    return runs
