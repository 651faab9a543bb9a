"""The retrieval comparison: eight encodings, each with and without the short convolution, x 3 seeds
x the recipe's tasks, the papers' claims checked.

One command regenerates ``results/reference/<name>/`` (default ``cpu-retrieval``):

    python -m scripts.study.retrieval                          # the whole grid
    python -m scripts.study.retrieval --dry-run                # what is done and what is left; run nothing
    python -m scripts.study.retrieval --encodings rope --seeds 0 --tasks copy --steps 20 \\
        --name smoke --work smoke/runs --out smoke/out   # a smoke test of the whole chain

It drives the real CLI (``python -m posx``) in phases, like ``scripts/study/reference.py``, whose
task log, resume and phase runner it uses:

0. ``posx data prepare``: the token store the evaluations read, built once;
1. train one run per arm x task x seed with the recipe (``experiment=retrieval``, one task
   per run: ``data.mix_tasks=[task]``). The encodings: RoPE, NoPE, ALiBi, FIRE, xPos, RoPE with
   randomized positions, RoPE rotating a quarter of its pairs, and RoPE with NoPE in every 2nd
   layer; each has two arms (``scripts.study.task_arms``, ``--conv``): ``<encoding>`` without the
   short convolution (``model.short_conv=0``, pure attention) and ``<encoding>-conv`` with it;
2. evaluate every run at 1x-8x T (``posx eval-extrapolate`` with the run's own task settings:
   the suite it trained on), plain RoPE also with PI and YaRN, zero-shot;
3. read each run's ``tasks.csv``, check the papers' claims (``scripts.study.task_claims``), report
   the convolution's effect per encoding (``task_arms.conv_effect``), draw the
   figure (``scripts.study.task_comparison``) and write ``exact.csv``, ``claims.csv``,
   ``exact_vs_length.png`` (and .pdf) and ``STUDY.md``; the folder is replaced whole.

Runs live under ``results/study/<name>/`` (not committed). A killed study continues where it
stopped when the same command runs again: a finished run or evaluation is never redone (their
files say so), a stopped training resumes from its checkpoint (``posx train --resume``).
STUDY.md states the wall time summed over every invocation (``invocations.jsonl``; one that was
killed counts to its last finished task).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pandas as pd
import yaml

from posx.configure.compose import config_dir
from posx.core.errors import PosxError
from posx.eval import history
from posx.eval.tables import read_table
from posx.report.figures.output import save
from posx.report.tables.mdtable import md_table
from posx.runs.paths import CONFIG, is_run, is_run_dir, read_config
from posx.schema.config import Task as TASK_NAMES
from scripts.study import REPO, notes, task_arms, task_claims, task_comparison
from scripts.study import log as study_log  # the task and invocation logs
from scripts.study import reference as ref  # resume and the phase runner
from scripts.study import verdicts as study_verdicts  # the claims' lines, where the earlier rule differed
from scripts.study.args import OneLineParser, check_folders, check_overrides, folder_name, positive
from scripts.study.claims import corrected

VARIANTS = task_arms.ENCODINGS  # the study's name of each encoding -> its training overrides
FACTORS = [1, 2, 4, 8]
METHODS = {"rope": ["none", "pi", "yarn"], "rope-conv": ["none", "pi", "yarn"]}  # every other arm: none
DEFAULTS = {
    "name": "cpu-retrieval",
    "experiment": "retrieval",
    "tasks": ["copy", "passkey", "mqar"],
    "seeds": [0, 1, 2],
    "encodings": list(VARIANTS),
    "conv": "both",
}


def listed(choices: list[str] | None):
    """An argparse type: a comma-separated list, each item one of ``choices`` (None: integers)."""

    def parse(text: str) -> list:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if choices is None:
            if not all(t.isdigit() for t in items) or not items:
                raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers >= 0, e.g. 0,1,2")
            items = [int(t) for t in items]
        elif not items or set(items) - set(choices):
            bad = ", ".join(sorted(set(items) - set(choices))) or text
            raise argparse.ArgumentTypeError(f"{bad}: choose from {', '.join(choices)}")
        return list(dict.fromkeys(items))

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m scripts.study.retrieval", description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", type=folder_name, default=DEFAULTS["name"], help="study name (default: %(default)s)")
    parser.add_argument("--experiment", default=DEFAULTS["experiment"], help="the recipe (configs/experiment/)")
    parser.add_argument("--encodings", type=listed(list(VARIANTS)), default=DEFAULTS["encodings"])
    parser.add_argument(
        "--conv", choices=task_arms.CONV_CHOICES, default=DEFAULTS["conv"],
        help="which arms of each encoding: without the short convolution, with it, or both (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument("--tasks", type=listed(TASK_NAMES.values()), default=DEFAULTS["tasks"])
    parser.add_argument("--seeds", type=listed(None), default=DEFAULTS["seeds"])
    parser.add_argument("--steps", type=positive, help="train.steps for every run instead of the recipe's")
    parser.add_argument("--jobs", type=positive, default=1, help="tasks at a time")
    parser.add_argument("--threads", type=positive, help="torch threads per task (default: cores / jobs)")
    parser.add_argument("--work", type=Path, help="where the runs go (default: results/study/<name>)")
    parser.add_argument("--out", type=Path, help="the committed outputs (default: results/reference/<name>)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="extra overrides for every training")
    parser.add_argument("--dry-run", action="store_true", help="list the tasks and which are done; run nothing")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line with the paths and threads filled in; an output folder that is not a
    study's stops here (exit 2), before any run."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.work = (args.work or REPO / "results" / "study" / args.name).absolute()
    args.out = (args.out or REPO / "results" / "reference" / args.name).absolute()
    args.threads = args.threads or max(1, (os.cpu_count() or 1) // args.jobs)
    check_folders(parser, {"--work": args.work, "--out": args.out})
    recipes = config_dir() / "experiment"
    if "/" in args.experiment or not (recipes / f"{args.experiment}.yaml").is_file():
        known = ", ".join(sorted(p.stem for p in recipes.glob("*.yaml")))
        parser.error(f"--experiment {args.experiment}: no such recipe; choose from {known}")
    check_overrides(parser, "--set", args.set, [f"experiment={args.experiment}"])
    if args.out.exists() and not (args.out / "STUDY.md").is_file():
        parser.error(f"--out {args.out}: exists and is not a study's output (no STUDY.md); name another")
    args.arms = task_arms.arms(args.encodings, args.conv)
    args.varied = varied_recipe(args)
    for arm, task, seed in grid(args):
        wrong = other_conv(args.work / "runs" / run_name(arm, task, seed), arm)
        if wrong:
            parser.error(wrong)
    return args


def other_conv(run: Path, arm: str) -> str:
    """Why a run folder already there cannot be this arm's (trained with another
    ``model.short_conv``, as a study from before the no-convolution arms named its runs); ""."""
    if not is_run_dir(run) or not (run / CONFIG).is_file():
        return ""
    try:
        kernel = (read_config(run).get("model") or {}).get("short_conv")
    except PosxError as exc:
        return str(exc)
    want = task_arms.CONV_KERNEL if task_arms.ARMS[arm].conv else 0
    if kernel == want:
        return ""
    return (
        f"{run} was trained with model.short_conv={kernel}, not arm {arm}'s {want}; move it away or name another --work"
    )


def grid(args) -> list[tuple[str, str, int]]:
    """(arm, task, seed) of every run, arms first (``task_arms``: an encoding without, then with
    the short convolution)."""
    return [(a, t, s) for a in args.arms for t in args.tasks for s in args.seeds]


def run_name(encoding: str, task: str, seed: int) -> str:
    return f"{encoding}-{task}-s{seed}"


def evaluated(run: Path, methods: list[str], positions: str | None = None) -> bool:
    """Whether the run's tables (``history.tasks_table``) score every method at every factor of the study."""
    path = history.tasks_table(run, positions, "randomized_positions")
    if not path.is_file():
        return False
    try:
        rows = read_table(path)
    except (PosxError, OSError, ValueError):  # a damaged table: evaluate again
        return False
    have = set(zip(rows["method"], rows["factor"].astype(float)))
    return {(m, float(f)) for m in methods for f in FACTORS} <= have


