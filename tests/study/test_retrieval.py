"""scripts/study/retrieval.py without training: the grid it plans, what its files say is done, a
stopped run resumed, bad input refused in one line, and the outputs written from evaluated runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.stats import t as t_dist

from posx.eval.tables import TASK_COLUMNS
from scripts.study import log as study_log
from scripts.study import retrieval as study

REPO = Path(__file__).resolve().parents[2]


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


def test_the_grid_is_one_training_and_one_evaluation_per_arm_task_and_seed(tmp_path):
    args = study.parse_args(_argv(tmp_path))
    tasks = study.plan(args)
    trains = [t for t in tasks if t.args[0] == "train"]
    evals = [t for t in tasks if t.args[0] == "eval-extrapolate"]
    assert len(trains) == len(study.VARIANTS) * 2 * 3 * 3  # encodings x {no conv, conv} x tasks x seeds
    assert len(evals) == len(trains) + 2 * 3 * 3  # randomized RoPE's arms also on dense positions
    randomized = [t.args for t in evals if t.run == "rope-randomized-copy-s0"]
    assert [a[-1] for a in randomized] == ["eval.randomized_positions=sampled", "eval.randomized_positions=dense"]
    assert len({t.key for t in tasks}) == len(tasks)
    by_run = {t.run: set(t.args) for t in trains}
    want = {"experiment=retrieval", "pos=rope", "model.nope_every=2", "data.mix_tasks=[mqar]", "seed=2"}
    assert want | {"model.short_conv=0"} <= by_run["rope-hybrid-mqar-s2"]
    assert want | {"model.short_conv=4"} <= by_run["rope-hybrid-conv-mqar-s2"]
    methods = {t.run: next(a for a in t.args if a.startswith("eval.methods=")) for t in evals}
    assert methods["rope-copy-s0"] == methods["rope-conv-copy-s0"] == "eval.methods=[none,pi,yarn]"
    assert methods["rope-randomized-copy-s0"] == methods["nope-conv-copy-s0"] == "eval.methods=[none]"


def test_the_arms_are_named_for_what_they_have(tmp_path):
    arms = study.task_arms
    assert arms.LABELS["nope"] == "NoPE" and arms.LABELS["nope-conv"] == "NoPE + conv"
    assert "model.short_conv=0" in arms.ARMS["nope"].overrides
    assert f"model.short_conv={arms.CONV_KERNEL}" in arms.ARMS["nope-conv"].overrides
    for conv, names in (("with", ["fire-conv"]), ("without", ["fire"]), ("both", ["fire", "fire-conv"])):
        assert study.parse_args(_argv(tmp_path, "--encodings", "fire", "--conv", conv)).arms == names


def test_a_run_folder_trained_with_another_convolution_is_refused_in_one_line(tmp_path, capsys):
    run = tmp_path / "work" / "runs" / "nope-copy-s0"  # a study from before the arms: NoPE with the conv
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\nmodel:\n  short_conv: 4\n")
    with pytest.raises(SystemExit) as stop:
        study.main(_argv(tmp_path, "--encodings", "nope", "--seeds", "0", "--tasks", "copy", "--dry-run"))
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "model.short_conv=4, not arm nope's 0" in err and len(err.splitlines()) == 1


def test_finished_runs_and_evaluations_are_done_and_a_stopped_run_resumes(tmp_path):
    args = study.parse_args(
        _argv(tmp_path, "--encodings", "rope,nope", "--conv", "without", "--seeds", "0", "--tasks", "copy")
    )
    runs = args.work / "runs"
    _finished(runs / "rope-copy-s0", ["none", "pi", "yarn"], "copy")
    (runs / "nope-copy-s0").mkdir(parents=True)
    (runs / "nope-copy-s0" / "config.yaml").write_text("seed: 0\nmodel:\n  short_conv: 0\n")  # started, not finished
    todo = study.left(study.plan(args), study.ref.Log(args.work / "tasks.jsonl"))
    assert [t.key for t in todo] == ["data-prepare", "train-nope-copy-s0", "eval-nope-copy-s0"]
    assert todo[1].args[:3] == ["train", "--resume", str(runs / "nope-copy-s0")]
    _finished(runs / "rope-copy-s1", ["none"], "copy")  # evaluated without PI and YaRN: not the study's
    assert not study.evaluated(runs / "rope-copy-s1", ["none", "pi", "yarn"])
    (runs / "rope-copy-s1" / "tasks.csv").write_text("run,pos\nrope")  # damaged
    assert not study.evaluated(runs / "rope-copy-s1", ["none"])


def test_a_dry_run_lists_the_grid_and_writes_nothing(tmp_path, capsys):
    study.main(_argv(tmp_path, "--encodings", "fire", "--seeds", "0,1", "--tasks", "passkey", "--dry-run"))
    out = capsys.readouterr().out
    assert "9 tasks, 0 done, 9 to run" in out  # the data, and fire and fire-conv at two seeds, trained and evaluated
    assert "todo  train-fire-passkey-s1: python -m posx train experiment=retrieval pos=fire model.short_conv=0" in out
    assert (
        "todo  train-fire-conv-passkey-s1: python -m posx train experiment=retrieval pos=fire model.short_conv=4" in out
    )
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
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, bad, said):
    with pytest.raises(SystemExit) as stop:
        study.main(_argv(tmp_path, *bad, "--dry-run"))
    err = capsys.readouterr().err
    assert stop.value.code == 2 and said in err and len(err.strip().splitlines()) == 1


def test_an_output_folder_that_is_not_a_studys_is_refused_before_anything_runs(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as stop:
        study.main(_argv(tmp_path))
    assert stop.value.code == 2 and "not a study's output" in capsys.readouterr().err
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine" and not (tmp_path / "work").exists()


def _stored(run: Path, positions: str, task: str, exact: float) -> None:
    """An evaluation of ``run`` with eval.randomized_positions=``positions`` kept under eval/<id>/."""
    folder = run / "eval" / positions
    _finished(folder, ["none"], task, exact)
    settings = {"randomized_positions": positions} if positions != "dense" else {}  # dense: left out, as posx saves it
    record = {"id": positions, "settings": settings, "device": "cpu"}
    (folder / "eval.yaml").write_text(yaml.safe_dump(record))


def test_the_outputs_come_from_the_evaluated_runs(tmp_path):
    args = study.parse_args(
        _argv(tmp_path, "--encodings", "rope,rope-randomized", "--conv", "without", "--tasks", "copy")
    )
    for seed, (rope, randomized) in enumerate([(0.1, 0.9), (0.12, 0.92), (0.11, 0.91)]):
        _finished(args.work / "runs" / f"rope-copy-s{seed}", ["none", "pi", "yarn"], "copy", rope)
        _stored(args.work / "runs" / f"rope-randomized-copy-s{seed}", "sampled", "copy", randomized)
        _stored(args.work / "runs" / f"rope-randomized-copy-s{seed}", "dense", "copy", randomized - 0.5)
    study.write_outputs(args, study.ref.Log(args.work / "tasks.jsonl"))
    claims = pd.read_csv(args.out / "claims.csv")
    ruoss = claims[claims["paper"].str.startswith("Ruoss")]
    assert list(ruoss["verdict"]) == ["inconclusive"]  # exact 10% and 90% at 1x: RoPE did not learn copy
    assert "not learned at T" in ruoss["comparison"].iloc[0]
    shares = pd.read_csv(args.out / "exact.csv")
    assert len(shares) == 3 * (3 + 2) * 4  # seeds x (RoPE's three methods + randomized sampled and dense) x factors
    text = (args.out / "STUDY.md").read_text()
    assert "python -m scripts.study.retrieval --encodings rope,rope-randomized --conv without --tasks copy" in text
    assert "| rope-randomized | none | copy | 91.0% ± 1.0% (3) |" in text  # sampled positions, as published
    assert "| rope-randomized | dense | copy | 41.0% ± 1.0% (3) |" in text  # the dense evaluation beside it
    shares = shares.assign(factor=shares["factor"].astype(float))
    fig = study.task_comparison.figure(shares, study.task_arms.LABELS, study.task_arms.FAMILIES, ["copy"])
    names = [" ".join(t.get_text().split()) for t in fig.legends[0].texts]  # unwrapped
    assert "RoPE, randomized positions, scored on sampled positions, 3 seeds" in names
    assert "RoPE, randomized positions, scored on dense positions, 3 seeds" in names and "RoPE, 3 seeds" in names
    assert (args.out / "exact_vs_length.png").is_file() and str(tmp_path) not in text


def test_study_md_names_the_commit_each_task_ran_at(tmp_path):
    log = study.ref.Log(tmp_path / "tasks.jsonl")
    for key, commit in [("train-a", "aaa"), ("train-b", "aaa"), ("eval-a", "bbb")]:
        log.add({"key": key, "rc": 0, "seconds": 1.0, "commit": commit})
    log.add({"key": "eval-b", "rc": 0, "seconds": 1.0})  # a task logged before commits were
    line = study_log.commits_line(study.ref.Log(tmp_path / "tasks.jsonl"))  # read back from the file
    assert line == "- commits the runs and evaluations ran at: `aaa` (2 tasks); `bbb` (1 task); `not recorded` (1 task)"
    one = study.ref.Log(tmp_path / "one.jsonl")
    one.add({"key": "train-a", "rc": 0, "commit": "ccc"})
    assert study_log.commits_line(one) == "- commit of every run and evaluation: `ccc`"
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert study_log.revision().split()[0] == head  # what run_task records


def test_the_wall_time_sums_the_invocations_and_counts_a_killed_one_to_its_last_task():
    events = [{"event": "start", "at": 0}, {"event": "end", "at": 100}, {"event": "start", "at": 200},
              {"event": "start", "at": 400}, {"event": "end", "at": 450}]  # fmt: skip
    wall_seconds = study_log.wall_seconds
    assert wall_seconds(events, [50.0, 250.0, 300.0, 420.0]) == (100 + 100 + 50, 3)
    assert wall_seconds([{"event": "start", "at": 10}], []) == (0, 1)  # killed before any task finished


def test_the_convolutions_effect_is_a_row_of_its_own_with_a_paired_interval(tmp_path):
    args = study.parse_args(_argv(tmp_path, "--encodings", "nope", "--tasks", "copy"))
    without, with_ = [0.50, 0.60, 0.55], [0.90, 0.95, 0.97]
    for seed, (a, b) in enumerate(zip(without, with_)):
        _finished(args.work / "runs" / f"nope-copy-s{seed}", ["none"], "copy", a)
        _finished(args.work / "runs" / f"nope-conv-copy-s{seed}", ["none"], "copy", b)
    study.write_outputs(args, study.ref.Log(args.work / "tasks.jsonl"))
    effect = study.task_arms.conv_effect(pd.read_csv(args.out / "exact.csv"))
    row = effect[effect["where"] == "past T"].iloc[0]
    d = np.subtract(with_, without)  # the paired differences, by seed
    half = t_dist.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    assert row["difference"] == pytest.approx(d.mean()) and row["test"] == "paired t"
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((d.mean() - half, d.mean() + half))
    text = (args.out / "STUDY.md").read_text()
    assert "## The convolution's effect" in text and "| nope | copy | past T | 55.0% | 94.0% | +39.0% |" in text


def test_a_varied_recipe_scores_mqar_longer_and_harder_on_a_test_set_per_seed(tmp_path):
    args = study.parse_args(
        _argv(tmp_path, "--experiment", "retrieval_varied", "--encodings", "nope", "--conv", "without")
    )
    evals = {t.run: t.args for t in study.plan(args) if t.args[0] == "eval-extrapolate"}
    assert "eval.tasks=[mqar,mqar_more]" in evals["nope-mqar-s1"] and "eval.tasks=[copy]" in evals["nope-copy-s1"]
    assert "eval.task_options.seed=1" in evals["nope-mqar-s1"] and "eval.task_options.seed=2" in evals["nope-copy-s2"]
    fixed = study.parse_args(_argv(tmp_path, "--encodings", "nope", "--conv", "without"))  # the fixed layout
    assert "eval.tasks=[mqar]" in {t.run: t.args for t in study.plan(fixed)}["nope-mqar-s0"]


def test_the_exact_table_states_each_tasks_chance_level(tmp_path):
    args = study.parse_args(_argv(tmp_path, "--encodings", "nope", "--conv", "without", "--tasks", "passkey"))
    for seed in range(2):
        run = args.work / "runs" / f"nope-passkey-s{seed}"
        _finished(run, ["none"], "passkey", 0.5)
        options = "{layout: varied, distractors: 3}"
        (run / "config.yaml").write_text(
            f"model: {{short_conv: 0}}\ntrain: {{context_length: 32}}\neval: {{task_options: {options}}}\n"
        )
    study.write_outputs(args, study.ref.Log(args.work / "tasks.jsonl"))
    text = (args.out / "STUDY.md").read_text()
    assert "| chance | - | passkey | 25.0% | 25.0% | 25.0% | 25.0% |" in text  # 1 / (1 + 3 distractors)
