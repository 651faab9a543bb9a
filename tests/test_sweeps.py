"""Colliding sweeps and killed reports: two sweeps started at the same instant both finish with
every run intact; a report killed while it writes leaves no partial report behind, and the same
--out works on the next try."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import REPO, TINY, run_posx
from helpers.cli import start_posx

pytestmark = pytest.mark.slow  # several CLI processes each

FIXTURE = REPO / "tests" / "fixtures" / "premove"
REPORT_FILES = {"summary.csv", "summary.md", "missing.csv"}


def _posx(*args: str, cwd: Path) -> subprocess.Popen:
    return start_posx(*args, cwd=cwd, OMP_NUM_THREADS="1")


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


def _staged(tmp_path: Path, out: str, name: str) -> bool:
    """Whether the staging directory of report ``out`` holds ``name`` (or exists, for ``""``)."""
    return any((staging / name).exists() for staging in tmp_path.glob(f".{out}.*.tmp"))


@pytest.mark.parametrize("cue", ["", "summary.md"], ids=["just-staged", "tables-written"])
def test_a_killed_report_leaves_no_partial_report(tmp_path, cue):
    """SIGKILL a report once its staging directory holds ``cue`` (the figures come after it):
    nothing is published, only a hidden staging directory stays, and the same --out works."""
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    out = tmp_path / "rep"
    proc = _posx("report", "runs/old-rope", "runs/old-rope-yarn", "--out", str(out), cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not _staged(tmp_path, out.name, cue) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    assert proc.poll() is None, f"the report ended before its staging directory held {cue!r}"
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists()  # killed before the publishing rename
    stale = [p.name for p in tmp_path.iterdir() if p.name.startswith(f".{out.name}")]
    assert stale and all(name.endswith(".tmp") for name in stale), stale
    run_posx("report", "runs/old-rope", "--out", str(out), cwd=tmp_path)
    assert REPORT_FILES <= {p.name for p in out.iterdir()}
    assert "old-rope" in (out / "summary.md").read_text(encoding="utf-8")
