"""Test session setup and the shared fixtures.

Which tests run:

* ``python -m pytest -q`` (no paths, no ``-m``) runs the fast set: every test not marked
  ``slow``. With ``CI`` set (``CI=true``, as on the CI machine) the same command runs
  everything. Both are spread over worker processes (pytest-xdist, ``-n 2`` or the machine's
  cores if fewer, an idle worker stealing queued tests) when xdist is installed, each worker
  running torch on one thread (unless ``OMP_NUM_THREADS`` is set).
* Naming test files or tests (``pytest tests/test_resume.py``) or passing ``-m`` runs what
  was named or selected, slow tests included; ``-n`` and ``-p no:xdist`` are honoured as given.

Every posx a test runs, in process or as a child, gets the environment of
``helpers.environment`` (wide, colourless output), so no test depends on the terminal it was
started from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from helpers.cli import run_posx, stop_with_sigterm
from helpers.environment import REPO, isolate
from helpers.runs import TINY, write_text_corpus

__all__ = ["REPO", "TINY", "run_posx", "stop_with_sigterm"]  # imported by test files as before

WORKERS = 2  # the CI machine's cores; fewer where this machine has fewer


def on_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """On CI, and for the plain fast set, run over ``WORKERS`` processes unless ``-n`` was given
    (before xdist reads it); tests named or selected run in this process, as given."""
    worker = hasattr(config, "workerinput")  # an xdist worker runs this hook too
    plain = config.args_source != pytest.Config.ArgsSource.ARGS and not config.option.markexpr
    workers = min(WORKERS, os.cpu_count() or 1)
    asked = getattr(config.option, "numprocesses", None) is not None  # absent with -p no:xdist
    if (on_ci() or plain) and workers > 1 and not worker and config.pluginmanager.hasplugin("xdist") and not asked:
        config.option.numprocesses = workers
        if config.option.dist == "no":  # not given: an idle worker takes tests queued on the busy one
            config.option.dist = "worksteal"


@pytest.hookimpl(trylast=True)  # after the terminal reporter exists
def pytest_configure(config):
    """The test environment (pytest's own output keeps the terminal's width); and the fast set
    (``-m "not slow"``) for a plain run off CI."""
    if config.pluginmanager.has_plugin("terminalreporter"):  # pin its width before COLUMNS changes
        writer = config.get_terminal_writer()
        writer.fullwidth = writer.fullwidth
    isolate()
    if hasattr(config, "workerinput") and "OMP_NUM_THREADS" not in os.environ:
        one_thread_per_worker()
    explicit = config.args_source == pytest.Config.ArgsSource.ARGS
    if not on_ci() and not explicit and not config.option.markexpr:
        config.option.markexpr = "not slow"


def one_thread_per_worker() -> None:
    """In an xdist worker: torch on one thread, here and in the posx children it starts (they
    read OMP_NUM_THREADS). The workers are the parallelism; with torch's default of a thread per
    core each, ``WORKERS`` workers would run twice as many threads as there are cores."""
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` skip where there is no CUDA GPU (scripts/gpu_check.sh runs them)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (run scripts/gpu_check.sh on a GPU machine)")
    for item in items:
        if item.get_closest_marker("cuda"):  # the mark, not a test id that says cuda
            item.add_marker(skip)


@pytest.fixture(scope="session")
def text_corpus(tmp_path_factory) -> Path:
    """A small deterministic UTF-8 corpus: many files of Python-like text."""
    return write_text_corpus(tmp_path_factory.mktemp("corpus"))


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


@pytest.fixture
def ieee_fp32():
    """float32 matmuls and convolutions without TF32 for one test (the CUDA comparisons), set
    as posx.core.device.use_tf32 sets them; the process-wide settings are put back afterwards."""
    settings = (torch.backends.cuda.matmul, torch.backends.cudnn.conv)
    saved = [s.fp32_precision for s in settings]
    for s in settings:
        s.fp32_precision = "ieee"
    yield
    for s, value in zip(settings, saved):
        s.fp32_precision = value
