"""The reference study: six encodings and ten RoPE methods, 3 seeds, the papers' orderings checked.

One command regenerates ``results/reference/<name>/`` from a clean clone:

    python -m scripts.study.reference                     # the CPU study (tiny model, T=128)
    python -m scripts.study.reference --preset gpu        # experiment=gpu_small (small model, T=512)
    python -m scripts.study.reference --jobs 2            # two runs at a time, cores / 2 threads each
    python -m scripts.study.reference --plan              # list the tasks and what is done; run nothing
    python -m scripts.study.reference --only rope-s0 --check   # make one run again, compare it with the reference

It is a thin driver of the real CLI (``python -m posx``), in phases (0: ``posx data prepare``,
the token store, built once):

1. train: all six encodings (gpt2 block) and RoPE on the llama block, 3 seeds each, at the
   preset's default size, T and steps;
2. evaluate every trained run (``--defaults`` plus the study's settings, so the order of
   evaluations never matters): non-overlapping windows at 1x-8x with every RoPE method (learned
   absolute with ``none``, ``clamp`` and ``interpolate``), per-position loss and passkey; then
   the sliding protocol with the main methods. Extend each RoPE seed to 4x T with PI, YaRN,
   ABF and plain continued training (``posx extend``, validating every 20 steps);
3. evaluate the extended runs, then ``posx report --evaluations all`` over every run, and write
   STUDY.md (command, commit, machine, wall time, the papers' claims checked by
   ``scripts.study.claims``).

Runs live under ``results/study/<name>/`` (not committed: weights, checkpoints); the report,
``sweep.csv``, the extension table and STUDY.md go to ``results/reference/<name>/``, replaced
whole when the study finishes. A killed study continues where it stopped: a finished run or
evaluation is never redone, a stopped training resumes from its checkpoint. Each task prints
one progress line and logs its output to ``results/study/<name>/logs/``.

``--only RUN...`` plans just those runs' tasks (an extension brings its parent). ``--check``
then compares the runs with the committed study instead of writing it (``scripts/study/check.py``:
every perplexity within ``--tolerance`` standard deviations over the study's seeds): does this
machine, or this change, reproduce it?
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from posx.configure import applies
from posx.runs.paths import is_run, is_run_dir
from scripts.study import REPO
from scripts.study import check as study_check  # made again vs committed, cell by cell
from scripts.study.args import OneLineParser, check_folders, check_overrides, folder_name, number, positive, whole
from scripts.study.grids import BEYOND, GRIDS, MAIN_METHODS, NAMES, Extension, Trained
from scripts.study.log import Log, note, revision

PRESETS = {  # block -> model config, plus what every command gets
    # eager training on the CPU, as the study was made (train.compile=auto may compile a long llama run)
    "cpu": {"models": {"gpt2": "tiny", "llama": "llama_tiny"}, "train": ["train.compile=false"], "eval": []},
    "gpu": {
        "models": {"gpt2": "small", "llama": "llama_small"},
        "train": ["experiment=gpu_small"],
        "eval": ["eval.tokens=65536", "eval.batch_tokens=65536"],
    },
}


@dataclass
class Task:
    key: str  # unique, stable across invocations: the log's name
    phase: int
    args: list  # python -m posx <args>
    done: callable = field(repr=False, default=lambda: False)  # finished already (files say so)
    run: str | None = None  # the run it makes or evaluates (None: the token store)


def list_arg(values) -> str:
    return "[" + ",".join(values) + "]"


def common(args) -> list[str]:
    """The override every posx command of the study gets: where its runs and stores go."""
    return [f"results_dir={args.work}"]


def stopped(run: Path) -> bool:
    """A run that started and did not finish: it continues from its checkpoint."""
    return is_run_dir(run) and not is_run(run)


def resume(run: Path, args) -> list[str]:
    """The command that continues a stopped run from its checkpoint."""
    return ["train", "--resume", str(run), f"threads={args.threads}"]


def train_task(args, name: str, overrides: list[str]) -> Task:
    """Phase 1: train one run at the preset's size, or resume it if it was stopped."""
    run = args.work / "runs" / name
    if stopped(run):
        cmd = resume(run, args)
    else:
        grid = [o for preset, o in GRIDS[args.grid].preset_train if preset == args.preset]
        cmd = [
            "train",
            *PRESETS[args.preset]["train"],
            *grid,
            *overrides,
            f"name={name}",
            f"threads={args.threads}",
            "eval.after_train=false",
            *args.set,
            *common(args),
        ]
    return Task(f"train-{name}", 1, cmd, lambda: is_run(run), name)


