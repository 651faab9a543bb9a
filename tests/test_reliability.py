"""Colliding sweeps and killed reports: two sweeps started at the same instant both finish with
every run intact; a report killed at any moment leaves no partial report behind, and the same
--out works on the next try."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, TINY

pytestmark = pytest.mark.slow  # several CLI processes each

FIXTURE = REPO / "tests" / "fixtures" / "premove"
REPORT_FILES = {"summary.csv", "summary.md", "missing.csv"}


def _env() -> dict:
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": pythonpath, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}


def _posx(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "posx", *args], cwd=cwd, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_sweeps_started_together_both_finish_with_every_run_intact(tmp_path, text_corpus):
    args = ["train", "-m", "seed=0,1", *TINY, "train.steps=2", "data=text", f"data.path={text_corpus}"]
    first, second = _posx(*args, cwd=tmp_path), _posx(*args, cwd=tmp_path)  # the same second, the same config
    outs = [p.communicate(timeout=600) for p in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, outs
    sweeps = sorted((tmp_path / "results" / "sweeps").iterdir())
    assert len(sweeps) == 2, sweeps  # never one shared directory
    for sweep in sweeps:
        jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
        assert jobs == ["0_rope_s0", "1_rope_s1"]
        for job in jobs:
            assert (sweep / job / "model.json").is_file() and (sweep / job / "model.safetensors").is_file()


def test_a_killed_report_leaves_no_partial_report(tmp_path):
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    rng = random.Random(0)
    left_whole = killed = 0
    for i in range(6):
        out = tmp_path / f"rep{i}"
        proc = _posx("report", "runs/old-rope", "runs/old-rope-yarn", "--out", str(out), cwd=tmp_path)
        time.sleep(rng.uniform(0.5, 6.0))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed += 1
        proc.communicate(timeout=120)
        if out.exists():  # published: then whole
            assert REPORT_FILES <= {p.name for p in out.iterdir()}, list(out.iterdir())
            left_whole += 1
        else:  # not published: the same --out works now
            again = _posx("report", "runs/old-rope", "--out", str(out), cwd=tmp_path)
            _, err = again.communicate(timeout=300)
            assert again.returncode == 0, err
            assert REPORT_FILES <= {p.name for p in out.iterdir()}
    stale = [p for p in tmp_path.iterdir() if p.name.startswith(".rep")]
    assert killed >= 1, "no report was killed mid-way; the timings need another seed"
    assert all(p.name.endswith(".tmp") for p in stale)  # a killed one leaves only a hidden staging dir