def train_task(args, encoding: str, task: str, seed: int) -> ref.Task:
    """Phase 1: train one run with the recipe on one task, or resume it if it was stopped."""
    name = run_name(encoding, task, seed)
    run = args.work / "runs" / name
    steps = [f"train.steps={args.steps}"] if args.steps else []
    cmd = ref.resume(run, args) if ref.stopped(run) else [
        "train", f"experiment={args.experiment}", *task_arms.ARMS[encoding].overrides, f"data.mix_tasks=[{task}]",
        f"seed={seed}", f"name={name}", f"threads={args.threads}", "eval.after_train=false",
        "train.compile=false", *steps, *args.set, *ref.common(args),
    ]  # fmt: skip
    return ref.Task(f"train-{name}", 1, cmd, lambda: is_run(run), name)


def eval_task(args, encoding: str, task: str, seed: int, positions: str | None = None) -> ref.Task:
    """Phase 2: the suite the run trained on at 1x-8x, with the study's methods, on a test set
    drawn for the run's seed; ``positions``: ``eval.randomized_positions`` (a randomized arm's)."""
    name = run_name(encoding, task, seed)
    run = args.work / "runs" / name
    methods = METHODS.get(encoding, ["none"])
    cmd = [
        "eval-extrapolate", str(run), f"eval.methods={ref.list_arg(methods)}",
        f"eval.factors={ref.list_arg(str(f) for f in FACTORS)}", f"eval.tasks={ref.list_arg(axes(args, task))}",
        f"eval.task_options.seed={seed}", f"threads={args.threads}", *ref.common(args),
        *([f"eval.randomized_positions={positions}"] if positions else []),
    ]  # fmt: skip
    key = f"eval-{positions}-{name}" if positions else f"eval-{name}"
    return ref.Task(key, 2, cmd, lambda: evaluated(run, methods, positions), name)


