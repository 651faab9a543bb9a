"""scripts/retrieval_study.py without training: the grid it plans, what its files say is done, a
stopped run resumed, bad input refused in one line, and the outputs written from evaluated runs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pandas as pd
import pytest

from posx.eval.tables import TASK_COLUMNS

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def study():
    """scripts/retrieval_study.py as a module, its folder on sys.path as when it runs as a script."""
    if str(REPO / "scripts") not in sys.path:
        sys.path.append(str(REPO / "scripts"))
    spec = importlib.util.spec_from_file_location("retrieval_study", REPO / "scripts" / "retrieval_study.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _argv(tmp_path: Path, *more: str) -> list[str]:
    return ["--work", str(tmp_path / "work"), "--out", str(tmp_path / "out"), *more]


def _finished(run: Path, methods: list[str], task: str, exact: float = 1.0) -> None:
    """A run as training and evaluation leave it: model.json, and tasks.csv at 1x-8x."""
    run.mkdir(parents=True)
    (run / "model.json").write_text("{}")
    rows = [
        {"run": run.name, "pos": "rope", "train_context": 32, "eval_context": 32 * f, "factor": float(f),
         "method": m, "task": task, "depth_lo": 0.0, "depth_hi": 1.0, "trials": 64, "accuracy": exact, "status": "ok"}
        for m in methods
        for f in (1, 2, 4, 8)
    ]  # fmt: skip
    pd.DataFrame(rows).reindex(columns=TASK_COLUMNS).to_csv(run / "tasks.csv", index=False)


def test_the_grid_is_one_training_and_one_evaluation_per_encoding_task_and_seed(study, tmp_path):
    args = study.parse_args(_argv(tmp_path))
    tasks = study.plan(args)
    trains = [t for t in tasks if t.args[0] == "train"]
    evals = [t for t in tasks if t.args[0] == "eval-extrapolate"]
    assert len(trains) == len(evals) == len(study.VARIANTS) * 3 * 3
    assert len({t.key for t in tasks}) == len(tasks)
    rope = next(t for t in trains if t.run == "rope-hybrid-mqar-s2")
    assert {"experiment=retrieval", "pos=rope", "model.nope_every=2", "data.mix_tasks=[mqar]", "seed=2"} <= set(
        rope.args
    )
    methods = {t.run: next(a for a in t.args if a.startswith("eval.methods=")) for t in evals}
    assert methods["rope-copy-s0"] == "eval.methods=[none,pi,yarn]"  # plain RoPE also with PI and YaRN
    assert methods["rope-randomized-copy-s0"] == methods["nope-copy-s0"] == "eval.methods=[none]"


def test_finished_runs_and_evaluations_are_done_and_a_stopped_run_resumes(study, tmp_path):
    args = study.parse_args(_argv(tmp_path, "--encodings", "rope,nope", "--seeds", "0", "--tasks", "copy"))
    runs = args.work / "runs"
    _finished(runs / "rope-copy-s0", ["none", "pi", "yarn"], "copy")
    (runs / "nope-copy-s0").mkdir(parents=True)
    (runs / "nope-copy-s0" / "config.yaml").write_text("seed: 0\n")  # started, not finished
    todo = study.left(study.plan(args), study.ref.Log(args.work / "tasks.jsonl"))
    assert [t.key for t in todo] == ["data-prepare", "train-nope-copy-s0", "eval-nope-copy-s0"]
    assert todo[1].args[:3] == ["train", "--resume", str(runs / "nope-copy-s0")]
    _finished(runs / "rope-copy-s1", ["none"], "copy")  # evaluated without PI and YaRN: not the study's
    assert not study.evaluated(runs / "rope-copy-s1", ["none", "pi", "yarn"])
    (runs / "rope-copy-s1" / "tasks.csv").write_text("run,pos\nrope")  # damaged
    assert not study.evaluated(runs / "rope-copy-s1", ["none"])


def test_a_dry_run_lists_the_grid_and_writes_nothing(study, tmp_path, capsys):
    study.main(_argv(tmp_path, "--encodings", "fire", "--seeds", "0,1", "--tasks", "passkey", "--dry-run"))
    out = capsys.readouterr().out
    assert "5 tasks, 0 done, 5 to run" in out
    assert "todo  train-fire-passkey-s1: python -m posx train experiment=retrieval pos=fire" in out
    assert not (tmp_path / "work").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "bad, said",
    [
        (["--encodings", "rope,cope"], "cope: choose from rope"),
        (["--tasks", "copy,sorting"], "sorting: choose from"),
        (["--seeds", "0,x"], "give whole numbers"),
        (["--steps", "0"], "not a whole number >= 1"),
        (["--experiment", "retrieval_typo"], "no such recipe; choose from"),
        (["--jobs", "0"], "not a whole number >= 1"),
        (["--name", "a/b"], "is not a plain folder name"),
        (["--set", "data.task_options.span=100000"], "data.task_options.span=100000 must be at most 1024"),
        (["--bogus"], "unrecognized arguments"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(study, tmp_path, capsys, bad, said):
    with pytest.raises(SystemExit) as stop:
        study.main(_argv(tmp_path, *bad, "--dry-run"))
    err = capsys.readouterr().err
    assert stop.value.code == 2 and said in err and len(err.strip().splitlines()) == 1


def test_an_output_folder_that_is_not_a_studys_is_refused_before_anything_runs(study, tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as stop:
        study.main(_argv(tmp_path))
    assert stop.value.code == 2 and "not a study's output" in capsys.readouterr().err
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine" and not (tmp_path / "work").exists()


def test_the_outputs_come_from_the_evaluated_runs(study, tmp_path):
    args = study.parse_args(_argv(tmp_path, "--encodings", "rope,rope-randomized", "--tasks", "copy"))
    for seed, (rope, randomized) in enumerate([(0.1, 0.9), (0.12, 0.92), (0.11, 0.91)]):
        _finished(args.work / "runs" / f"rope-copy-s{seed}", ["none", "pi", "yarn"], "copy", rope)
        _finished(args.work / "runs" / f"rope-randomized-copy-s{seed}", ["none"], "copy", randomized)
    study.write_outputs(args, study.ref.Log(args.work / "tasks.jsonl"))
    claims = pd.read_csv(args.out / "claims.csv")
    ruoss = claims[claims["paper"].str.startswith("Ruoss")]
    assert list(ruoss["verdict"]) == ["not called"]  # exact 10% and 90% at 1x: RoPE did not learn copy
    shares = pd.read_csv(args.out / "exact.csv")
    assert len(shares) == 3 * (3 + 1) * 4  # seeds x (RoPE's three methods + randomized) x factors
    text = (args.out / "STUDY.md").read_text()
    assert "python scripts/retrieval_study.py --encodings rope,rope-randomized --tasks copy" in text
    assert "| rope-randomized | none | copy | 91.0% ± 1.0% (3) |" in text
    assert (args.out / "exact_vs_length.png").is_file() and str(tmp_path) not in text


def test_the_wall_time_sums_the_invocations_and_counts_a_killed_one_to_its_last_task(study):
    events = [{"event": "start", "at": 0}, {"event": "end", "at": 100}, {"event": "start", "at": 200},
              {"event": "start", "at": 400}, {"event": "end", "at": 450}]  # fmt: skip
    wall_seconds = sys.modules["study_log"].wall_seconds
    assert wall_seconds(events, [50.0, 250.0, 300.0, 420.0]) == (100 + 100 + 50, 3)
    assert wall_seconds([{"event": "start", "at": 10}], []) == (0, 1)  # killed before any task finished
