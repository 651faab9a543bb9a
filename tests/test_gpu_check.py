"""scripts/gpu_check.sh without a GPU: the scripts parse, the dry run lists every step and
writes the report and the summary, and the summary's figures and goals come out right from
files shaped as the steps write them (benchmarks/gpu_report.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pandas as pd
import pytest
import torch

from benchmarks import gpu_report

from conftest import REPO

SCRIPTS = ["gpu_check.sh", "wheelhouse.sh", "compat.sh"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_parse_and_refuse_a_missing_argument_in_one_line(script, tmp_path):
    subprocess.run(["bash", "-n", str(REPO / "scripts" / script)], check=True)
    if script != "wheelhouse.sh":  # its argument has a default
        proc = subprocess.run(["bash", str(REPO / "scripts" / script)], capture_output=True, text=True, cwd=tmp_path)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize(("dry", "lacking"), [([], "torch"), (["--dry-run"], "torch, pandas")])
def test_an_interpreter_without_torch_or_pandas_is_refused_in_one_line_before_any_file(dry, lacking, tmp_path):
    python = tmp_path / "python"  # an interpreter that imports nothing
    python.write_text("#!/bin/sh\nexit 1\n")
    python.chmod(0o755)
    out = tmp_path / "check"
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(python), "HOME": str(tmp_path)}
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), str(out), *dry], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"gpu_check.sh: {python} cannot import {lacking}; set PYTHON to an interpreter that has them"
    ]
    assert not out.exists()


@pytest.mark.parametrize("held", ["report.md", "summary.json", "notes.txt", "link"])
def test_an_out_holding_files_it_did_not_write_is_refused_and_kept(tmp_path, held):
    out = tmp_path / "check"
    if held == "link":
        (tmp_path / "elsewhere").mkdir()
        out.symlink_to(tmp_path / "elsewhere")
    else:
        out.mkdir()
        (out / held).write_text("the user's own file\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(tmp_path)}
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), str(out), "--dry-run"], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "is not an empty directory" in proc.stderr
    if held != "link":
        assert sorted(p.name for p in out.iterdir()) == [held] and (out / held).read_text() == "the user's own file\n"
    else:
        assert not any((tmp_path / "elsewhere").iterdir())


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal of a box without a GPU")
def test_a_box_without_a_gpu_is_refused_in_one_line_before_any_file(tmp_path):
    out = tmp_path / "check"
    env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(tmp_path)}
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), str(out)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"gpu_check.sh: no CUDA GPU visible to {sys.executable} (torch.cuda.is_available() is false); nothing run"
    ]
    assert not out.exists()  # the same OUT can be given again where there is a GPU


@pytest.mark.slow
def test_dry_run_lists_every_step_and_writes_report_and_summary(tmp_path):
    out = tmp_path / "check"
    env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(tmp_path)}
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), str(out), "--dry-run"], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    names = [s["name"] for s in summary["steps"]]
    assert {s["status"] for s in summary["steps"]} == {"dry-run"}
    wanted = ["cuda tests", "gpu_small rope compiled", "torchrun, one rank", "t5 flex compiled", "bench_peer compiled"]
    assert set(wanted) <= set(names)
    assert all(g["met"] is None for g in summary["goals"].values())  # nothing measured
    assert "| cuda tests | dry-run |" in (out / "report.md").read_text()


@pytest.mark.slow
def test_only_runs_the_named_steps_and_reports_the_rest_as_skipped(tmp_path):
    out = tmp_path / "check"
    env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(tmp_path), "ONLY": "t5 flex,cuda tests"}
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), str(out), "--dry-run"], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    status = {s["name"]: s["status"] for s in json.loads((out / "summary.json").read_text())["steps"]}
    assert {n for n, s in status.items() if s == "dry-run"} == {"t5 flex compiled", "cuda tests"}
    assert {s for n, s in status.items() if n not in ("t5 flex compiled", "cuda tests")} == {"skipped: not in ONLY"}


def write_run(root, name, losses, tok_s, mfu):
    run = root / "runs" / name
    run.mkdir(parents=True)
    n = len(losses)
    pd.DataFrame(
        {
            "step": range(1, n + 1),
            "train_loss": losses,
            "val_loss": [float("nan")] * (n - 1) + [losses[-1]],
            "lr": [1e-3] * n,
            "tokens_per_s": tok_s,
            "mfu": mfu,
        }
    ).to_csv(run / "metrics.csv", index=False)


def test_summary_figures_and_goals_from_the_steps_files(tmp_path):
    losses = [5.0 - 0.1 * i for i in range(10)]
    write_run(tmp_path, "rope-compiled", losses, [1.0] * 5 + [100.0] * 5, [0.01] * 5 + [0.45] * 5)
    write_run(tmp_path, "rope-eager", [x * 1.01 for x in losses], [50.0] * 10, [0.2] * 10)
    write_run(tmp_path, "rope-torchrun", [x * 1.05 for x in losses], [50.0] * 10, [0.2] * 10)
    (tmp_path / "peer-compiled.json").write_text(json.dumps({"train": {"ratio_posx_over_transformers": 1.1}}))
    mib = 2**20
    rows = [{"pos": "alibi", "factor": f, "peak_bytes": m * mib} for f, m in ((1, 100), (8, 110))]
    (tmp_path / "encodings-flex.json").write_text(json.dumps({"memory": rows}))
    (tmp_path / "steps.jsonl").write_text(
        json.dumps({"name": "a", "status": "ok", "rc": 0, "seconds": 3, "limit": 9, "log": "", "command": "x"}) + "\n"
    )
    s = gpu_report.summary(tmp_path)
    fig, goals = s["figures"], s["goals"]
    assert fig["runs"]["rope-compiled"]["tokens_per_s"] == 100.0  # the first five steps left out
    assert fig["compiled_vs_eager"]["within"] and fig["compiled_vs_eager"]["max_rel_diff"] == pytest.approx(1 / 101)
    assert not fig["torchrun_vs_single"]["within"]
    assert goals["mfu_gpu_small_compiled"]["met"] is True and goals["mfu_gpu_small_compiled"]["value"] == 0.45
    assert goals["peer_train_ratio_compiled"]["met"] is False
    alibi = goals["eval_memory_8x_over_1x_alibi"]
    assert alibi["value"] == pytest.approx(1.1) and alibi["met"]
    assert goals["eval_memory_8x_over_1x_t5"]["met"] is None  # not measured: unjudged
    assert s["counts"] == {"ok": 1}
    assert "| bf16 MFU of gpu_small, compiled | >= 0.4 | 0.45 | True |" in gpu_report.markdown(s, tmp_path)


# What scripts/offline-wheels.txt assumes a GPU box already has (its comment says the same).
ON_THE_BOX = {"torch", "transformers", "numpy", "pandas", "typer", "rich", "matplotlib", "safetensors", "tokenizers"}


def requirement_name(line):
    return re.split(r"[<>=!~ \[;]", line.strip(), maxsplit=1)[0].lower()


def test_the_offline_wheels_cover_every_dependency_a_box_lacks():
    """A dependency added to pyproject.toml and not to the wheel list breaks every command on an
    offline box (posx would not import); this holds the two together."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    lines = (REPO / "scripts" / "offline-wheels.txt").read_text().splitlines()
    wheels = {requirement_name(x) for x in lines if x.strip() and not x.startswith("#")}
    missing = {requirement_name(d) for d in deps} - ON_THE_BOX - wheels
    assert not missing, f"add {sorted(missing)} to scripts/offline-wheels.txt"
    assert "pytest" in wheels and not wheels & ON_THE_BOX
