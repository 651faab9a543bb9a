"""SLURM as far as a machine without a cluster allows: a ``submitit_local`` sweep (each job on
2 ranks, gloo) is stopped with USR2, checkpoints, is requeued by submitit and finishes with the
weights of an uninterrupted run; and with fake ``sbatch``/``srun``/``sacct`` on PATH, the batch
script Hydra's ``submitit_slurm`` launcher writes carries what was configured."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from test_distributed import LONG, TOL, env, wait_for, weight_diff

from conftest import run_posx

pytest.importorskip("submitit")
pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
pytestmark = pytest.mark.slow  # every test here runs the CLI in a subprocess

EVAL = ["eval.after_train=true", "eval.factors=[1,2]", "eval.methods=[none,pi]", "eval.passkey.enabled=false"]


def submitit_task(sweep: Path, job_dir_name: str, rank: int) -> int | None:
    """The pid of task ``rank`` of the submitit_local job training into ``job_dir_name``."""
    job_ids = [
        log.name.split("_")[0]
        for log in (sweep / ".submitit").glob("*/*_0_log.out")
        if f"{job_dir_name} " in log.read_text(errors="replace")
    ]
    if not job_ids:
        return None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = set((entry / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if (
            b"submitit.core._submit" in cmdline
            and f"SUBMITIT_LOCAL_JOB_ID={job_ids[0]}".encode() in environ
            and f"SUBMITIT_LOCAL_GLOBALID={rank}".encode() in environ
        ):
            return int(entry.name)
    return None


def test_a_submitit_local_sweep_is_requeued_on_usr2_and_finishes_like_an_uninterrupted_run(tmp_path, tiny_args):
    args = [*tiny_args, *LONG, *EVAL]
    run_posx("train", *args, "name=reference", cwd=tmp_path)  # uninterrupted, one process
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "posx",
            "train",
            "-m",
            *args,
            "pos=rope,alibi",
            "hydra/launcher=submitit_local",
            "hydra.launcher.tasks_per_node=2",
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    job = sweep / "0_rope_s0"
    wait_for(
        lambda: (job / "checkpoint" / "latest.json").is_file() or proc.poll() is not None,
        300,
        "the first checkpoint of the sweep's first job",
    )
    pid = submitit_task(sweep, job.name, rank=0)
    assert pid is not None, "the job's rank-0 task was not found"
    os.kill(pid, signal.SIGUSR2)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, f"{out}\n{err}"

    logs = "".join(p.read_text(errors="replace") for p in (sweep / ".submitit").glob("*/*_log.*"))
    assert "Caught signal SIGUSR2" in logs and "Requeued job" in logs  # submitit's own handler ran
    assert "stopped: SIGUSR2 at step" in logs and "passing SIGUSR2 to the handler" in logs  # posx checkpointed
    assert "resuming at step" in logs  # and the requeued job resumed
    metrics = pd.read_csv(job / "metrics.csv")
    assert list(metrics["step"]) == list(range(1, 41))  # every step once
    assert (job / "model.json").is_file() and (sweep / "1_alibi_s0" / "model.json").is_file()
    table = pd.read_csv(sweep / "sweep.csv")  # the combined table has both jobs
    assert set(table["pos"]) == {"rope", "alibi"}
    diff = weight_diff(job, tmp_path / "results" / "runs" / "reference")
    print(f"submitit_local 2 ranks, USR2 + requeue vs 1 process uninterrupted: max |weight diff| {diff:.3g}")
    assert diff <= TOL


FAKE = {
    # sbatch: keep the batch script, answer like sbatch does.
    "sbatch": 'for a in "$@"; do last="$a"; done\ncp "$last" "$FAKE_SLURM/batch.sh"\n'
    'echo "$@" > "$FAKE_SLURM/sbatch.args"\necho "Submitted batch job 4242"\n',
    # srun: would run the tasks; the batch script is never executed here, so it only records.
    "srun": 'echo "$@" >> "$FAKE_SLURM/srun.args"\n',
    # sacct: every task of the array is still pending.
    "sacct": 'echo "JobID|State|NodeList"\nfor i in 0 1 2; do echo "4242_$i|PENDING|None assigned"; done\n',
    "scancel": 'echo "$@" >> "$FAKE_SLURM/scancel.args"\n',
}


def test_the_slurm_batch_script_carries_the_configured_resources(tmp_path, tiny_args):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in FAKE.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod((bin_dir / name).stat().st_mode | stat.S_IEXEC)
    environment = {**env(), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_SLURM": str(tmp_path)}
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "posx",
            "train",
            "-m",
            *tiny_args,
            "pos=rope,alibi,nope",
            "hydra/launcher=submitit_slurm",
            "hydra.launcher.partition=gpu",
            "hydra.launcher.gpus_per_node=4",
            "hydra.launcher.tasks_per_node=4",
            "hydra.launcher.timeout_min=120",
            "hydra.launcher.signal_delay_s=90",
            "hydra.launcher.max_num_timeout=3",
            "hydra.launcher.array_parallelism=2",
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # the fake sbatch writes sbatch.args after its copy of the batch script is complete
        wait_for(lambda: (tmp_path / "sbatch.args").is_file() or proc.poll() is not None, 120, "sbatch")
    finally:
        proc.kill()
        out, err = proc.communicate(timeout=60)
    assert (tmp_path / "batch.sh").is_file(), f"{out}\n{err}"
    script = (tmp_path / "batch.sh").read_text()
    for line in (
        "#SBATCH --partition=gpu",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --time=120",
        "#SBATCH --signal=USR2@90",
        "#SBATCH --array=0-2%2",
        "#SBATCH --nodes=1",
    ):
        assert line in script.splitlines(), f"{line} missing from:\n{script}"
    assert "srun" in script and "submitit.core._submit" in script
    assert not (sweep / "0_rope_s0").exists()  # nothing ran: the jobs were only submitted