def eval_tasks(args, arm: str, task: str, seed: int) -> list[ref.Task]:
    """A run's evaluations: one, or for an arm trained on sampled positions two, sampled as
    published and dense (``task_arms.SAMPLED_AT_TEST``)."""
    if not task_arms.ARMS[arm].sampled:
        return [eval_task(args, arm, task, seed)]
    return [eval_task(args, arm, task, seed, "sampled"), eval_task(args, arm, task, seed, "dense")]


def varied_recipe(args) -> bool:
    """Whether the recipe (with ``--set``) draws the varied layout (``data.task_options.layout``)."""
    recipe = yaml.safe_load((config_dir() / "experiment" / f"{args.experiment}.yaml").read_text()) or {}
    layout = ((recipe.get("data") or {}).get("task_options") or {}).get("layout", "fixed")
    for item in args.set:
        key, _, value = item.partition("=")
        layout = value if key.lstrip("+") == "data.task_options.layout" else layout
    return layout == "varied"


def axes(args, task: str) -> tuple[str, ...]:
    """The tasks a run of ``task`` is scored on: with the varied layout, MQAR made longer (``mqar``)
    and made harder (``mqar_more``) past T (``task_comparison.AXES``); else the task alone."""
    return task_comparison.AXES.get(task, (task,)) if args.varied else (task,)


def plan(args) -> list[ref.Task]:
    """Every task in the order it runs, each with the files that say it is done."""
    tasks = [ref.Task("data-prepare", 0, ["data", "prepare", *ref.common(args)])]
    tasks += [train_task(args, *cell) for cell in grid(args)]
    return tasks + [t for cell in grid(args) for t in eval_tasks(args, *cell)]


def left(tasks: list[ref.Task], log: study_log.Log) -> list[ref.Task]:
    """The tasks not done: a run's training or evaluation by its files (a run removed is made
    again), the token store by the task log."""
    return [t for t in tasks if not (t.done() if t.run else t.key in log.done)]


