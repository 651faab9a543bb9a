"""The commands that only read results (``posx runs``, ``compare``, ``report``) never import
torch, whether a run's digest is fresh or must be made again from its files, and whether a run
finished or stopped at a checkpoint: importing torch alone is most of their start-up. The
listings, which draw nothing, import no matplotlib either."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from helpers.cli import run_posx
from helpers.environment import child_env

# Run the command line in a fresh interpreter and say, after it ends, whether torch was imported.
PROBE = """
import sys
from posx.cli import app
try:
    app(args=sys.argv[1:], prog_name="posx")
except SystemExit as stop:
    code = stop.code
drawn = "matplotlib" in sys.modules
print("torch imported:", "torch" in sys.modules, "exit:", code, "matplotlib" if drawn else "")
"""


def posx_in_probe(*args: str, cwd) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip(), proc.stderr
    last = proc.stdout.strip().splitlines()[-1].strip()
    return last + (f" ({proc.stderr.strip()})" if "exit: 0" not in last else "")


@pytest.fixture(scope="module")
def evaluated(trained_runs, tmp_path_factory):
    """The two trained runs, copied and evaluated (with torch, in this process) once."""
    work = tmp_path_factory.mktemp("evaluated")
    shutil.copytree(trained_runs["work"] / "results", work / "results")
    for run in ("rope", "absolute"):
        run_posx("eval-extrapolate", run, "eval.factors=[1,2]", "eval.passkey.trials=4", cwd=work)
    return work / "results"


@pytest.fixture
def results(evaluated, tmp_path):
    """A copy of the evaluated runs' results directory (the tests change it)."""
    return shutil.copytree(evaluated, tmp_path / "results")


def test_listing_comparing_and_reporting_import_no_torch(results):
    work = results.parent
    assert posx_in_probe("runs", cwd=work) == "torch imported: False exit: 0"
    assert posx_in_probe("compare", "rope", "absolute", cwd=work) == "torch imported: False exit: 0"
    out = work / "report"
    assert posx_in_probe("report", "results/runs", "--out", str(out), "--format", "png", cwd=work) == (
        "torch imported: False exit: 0 matplotlib"
    )
    assert (out / "summary.md").is_file()


def test_a_stale_digest_and_a_stopped_run_are_read_without_torch(results):
    """No digest: model.json is read and checked; a stopped run: its checkpoint's extras are."""
    work = results.parent
    for digest in results.glob("runs/*/digest.json"):
        digest.unlink()
    stopped = results / "runs" / "stopped"
    (stopped / "checkpoint" / "step-00000003").mkdir(parents=True)
    (stopped / "checkpoint" / "latest.json").write_text(
        json.dumps({"format": "posx-checkpoint/1", "step": 3, "dir": "step-00000003"})
    )
    (stopped / "checkpoint" / "step-00000003" / "state.json").write_text(json.dumps({"extra": {}}))
    shutil.copy(results / "runs" / "rope" / "config.yaml", stopped / "config.yaml")
    assert posx_in_probe("runs", "--csv", "-", cwd=work) == "torch imported: False exit: 0"
    listed = run_posx("runs", "--csv", "-", cwd=work).stdout
    assert {"rope", "absolute", "stopped"} <= {line.split(",")[0] for line in listed.splitlines()[1:]}


def test_a_damaged_model_json_is_still_refused_in_one_line(results):
    """The checks that moved out of the model's modules still refuse a crafted model.json: a report
    of that run alone stops on it (exit 2), a report of every run leaves it out and names it in
    damaged.csv, the listing names it as damaged and lists the other runs."""
    meta = results / "runs" / "rope" / "model.json"
    data = json.loads(meta.read_text())
    data["model"]["pos"]["name"] = "sinusoidal-ish"
    meta.write_text(json.dumps(data))

    def posx(*args: str) -> subprocess.CompletedProcess:
        return run_posx(*args, cwd=results.parent, check=False)

    proc = posx("report", str(results / "runs" / "rope"), "--out", str(results.parent / "rep"), "--format", "png")
    assert proc.returncode == 2, proc.stderr
    assert "model.pos.name=sinusoidal-ish is unknown; choose one of absolute, rope" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = posx("report", str(results / "runs"), "--out", str(results.parent / "all"), "--format", "png")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    left = (results.parent / "all" / "damaged.csv").read_text(encoding="utf-8").splitlines()
    assert len(left) == 2 and left[1].startswith("rope,") and "model.pos.name=sinusoidal-ish is unknown" in left[1]
    listed = posx("runs", "--csv", "-")
    assert listed.returncode == 0 and "Traceback" not in listed.stderr
    rows = {line.split(",")[0]: line for line in listed.stdout.splitlines()[1:]}
    assert ",model.json," in rows["rope"] and len(rows) > 1
