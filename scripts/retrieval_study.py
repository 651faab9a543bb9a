"""The retrieval comparison: eight encodings x 3 seeds x the recipe's tasks, the papers' claims checked.

One command regenerates ``results/reference/<name>/`` (default ``cpu-retrieval``):

    python scripts/retrieval_study.py                          # the whole grid
    python scripts/retrieval_study.py --dry-run                # what is done and what is left; run nothing
    python scripts/retrieval_study.py --encodings rope --seeds 0 --tasks copy --steps 20 \\
        --name smoke --work smoke/runs --out smoke/out   # a smoke test of the whole chain

It drives the real CLI (``python -m posx``) in phases, like ``scripts/reference_study.py``, whose
task log, resume and phase runner it uses:

0. ``posx data prepare``: the token store the evaluations read, built once;
1. train one run per encoding x task x seed with the recipe (``experiment=retrieval``, one task
   per run: ``data.mix_tasks=[task]``): RoPE, NoPE, ALiBi, FIRE, xPos, RoPE with randomized
   positions, RoPE rotating a quarter of its pairs, and RoPE with NoPE in every 2nd layer;
2. evaluate every run at 1x-8x T (``posx eval-extrapolate`` with the run's own task settings:
   the suite it trained on), plain RoPE also with PI and YaRN, zero-shot;
3. read each run's ``tasks.csv``, check the papers' claims (``posx.report.task_claims``), draw the
   figure (``posx.report.task_comparison``) and write ``exact.csv``, ``claims.csv``,
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
import shutil
import tempfile
import time
from pathlib import Path

import pandas as pd
import reference_study as ref  # scripts/: resume and the phase runner
import study_log  # scripts/: the task and invocation logs
import study_notes as notes  # scripts/: git, the machine, publish
from study_args import OneLineParser, check_folders, check_overrides, folder_name, positive

from posx.config.compose import config_dir
from posx.core.errors import PosxError
from posx.eval.tables import read_table
from posx.report import task_claims, task_comparison
from posx.report.mdtable import md_table
from posx.report.output import save
from posx.runs.paths import is_run
from posx.schema import Task as TASK_NAMES

REPO = ref.REPO
VARIANTS = {  # the study's name of each model -> its training overrides
    "rope": ["pos=rope"],
    "nope": ["pos=nope"],
    "alibi": ["pos=alibi"],
    "fire": ["pos=fire"],
    "xpos": ["pos=xpos"],
    "rope-randomized": ["pos=rope", "pos.randomized=true"],
    "rope-partial": ["pos=rope", "pos.rotary_fraction=0.25"],
    "rope-hybrid": ["pos=rope", "model.nope_every=2"],
}
LABELS = {
    "rope": "RoPE",
    "nope": "NoPE",
    "alibi": "ALiBi",
    "fire": "FIRE",
    "xpos": "xPos",
    "rope-randomized": "RoPE, randomized positions",
    "rope-partial": "RoPE rotating 25% of its pairs",
    "rope-hybrid": "RoPE, NoPE in every 2nd layer",
}
FAMILIES = {name: "rope" for name in VARIANTS if name.startswith("rope-")}  # a shade of RoPE's colour
FACTORS = [1, 2, 4, 8]
METHODS = {"rope": ["none", "pi", "yarn"]}  # every other model: none
DEFAULTS = {
    "name": "cpu-retrieval",
    "experiment": "retrieval",
    "tasks": ["copy", "passkey", "mqar"],
    "seeds": [0, 1, 2],
    "encodings": list(VARIANTS),
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
    parser = OneLineParser(prog="retrieval_study.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", type=folder_name, default=DEFAULTS["name"], help="study name (default: %(default)s)")
    parser.add_argument("--experiment", default=DEFAULTS["experiment"], help="the recipe (configs/experiment/)")
    parser.add_argument("--encodings", type=listed(list(VARIANTS)), default=DEFAULTS["encodings"])
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
    return args


def grid(args) -> list[tuple[str, str, int]]:
    """(encoding, task, seed) of every run, encodings first."""
    return [(e, t, s) for e in args.encodings for t in args.tasks for s in args.seeds]


def run_name(encoding: str, task: str, seed: int) -> str:
    return f"{encoding}-{task}-s{seed}"


def evaluated(run: Path, methods: list[str]) -> bool:
    """Whether the run's current tables score every method at every factor of the study."""
    path = run / "tasks.csv"
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
        "train", f"experiment={args.experiment}", *VARIANTS[encoding], f"data.mix_tasks=[{task}]",
        f"seed={seed}", f"name={name}", f"threads={args.threads}", "eval.after_train=false",
        "train.compile=false", *steps, *args.set, *ref.common(args),
    ]  # fmt: skip
    return ref.Task(f"train-{name}", 1, cmd, lambda: is_run(run), name)


def eval_task(args, encoding: str, task: str, seed: int) -> ref.Task:
    """Phase 2: the suite the run trained on at 1x-8x, with the study's methods."""
    name = run_name(encoding, task, seed)
    run = args.work / "runs" / name
    methods = METHODS.get(encoding, ["none"])
    cmd = [
        "eval-extrapolate", str(run), f"eval.methods={ref.list_arg(methods)}",
        f"eval.factors={ref.list_arg(str(f) for f in FACTORS)}", f"threads={args.threads}", *ref.common(args),
    ]  # fmt: skip
    return ref.Task(f"eval-{name}", 2, cmd, lambda: evaluated(run, methods), name)