def collect(args) -> pd.DataFrame:
    """Exact shares (``task_claims.exact_shares``) of every evaluated run of the grid."""
    frames = []
    for encoding, task, seed in grid(args):
        run = args.work / "runs" / run_name(encoding, task, seed)
        sampled = task_arms.ARMS[encoding].sampled  # sampled positions: method none; dense: method dense
        for positions in ("sampled", "dense") if sampled else (None,):
            path = history.tasks_table(run, positions, "randomized_positions")
            if path.is_file():
                rows = read_table(path)
                rows = rows[rows["task"].isin(axes(args, task))].assign(encoding=encoding, seed=seed)
                frames.append(rows.assign(method=task_arms.DENSE) if positions == "dense" else rows)
    if not frames:
        return pd.DataFrame(columns=task_claims.SHARE_COLUMNS)
    return task_claims.exact_shares(pd.concat(frames, ignore_index=True))


def chance_of(args) -> pd.DataFrame:
    """Chance levels (``task_comparison.chance_levels``) of every task the study scores, from the
    task options and T of the first of its runs that has a config."""
    frames = []
    for task in args.tasks:
        runs = [args.work / "runs" / run_name(a, task, s) for a in args.arms for s in args.seeds]
        found = next((r for r in runs if (r / CONFIG).is_file()), None)
        if found is not None:
            cfg = read_config(found)
            T = cfg["train"]["context_length"]
            frames.append(task_comparison.chance_levels(cfg["eval"]["task_options"], T, axes(args, task), FACTORS))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=task_comparison.CHANCE_COLUMNS)


def command(args) -> str:
    """The command that regenerates this study: its options that differ from the defaults."""
    parts = ["python", "-m", "scripts.study.retrieval"]
    for key in ("name", "encodings", "conv", "tasks", "seeds", "experiment"):
        value = getattr(args, key)
        if value != DEFAULTS[key]:
            parts += [f"--{key}", value if isinstance(value, str) else ",".join(str(v) for v in value)]
    parts += ["--steps", str(args.steps)] if args.steps else []
    parts += ["--set", *args.set] if args.set else []
    return " ".join(parts)


def main(argv: list[str] | None = None) -> None:
    """Plan the grid, list it (``--dry-run``) or run what is left, then write the outputs."""
    args = parse_args(argv)
    log = study_log.Log(args.work / "tasks.jsonl")
    tasks = plan(args)
    todo = left(tasks, log)
    ref.announce(args, tasks, todo, listing=args.dry_run)
    if args.dry_run:
        return
    (args.work / "logs").mkdir(parents=True, exist_ok=True)
    study_log.note(args.work, "start")
    ref.run_phases(todo, args, log)
    study_log.note(args.work, "end")
    write_outputs(args, log)
    print(f"wrote {args.out}", flush=True)


def timing_line(args, log: study_log.Log) -> str:
    """The wall time over every invocation, and the tasks' own time from the task log."""
    wall, calls = study_log.wall_time(args.work)
    task_time = sum(entry.get("seconds", 0) for entry in log.done.values())
    return (
        f"- wall time: {wall / 60:.1f} min over {calls} invocation(s), resumes included (a killed one counted "
        f"to its last finished task); the finished tasks took {task_time / 60:.1f} min ({len(log.done)} tasks, "
        "summed over parallel jobs)"
    )


def header_lines(args, log: study_log.Log, missing: list[str]) -> list[str]:
    """STUDY.md's head: what the study is, the command, the commit, machine, time and grid."""
    models = "; ".join(f"{a} ({' '.join(task_arms.ARMS[a].overrides)})" for a in args.arms)
    dirty = " (with uncommitted changes)" if notes.git("status", "--porcelain", "--untracked-files=no") else ""
    return [
        f"# Retrieval comparison: {args.name}",
        "",
        f"Each encoding trained with the retrieval recipe (`experiment={args.experiment}`) on one task per run, "
        f"evaluated on that task at {', '.join(f'{f}x' for f in FACTORS)} T (plain RoPE also with PI and YaRN, "
        "zero-shot), and the papers' claims checked (`scripts.study.task_claims`). Regenerate it, or continue a "
        "stopped one (finished runs and evaluations are kept), with:",
        "",
        f"```bash\n{command(args)}\n```",
        "",
        f"- notes written at commit: `{notes.git('rev-parse', 'HEAD')}`{dirty}",
        study_log.commits_line(log),
        f"- machine: {notes.machine()}",
        f"- finished: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        timing_line(args, log),
        f"- runs: `{notes.shown(args.work)}` (not committed: weights and checkpoints); each task's log in its `logs/`",
        f"- models: {models}",
        f"- tasks: {', '.join(args.tasks)}; seeds: {', '.join(map(str, args.seeds))}"
        + (f"; train.steps={args.steps} for every run, instead of the recipe's" if args.steps else ""),
        f"- not evaluated: {', '.join(missing)}" if missing else "- every run of the grid evaluated",
        "",
    ]


