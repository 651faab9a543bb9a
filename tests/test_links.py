"""Links and taken names at the paths posx writes: a symbolic link to a directory inside a run
is never written through, an output option's path that holds anything (a dangling link
included) is never replaced, and a sweep directory that is not a posx sweep's is never written.
Each refusal is one line, exit 2, and leaves every file as it was."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from posx.configure.sweep_dir import check_sweep_dir
from posx.core import files
from posx.core.errors import PosxError
from posx.eval import history

from helpers.cli import run_posx

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "premove"
EVAL = ["eval.factors=[1]", "eval.tokens=256", "eval.passkey.enabled=false", "eval.methods=[none]", "eval.tasks=[]"]


def _snapshot(root: Path) -> dict[str, tuple[bool, int, int]]:
    return {
        str(p.relative_to(root)): (p.is_symlink(), p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")
    }


@pytest.fixture
def work(tmp_path) -> Path:
    shutil.copytree(FIXTURE, tmp_path / "w")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "keep.txt").write_text("the user's\n")
    return tmp_path / "w"


def _link_eval(work: Path) -> list[str]:
    (work / "runs" / "old-rope" / "eval").symlink_to(work.parent / "outside")
    return ["eval-extrapolate", "runs/old-rope", "--force", *EVAL]


def _link_checkpoint(work: Path) -> list[str]:
    run = work / "runs" / "old-rope-pi-partial"
    shutil.move(run / "checkpoint", work.parent / "outside" / "checkpoint")
    (run / "checkpoint").symlink_to(work.parent / "outside" / "checkpoint")
    return ["train", "--resume", "runs/old-rope-pi-partial"]


def _file_eval(work: Path) -> list[str]:
    (work / "runs" / "old-rope" / "eval").write_text("not a directory\n")
    return ["eval-extrapolate", "runs/old-rope", "--force", *EVAL]


def _file_checkpoint(work: Path) -> list[str]:
    """A stopped run (its config, no model.json) whose checkpoint/ is a file."""
    run = work / "runs" / "stopped"
    shutil.copytree(work / "runs" / "old-rope", run)
    (run / "model.json").unlink()
    shutil.rmtree(run / "checkpoint")
    (run / "checkpoint").write_text("not a directory\n")
    return ["train", "--resume", "runs/stopped"]


def _dangling(name: str, args: list[str]):
    def setup(work: Path) -> list[str]:
        (work / name).symlink_to(work.parent / "outside" / "gone")
        return args

    return setup


def _linked_empty_dir(work: Path) -> list[str]:
    (work.parent / "outside" / "empty").mkdir()
    (work / "rep").symlink_to(work.parent / "outside" / "empty")
    return ["report", "runs/old-rope", "--out", "rep"]


def _report_cache(kind: str):
    def setup(work: Path) -> list[str]:
        (work / "reps").mkdir()
        if kind == "link":
            (work / "reps" / ".cache").symlink_to(work.parent / "outside")
        else:
            (work / "reps" / ".cache").write_text("not a directory\n")
        return ["report", "runs/old-rope", "--out", "reps/rep", "--format", "png"]

    return setup


CASES = {
    "eval dir a link": (_link_eval, "the evaluation directory runs/old-rope/eval is a symbolic link"),
    "checkpoint dir a link, resume": (_link_checkpoint, "the checkpoint directory"),
    # something else than a directory there: refused before any work too, not once it is done
    "eval dir a file": (_file_eval, "the evaluation directory runs/old-rope/eval exists and is not a directory"),
    "checkpoint dir a file, resume": (_file_checkpoint, "the checkpoint directory runs/stopped/checkpoint exists"),
    "runs --csv dangling link": (_dangling("l.csv", ["runs", "runs", "--csv", "l.csv"]), "l.csv is a symbolic link"),
    "compare --csv dangling link": (
        _dangling("l.csv", ["compare", "runs/old-rope", "runs/old-rope-yarn", "--csv", "l.csv"]),
        "l.csv is a symbolic link",
    ),
    "frequencies --out dangling link": (
        _dangling("l.png", ["frequencies", "--out", "l.png"]),
        "l.png is a symbolic link",
    ),
    "report --out a link to an empty dir": (_linked_empty_dir, "rep is a symbolic link"),
    "report cache a link": (_report_cache("link"), "the report cache reps/.cache is a symbolic link"),
    "report cache a file": (_report_cache("file"), "the report cache reps/.cache exists and is not a directory"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_link_where_posx_writes_is_refused_and_nothing_changes(work, case):
    setup, needle = CASES[case]
    args = setup(work)
    before, outside = _snapshot(work), _snapshot(work.parent / "outside")
    proc = run_posx(*args, cwd=work, check=False)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.stdout[-500:], proc.stderr[-2000:])
    assert len(lines) == 1 and needle in lines[0], lines
    assert "eval 1/1" not in proc.stdout and "training it from step 0" not in proc.stdout  # refused first
    assert _snapshot(work) == before and _snapshot(work.parent / "outside") == outside


def test_a_link_at_an_evaluation_record_directory_is_refused(tmp_path):
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "abc").symlink_to(tmp_path)
    with pytest.raises(PosxError, match="eval/abc is a symbolic link"):
        history.check_writable(tmp_path, "abc")
    history.check_writable(tmp_path, "other")  # a real eval/ and a missing eval/<id>/ are fine


def test_a_linked_record_file_is_replaced_not_written_through(work):
    """A link at one of a run's own files: the link is replaced atomically, its target untouched."""
    target = work.parent / "outside" / "keep.txt"
    run = work / "runs" / "old-rope"
    (run / "extrapolation.md").unlink()
    (run / "extrapolation.md").symlink_to(target)
    run_posx("eval-extrapolate", "runs/old-rope", "--force", *EVAL, cwd=work)
    assert not (run / "extrapolation.md").is_symlink() and "ppl" in (run / "extrapolation.md").read_text()
    assert target.read_text() == "the user's\n"