def plan(args) -> list[ref.Task]:
    """Every task in the order it runs, each with the files that say it is done."""
    tasks = [ref.Task("data-prepare", 0, ["data", "prepare", *ref.common(args)])]
    tasks += [train_task(args, *cell) for cell in grid(args)]
    return tasks + [eval_task(args, *cell) for cell in grid(args)]


def left(tasks: list[ref.Task], log: study_log.Log) -> list[ref.Task]:
    """The tasks not done: a run's training or evaluation by its files (a run removed is made
    again), the token store by the task log."""
    return [t for t in tasks if not (t.done() if t.run else t.key in log.done)]


def collect(args) -> pd.DataFrame:
    """Exact shares (``task_claims.exact_shares``) of every evaluated run of the grid."""
    frames = []
    for encoding, task, seed in grid(args):
        path = args.work / "runs" / run_name(encoding, task, seed) / "tasks.csv"
        if path.is_file():
            rows = read_table(path)
            frames.append(rows[rows["task"] == task].assign(encoding=encoding, seed=seed))
    if not frames:
        return pd.DataFrame(columns=task_claims.SHARE_COLUMNS)
    return task_claims.exact_shares(pd.concat(frames, ignore_index=True))


def command(args) -> str:
    """The command that regenerates this study: its options that differ from the defaults."""
    parts = ["python", "scripts/retrieval_study.py"]
    for key in ("name", "encodings", "tasks", "seeds", "experiment"):
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


def exact_table(shares: pd.DataFrame, encodings: list[str]) -> pd.DataFrame:
    """Encoding x method x task by rows, factors by columns: mean ± std of the exact share (n seeds)."""
    summary = task_comparison.summarize(shares)
    summary["cell"] = [
        f"{m:.1%}" + (f" ± {s:.1%}" if s == s else "") + f" ({n})"
        for m, s, n in zip(summary["exact_mean"], summary["exact_std"], summary["n_seeds"])
    ]
    table = summary.pivot(index=["encoding", "method", "task"], columns="factor", values="cell").reset_index()
    table.columns = [c if isinstance(c, str) else f"{c:g}x" for c in table.columns]
    rank = {e: i for i, e in enumerate(encodings)}
    return table.sort_values(["encoding", "task"], key=lambda c: c.map(rank) if c.name == "encoding" else c)


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
    models = "; ".join(f"{e} ({' '.join(VARIANTS[e])})" for e in args.encodings)
    dirty = " (with uncommitted changes)" if notes.git("status", "--porcelain", "--untracked-files=no") else ""
    return [
        f"# Retrieval comparison: {args.name}",
        "",
        f"Each encoding trained with the retrieval recipe (`experiment={args.experiment}`) on one task per run, "
        f"evaluated on that task at {', '.join(f'{f}x' for f in FACTORS)} T (plain RoPE also with PI and YaRN, "
        "zero-shot), and the papers' claims checked (`posx.report.task_claims`). Regenerate it, or continue a "
        "stopped one (finished runs and evaluations are kept), with:",
        "",
        f"```bash\n{command(args)}\n```",
        "",
        f"- commit: `{notes.git('rev-parse', 'HEAD')}`{dirty}",
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


def study_md(args, log: study_log.Log, shares: pd.DataFrame, claims: pd.DataFrame, missing: list[str]) -> str:
    """STUDY.md: the command, where and how long, the claims, the figure and the exact shares."""
    lines = [
        *header_lines(args, log, missing),
        "## Claims",
        "",
        "Past T is, per seed, the mean exact share at 2x, 4x and 8x; numbers are mean ± std over seeds. A "
        "difference is called only beyond 2 standard deviations of the difference (one seed: never); an "
        f"encoding below {task_claims.LEARNED:.0%} exact at 1x did not learn the task, and its comparisons "
        "are not called. `not run`: a run the claim needs is missing.",
        "",
        md_table(claims),
        "",
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
            "Mean ± std over seeds of the exact share (number of seeds):",
            "",
            md_table(exact_table(shares, args.encodings)),
            "",
        ]
    )


def write_outputs(args, log: study_log.Log) -> None:
    """exact.csv, claims.csv, the figure and STUDY.md, built beside ``--out`` and swapped in whole."""
    shares = collect(args)
    claims = task_claims.check(shares)
    missing = [run_name(*c) for c in grid(args) if not (args.work / "runs" / run_name(*c) / "tasks.csv").is_file()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{args.out.name}.new-", dir=args.out.parent))
    try:
        shares.to_csv(staging / "exact.csv", index=False)
        claims.to_csv(staging / "claims.csv", index=False)
        if not shares.empty:
            tasks = [t for t in args.tasks if t in set(shares["task"])]
            save(task_comparison.figure(shares, LABELS, FAMILIES, tasks), staging / "exact_vs_length.png")
        (staging / "STUDY.md").write_text(study_md(args, log, shares, claims, missing))
    except BaseException:
        shutil.rmtree(staging)  # the half-built folder this call made
        raise
    notes.publish(staging, args.out)


if __name__ == "__main__":
    main()