def eval_task(args, name: str, label: str, overrides: list[str], phase: int = 2) -> Task:
    """One evaluation of a run: ``--defaults``, the preset's settings, then the study's."""
    preset = PRESETS[args.preset]
    run = args.work / "runs" / name
    cmd = ["eval-extrapolate", str(run), "--defaults", *preset["eval"], *overrides, *args.eval_set, *common(args)]
    return Task(f"eval-{name}-{label}", phase, cmd, run=name)


def eval_tasks(args, kind: Trained, name: str) -> list[Task]:
    """Phase 2 for one trained run: every method its kind has at 1x-8x, then the sliding protocol."""
    sliding = ["eval.protocol=sliding", "eval.passkey.enabled=false", "eval.tasks=[]"]  # perplexity only
    grid = GRIDS[args.grid]
    if kind.encoding == "rope" and kind.methods:
        main = [eval_task(args, name, "main", [f"eval.methods={list_arg(grid.rope_methods)}"])]
        methods = MAIN_METHODS
    elif kind.encoding == "absolute":
        main = [
            eval_task(args, name, f"main-{b}", ["eval.methods=[none]", f"eval.absolute_beyond={b}"]) for b in BEYOND
        ]
        methods = ["none"]
    else:
        main, methods = [eval_task(args, name, "main", ["eval.methods=[none]"])], ["none"]
    if not kind.sliding:
        return main
    return [*main, eval_task(args, name, "sliding", [f"eval.methods={list_arg(methods)}", *sliding])]


def extension_tasks(args, ext: Extension, name: str, seed: int) -> list[Task]:
    """Phase 2 extends a RoPE seed to factor x T with one method (or resumes it); phase 3 evaluates it."""
    child = args.work / "runs" / name
    if stopped(child):
        cmd = resume(child, args)
    else:
        cmd = [
            "extend",
            str(args.work / "runs" / f"rope-s{seed}"),
            f"method={ext.method}",
            f"factor={args.factor:g}",
            f"seed={seed}",
            f"name={name}",
            f"threads={args.threads}",
            f"extend.eval_every={args.extend_eval_every}",
            "eval.after_train=false",
            *ext.overrides,
            *PRESETS[args.preset]["train"],
            *(o for o in args.set if applies.key_of(o) not in applies.SET_BY_EXTEND),  # the extension's own
            *args.extend_set,
            *common(args),
        ]
    return [Task(f"extend-{name}", 2, cmd, lambda: is_run(child), name), eval_task(args, name, "main", [], phase=3)]


def prepare_tasks(args) -> list[Task]:
    """Phase 0: each corpus setting's token store, built once before any training could build it twice at once."""
    tasks = []
    for setting in GRIDS[args.grid].data_settings():
        prepare = applies.only([*PRESETS[args.preset]["train"], *setting, *args.set], applies.PREPARE)
        key = "-".join(["data-prepare", *(o.split("=", 1)[1] for o in setting)])
        tasks.append(Task(key, 0, ["data", "prepare", *prepare, *common(args)]))
    return tasks