def study_md(
    header: list[str], shares: pd.DataFrame, claims: pd.DataFrame, arms: list[str], chance: pd.DataFrame, earlier=None
) -> str:
    """STUDY.md: ``header`` (the command, where and how long), the claims (and, given the earlier
    rule's calls, where they differ), the convolution's effect, the figure and the exact shares of
    ``arms`` beside each task's ``chance`` level."""
    lines = [
        *header,
        *study_verdicts.retrieval_lines(claims),
        *study_verdicts.changed_lines(claims, earlier, task_claims.CLAIM_KEYS),
        *task_arms.conv_section(shares),
        "## Exact answers",
        "",
    ]
    if shares.empty:
        return "\n".join([*lines, "No run has been evaluated yet.", ""])
    return "\n".join(
        [
            *lines,
            "![exact answers vs length](exact_vs_length.png)",
            "",
            "Exact answers (share of samples with every answer token right) against evaluation length, one panel "
            "per task, one line per encoding and method: mean over seeds, bars ± std over seeds.",
            "",
            "Mean ± std over seeds of the exact share (number of seeds); the `chance` rows: what a model that "
            "picks one of the candidates planted in the sequence scores (`posx.tasks.chance`; copy: letters "
            f"guessed), the grey dotted line of the figure. {randomized_said(shares)}:",
            "",
            md_table(task_comparison.exact_table(shares, arms, chance)),
            "",
        ]
    )


def randomized_said(shares: pd.DataFrame) -> str:
    """How the arms trained on randomized positions were scored: on positions sampled at test time
    (method none) and on dense ones (method ``dense``), or, in a grid before the sampled scoring,
    on dense positions only."""
    if not any(task_arms.ARMS[a].sampled for a in set(shares["encoding"]) if a in task_arms.ARMS):
        return "No arm trained on randomized positions"
    if task_arms.DENSE in set(shares["method"]):
        return (
            "Randomized RoPE's `none` rows are scored on positions sampled at test time, as the paper scores them; "
            "its `dense` rows on the positions 0…n−1"
        )
    return (
        "Randomized RoPE is scored on the positions 0…n−1 only, not on positions sampled at test time as the paper does"
    )


def write_outputs(args, log: study_log.Log) -> None:
    """exact.csv, claims.csv, the figure and STUDY.md, built beside ``--out`` and swapped in whole."""
    shares = collect(args)
    claims = corrected(task_arms.check_claims(shares), task_claims.CLAIM_KEYS)
    missing = [run_name(*c) for c in grid(args) if not (args.work / "runs" / run_name(*c) / "tasks.csv").is_file()]
    chance = chance_of(args)  # reads a run's config per task: once
    with notes.staged(args.out) as staging:
        shares.to_csv(staging / "exact.csv", index=False)
        claims.to_csv(staging / "claims.csv", index=False)
        if not shares.empty:
            tasks = [x for t in args.tasks for x in axes(args, t) if x in set(shares["task"])]
            figure = task_comparison.figure(shares, task_arms.LABELS, task_arms.FAMILIES, tasks, chance)
            save(figure, staging / "exact_vs_length.png")
        header = header_lines(args, log, missing)
        (staging / "STUDY.md").write_text(study_md(header, shares, claims, args.arms, chance))


if __name__ == "__main__":
    main()
