"""posx.jobs: the checks made before Hydra launches anything."""

from __future__ import annotations

import shutil

import pytest

from posx import jobs
from posx.core.errors import PosxError


def test_the_slurm_launcher_off_a_cluster_is_one_line(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(PosxError, match="needs SLURM, and there is no srun"):
        jobs.check_launcher(["-m", "hydra/launcher=submitit_slurm", "seed=0,1"])
    jobs.check_launcher(["-m", "hydra/launcher=joblib"])