def plan(args) -> list[Task]:
    """Every task of the study in the order it runs, each with the files that say it is done."""
    models, grid = PRESETS[args.preset]["models"], GRIDS[args.grid]
    tasks = prepare_tasks(args)
    trained = grid.runs(args.seeds)
    for kind, name, seed in trained:
        overrides = [f"model={models[kind.block]}", f"pos={kind.encoding}", f"seed={seed}", *kind.overrides]
        tasks.append(train_task(args, name, overrides))
    for kind, name, _seed in trained:
        tasks += eval_tasks(args, kind, name)
    for ext, name, seed in grid.extended(args.seeds, args.factor):
        tasks += extension_tasks(args, ext, name, seed)
    if args.only:  # the token store's task and every task of the runs named, parents included
        parents = study_runs(args)
        wanted = set(args.only) | {parents[name] for name in args.only if parents[name]}
        tasks = [t for t in tasks if t.run is None or t.run in wanted]
    return tasks


def study_runs(args) -> dict[str, str | None]:
    """Every run of the study: run name -> the run it extends (None for one trained from scratch)."""
    grid = GRIDS[args.grid]
    runs: dict[str, str | None] = {name: None for _kind, name, _seed in grid.runs(args.seeds)}
    return runs | {name: f"rope-s{s}" for _ext, name, s in grid.extended(args.seeds, args.factor)}


def run_task(task: Task, args, log: Log, counter: list, total: int) -> int:
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    logfile = args.work / "logs" / f"{task.key}.log"
    start = time.time()
    with logfile.open("w") as out:
        out.write("$ python -m posx " + " ".join(task.args) + "\n")
        out.flush()
        rc = subprocess.run(
            [sys.executable, "-m", "posx", *task.args], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO
        ).returncode
    seconds = time.time() - start
    log.add(
        {
            "key": task.key,
            "phase": task.phase,
            "seconds": round(seconds, 1),
            "rc": rc,
            "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
            "commit": revision(),
        }
    )
    counter[0] += 1
    tail = logfile.read_text().strip().splitlines()[-1:] if rc else []
    status = "ok" if rc == 0 else f"FAILED (exit {rc}): {tail[0] if tail else ''} -- see {logfile}"
    print(f"[{counter[0]:3d}/{total}] phase {task.phase} {task.key:40s} {seconds:7.1f} s  {status}", flush=True)
    return rc


