"""The ``posx`` command, run the way a test needs it.

``run_posx`` runs it in this process (Typer's test runner: no interpreter start, no second
import of torch), which is what almost every CLI test needs. ``run_posx_process`` and
``start_posx`` run the real ``python -m posx`` in a child process, for what only a process
shows: signals, its exit status, ``python -m``, torchrun and launchers."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import traceback
from pathlib import Path

import torch
from typer.testing import CliRunner

from posx.cli import app

from helpers.environment import POSX_ENV, child_env


def run_posx(
    *args: str, cwd: Path, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``posx ARGS`` in this process, in ``cwd``, with ``POSX_ENV`` and ``env`` added to the
    environment.

    It returns what a process would: the exit status, stdout and stderr; an exception that
    escaped the command ends up on stderr as a traceback with status 1, as in a process. The
    working directory, ``sys.argv``, torch's thread count and the root logger's handlers
    (Hydra configures logging) are restored afterwards."""
    saved_cwd, saved_argv, saved_threads = os.getcwd(), sys.argv, torch.get_num_threads()
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    env = {**POSX_ENV, **(env or {})}
    threads = env.get("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS"))
    try:
        os.chdir(cwd)
        sys.argv = ["posx", *args]
        if threads:
            torch.set_num_threads(int(threads))
        result = CliRunner().invoke(app, list(args), env=env, prog_name="posx")
    finally:
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        torch.set_num_threads(saved_threads)
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
    stderr, code = result.stderr, result.exit_code
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "Traceback (most recent call last):\n" + "".join(traceback.format_exception(result.exception))
        code = 1
    proc = subprocess.CompletedProcess(["posx", *args], code, result.stdout, stderr)
    if check and code != 0:
        raise AssertionError(f"posx {' '.join(args)} failed ({code}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def start_posx(*args: str, cwd: Path, **env: str) -> subprocess.Popen:
    """``python -m posx ARGS`` started as a child process, its output piped as text."""
    return subprocess.Popen(
        [sys.executable, "-m", "posx", *args],
        cwd=cwd,
        env=child_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_posx_process(
    *args: str, cwd: Path, check: bool = True, timeout: int = 300, **env: str
) -> subprocess.CompletedProcess:
    """``python -m posx ARGS`` in a child process, the way a user runs it."""
    proc = subprocess.run(
        [sys.executable, "-m", "posx", *args],
        cwd=cwd,
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"posx {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def stop_with_sigterm(*args: str, cwd: Path) -> tuple[int, str]:
    """Start ``posx ARGS``, send SIGTERM once its training loop prints a progress line ("train
    N/M"); (exit status, stderr). It fails if the process ends without printing one."""
    proc = start_posx(*args, cwd=cwd)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("train "):
            break
    else:
        _, err = proc.communicate(timeout=120)
        raise AssertionError(f"posx {' '.join(args)} ended before a progress line:\n{''.join(seen)}\n{err}")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err
