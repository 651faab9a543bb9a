"""posx.runs.rundir: run directory names, chosen (refused when taken) or made (never reused)."""

from __future__ import annotations

import pytest
from conftest import run_posx

from posx.core.errors import PosxError
from posx.runs.rundir import new_named_run_dir, new_run_dir


def test_a_chosen_name_that_exists_is_refused_with_a_hint(tmp_path):
    first = new_named_run_dir(tmp_path, "mine")
    (first / "config.yaml").write_text("seed: 0\n")
    with pytest.raises(PosxError, match=r"already exists; choose another name=.*--resume mine"):
        new_named_run_dir(tmp_path, "mine")
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["mine"]


@pytest.mark.slow
def test_train_refuses_an_existing_name_and_writes_nothing(trained_runs, tiny_args):
    work = trained_runs["work"]
    before = sorted(p.name for p in (work / "results" / "runs").iterdir())
    proc = run_posx("train", "name=rope", *tiny_args, cwd=work, check=False)
    assert proc.returncode == 2 and "already exists; choose another name=" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in (work / "results" / "runs").iterdir()) == before


def test_a_run_name_is_never_reused(tmp_path):
    first = new_run_dir(tmp_path, "same")
    (first / "model.json").write_text("{}")
    second = new_run_dir(tmp_path, "same")
    third = new_run_dir(tmp_path, "same")
    assert [p.name for p in (first, second, third)] == ["same", "same-2", "same-3"]
    assert (first / "model.json").read_text() == "{}"