def build_parser() -> argparse.ArgumentParser:
    """The study's command line."""
    parser = OneLineParser(prog="python -m scripts.study.reference", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument(
        "--grid", choices=sorted(GRIDS), default="first", help="first: the first edition; methods: the second"
    )
    parser.add_argument(
        "--name", type=folder_name, help="study name (default: cpu-tiny, gpu-small; cpu-methods, gpu-methods)"
    )
    parser.add_argument("--seeds", type=whole, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--factor", type=number(1, 4096), default=4.0, help="extension factor (new T = factor x T)"
    )  # posx extend's factor bounds
    parser.add_argument("--extend-eval-every", type=positive, default=20, help="validation every N extension steps")
    parser.add_argument("--jobs", type=positive, default=1, help="tasks at a time")
    parser.add_argument("--threads", type=positive, default=None, help="torch threads per task (default: cores / jobs)")
    parser.add_argument("--work", type=Path, help="where runs go (default: results/study/<name>)")
    parser.add_argument("--out", type=Path, help="the committed outputs (default: results/reference/<name>)")
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="extra overrides for every train and extend (a smoke study: train.steps=20; the train.* keys an "
        "extension sets itself, such as train.steps, go to the trainings only)",
    )
    parser.add_argument(
        "--extend-set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="extra overrides for every extend (extend.steps=10)",
    )
    parser.add_argument(
        "--eval-set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="extra overrides for every evaluation (eval.tokens=2048)",
    )
    parser.add_argument("--plan", action="store_true", help="list the tasks and which are done; run nothing")
    parser.add_argument("--only", nargs="+", default=None, metavar="RUN", help="only these runs (rope-s0, ...)")
    parser.add_argument(
        "--check", action="store_true", help="compare the runs with the committed study (--out) instead of writing it"
    )
    parser.add_argument(
        "--tolerance",
        type=study_check.positive,
        default=study_check.TOLERANCE,
        help="--check: a cell's difference accepted, in standard deviations over the study's seeds",
    )
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, with the defaults that follow from the preset, the name and the cores filled
    in; a run ``--only`` names that the study does not make stops here (exit 2)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.name = args.name or NAMES[(args.grid, args.preset)]
    work = args.name + ("-check" if args.check else "")  # a check makes its runs again, apart from the study's
    args.work = (args.work or REPO / "results" / "study" / work).resolve()
    args.out = (args.out or REPO / "results" / "reference" / args.name).resolve()
    args.threads = args.threads or max(1, (os.cpu_count() or 1) // args.jobs)
    if len(set(args.seeds)) < len(args.seeds):
        parser.error(f"--seeds {' '.join(map(str, args.seeds))}: a seed given twice would train one run twice")
    check_folders(parser, {"--work": args.work, "--out": args.out})
    check_overrides(parser, "--set", args.set + args.eval_set, [])
    check_overrides(parser, "--extend-set", args.extend_set, ["parent=check"], "extend")
    unknown = [name for name in args.only or [] if name not in study_runs(args)]
    if unknown:
        parser.error(f"--only {' '.join(unknown)}: not a run of this study (seeds {args.seeds}); --plan lists them")
    if args.check and not (args.out / "sweep.csv").is_file():
        parser.error(f"--check compares with {args.out / 'sweep.csv'}, which does not exist; --out names a study")
    return args


def run_phases(todo: list[Task], args, log: Log) -> None:
    """Run the unfinished tasks phase by phase, ``--jobs`` at a time; stop after a phase with a failure."""
    counter, failed = [0], []
    for phase in (0, 1, 2, 3):
        batch = [t for t in todo if t.phase == phase]
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            codes = list(pool.map(lambda t: run_task(t, args, log, counter, len(todo)), batch))
        failed += [t.key for t, rc in zip(batch, codes) if rc]
        if failed:
            sys.exit(
                f"{len(failed)} task(s) failed: {', '.join(failed)}; fix the cause and run the same "
                "command again (finished tasks are kept)"
            )


def write_notes(args, elapsed: float) -> int:
    """Run ``scripts/study/notes.py`` over the finished runs; its exit code."""
    command = " ".join(["python", "-m", "scripts.study.reference", *sys.argv[1:]])
    # the outputs are written by their own script, read when this point is reached
    notes = [
        sys.executable,
        "-m",
        "scripts.study.notes",
        "--work",
        str(args.work),
        "--out",
        str(args.out),
        "--command",
        command,
        "--elapsed",
        f"{elapsed:.0f}",
        "--preset",
        args.preset,
        "--grid",
        args.grid,
    ]
    return subprocess.run(notes, check=False, cwd=REPO).returncode


def check(args) -> int:
    """``scripts/study/check.py`` over the study's runs (``--only``'s, else all) against ``--out``; its exit code."""
    argv = ["--work", str(args.work), "--reference", str(args.out), "--tolerance", str(args.tolerance)]
    return study_check.main(argv + (["--runs", *args.only] if args.only else []))


def announce(args, tasks: list, todo: list, listing: bool) -> None:
    """The study's one-line state (tasks done and left, jobs, where the runs go); with ``listing``,
    every task and the command it runs."""
    print(
        f"study {args.name}: {len(tasks)} tasks, {len(tasks) - len(todo)} done, {len(todo)} to run "
        f"({args.jobs} at a time, {args.threads} thread(s) each); runs in {args.work}",
        flush=True,
    )
    for t in tasks if listing else ():
        print(f"  {'todo' if t in todo else 'done'}  {t.key}: python -m posx {' '.join(t.args)}")


def main() -> None:
    """Plan the study, list it (``--plan``) or run what is not done, then write its notes."""
    args = parse_args()
    log = Log(args.work / "tasks.jsonl")
    tasks = plan(args)
    todo = [t for t in tasks if t.key not in log.done and not t.done()]
    announce(args, tasks, todo, listing=args.plan)
    if args.plan:
        return
    (args.work / "logs").mkdir(parents=True, exist_ok=True)
    started = time.time()
    note(args.work, "start")
    run_phases(todo, args, log)
    note(args.work, "end")
    sys.exit(check(args) if args.check else write_notes(args, time.time() - started))


if __name__ == "__main__":
    main()