def test_a_new_file_never_replaces_what_appears_meanwhile(tmp_path):
    target = tmp_path / "t.csv"
    with pytest.raises(PosxError, match="appeared while it was being written"):
        with files.atomic_path(target, new=True) as tmp:
            tmp.write_text("new\n")
            target.symlink_to(tmp_path / "gone")
    assert target.is_symlink() and [p.name for p in tmp_path.iterdir()] == ["t.csv"]
    files.write_new_text(tmp_path / "u.csv", "x\n")
    assert (tmp_path / "u.csv").read_text() == "x\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "t.csv",
        "u.csv",
    ]


def _posx_sweep_record(sweep: Path, task: list[str], config_name: str = "config") -> None:
    sweep.mkdir(exist_ok=True)
    record = {"results_dir": "results", "hydra": {"mode": "MULTIRUN", "job": {"config_name": config_name},
                                                   "overrides": {"task": task}}}  # fmt: skip
    (sweep / "multirun.yaml").write_text(yaml.safe_dump(record))


SWEEP = ["seed=0,1", "experiment=quick", "train.steps=2"]
FIRST_JOB = ["seed=0", "experiment=quick", "train.steps=2"]  # the sweep's first job (check_sweep_dir)


@pytest.mark.parametrize(
    "setup, needle",
    [
        (lambda s: (s.mkdir(), (s / "multirun.yaml").write_text("precious\n")), "not a posx sweep's"),
        (lambda s: (s.mkdir(), (s / "notes.txt").write_text("mine\n")), "holds files posx did not make (notes.txt)"),
        (lambda s: (_posx_sweep_record(s, SWEEP), (s / "notes.txt").write_text("mine\n")), "(notes.txt)"),
        (
            lambda s: (s.mkdir(), (s / "0_rope_s0").mkdir(), (s / "0_rope_s0" / "a.txt").write_text("x\n")),
            "(0_rope_s0)",
        ),
        (lambda s: (s.mkdir(), (s / "sweep.csv").write_text("mine\n")), "(sweep.csv)"),
        (lambda s: s.symlink_to(s.parent / "elsewhere"), "is a symbolic link"),
        # Hydra would replace an extend sweep's record before a job could refuse its directory
        (lambda s: _posx_sweep_record(s, ["method=pi"], "extend"), "holds a sweep of posx extend"),
    ],
    ids=[
        "foreign multirun.yaml",
        "foreign files",
        "foreign files beside a record",
        "foreign job",
        "no record",
        "a link",
        "an extend sweep",
    ],
)
def test_a_sweep_refuses_a_directory_that_is_not_its_own_before_hydra_writes(tmp_path, setup, needle):
    sweep = tmp_path / "mydir"
    setup(sweep)
    before = _snapshot(tmp_path)
    proc = run_posx("train", "-m", *SWEEP, f"hydra.sweep.dir={sweep}", cwd=tmp_path, check=False)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], (proc.stdout[-500:], proc.stderr)
    assert _snapshot(tmp_path) == before


def test_a_posx_sweep_directory_may_be_swept_again(tmp_path):
    """Its record is posx's, its jobs check their own directories (tests/test_resume.py)."""
    sweep = tmp_path / "mydir"
    _posx_sweep_record(sweep, ["seed=5"])
    for name in ("sweep.csv", "sweep.md", ".posx.lock"):
        (sweep / name).write_text("")
    (sweep / "0_rope_s0").mkdir()
    (sweep / "0_rope_s0" / "config.yaml").write_text("seed: 0\n")
    assert check_sweep_dir([*FIRST_JOB, f"hydra.sweep.dir={sweep}"], "config") == sweep
    assert check_sweep_dir([*FIRST_JOB, f"hydra.sweep.dir={tmp_path / 'new'}"], "config") == tmp_path / "new"


@pytest.mark.parametrize(
    "args",
    [["runs", "runs", "--csv", "taken.csv"], ["compare", "runs/old-rope", "runs/old-rope-yarn", "--csv", "taken.csv"]],
)
def test_a_taken_csv_path_is_refused_before_the_table_is_shown(work, args):
    (work / "taken.csv").write_text("the user's\n")
    proc = run_posx(*args, cwd=work, check=False)
    assert proc.returncode == 2 and "taken.csv already exists" in proc.stderr and proc.stdout == ""
    assert (work / "taken.csv").read_text() == "the user's\n"


@pytest.mark.parametrize("kind", ["runs", "sweeps"])
def test_a_sweep_refuses_the_folders_that_hold_many_runs(tmp_path, kind):
    # its jobs (0_rope_s0, ...) would land among the runs or the sweeps posx keeps there
    (tmp_path / "results" / kind / "rope-T64-s0-x").mkdir(parents=True)
    with pytest.raises(PosxError, match="is where posx keeps .*: a sweep needs a directory of its own"):
        check_sweep_dir(
            [*FIRST_JOB, f"results_dir={tmp_path / 'results'}", f"hydra.sweep.dir={tmp_path / 'results' / kind}"],
            "config",
        )
