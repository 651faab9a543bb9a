"""How ``posx report`` and ``posx runs`` scale with the number of runs and of groups.

``python -m benchmarks.report_scale --runs 300 2400 --per-group 1`` trains one tiny sweep once
(two encodings x three seeds, a few steps, evaluated at 1x/2x/4x with two methods, positions,
passkey and tasks), then for each N builds N runs as copies of its run directories (weights left
out: a report loads no model) in groups of ``--per-group`` runs: run k is seed k % per-group of
group k // per-group, a group one encoding at its own ``train.lr``; ``--per-group 1`` makes every
run a group of its own, as a sweep over many settings does. ``--table`` measures every row of
the scaling table (``ISSUE_TABLE``: 2,400 runs in 3 groups of seeds; 300, 600 and 2,400 runs
each its own group; 10,000 runs in 1,000 groups). It times ``posx runs DIR`` and ``posx report
DIR`` each in a fresh subprocess: wall time, CPU time (the command and the workers it waited for), peak resident
memory of the command and its figure workers together (sampled; pages the workers share with
each other are counted in each, so it errs high), and the size of the report's folder. A
command past ``--limit`` seconds is stopped and shown as ``> limit``. A second report over the
same runs shows what the report cache saves; ``--grow`` runs more are then added and reported
again. ``--copied`` then copies the N runs as ``cp -r``, ``scp`` or a download would (every
mtime new) and times ``posx runs`` (and, unless ``--listing-only``, ``posx report``) over the
copy twice each: the first call after the copy (cold) and the next one (warm).

The subprocesses run the posx this script imports (its checkout first on PYTHONPATH);
``--posx-path DIR`` times another checkout's, e.g. the code before a change, over the same runs.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

import posx
from posx.report.store import digest

BASE = [
    "pos=rope,absolute",
    "seed=0,1,2",
    "model.n_layer=2",
    "model.n_head=2",
    "model.d_model=32",
    "train.context_length=32",
    "train.steps=6",
    "train.batch_size=4",
    "train.eval_every=3",
    "train.eval_batches=1",
    "train.warmup_steps=2",
    "eval.after_train=true",
    "eval.tokens=512",
    "eval.batch_tokens=512",
    "eval.factors=[1,2,4]",
    "eval.methods=[none,pi]",
    "eval.passkey.digits=3",
    "eval.passkey.trials=4",
    "eval.passkey.depth_buckets=2",
    "device=cpu",
]
SKIPPED = {"model.safetensors", "checkpoint", ".posx.lock"}  # weights and training state: never read by a report


def base_sweep(work: Path) -> list[Path]:
    """The evaluated tiny sweep, trained once into ``work/base``."""
    root = work / "base"
    runs = sorted(p.parent for p in root.glob("results/sweeps/*/*/extrapolation.csv"))
    if len(runs) == 6:
        return runs
    shutil.rmtree(root, ignore_errors=True)
    corpus = root / "corpus"
    corpus.mkdir(parents=True)
    for i in range(40):
        text = [f"def f{i}_{j}(x):\n    return x * {j} + {i}  # line {j}\n" for j in range(30)]
        (corpus / f"mod{i:02d}.py").write_text("".join(text), encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "posx", "train", "-m", *BASE, "data=text", f"data.path={corpus}"]
    subprocess.run(command, cwd=root, check=True, env=env, stdout=subprocess.DEVNULL)
    return sorted(p.parent for p in root.glob("results/sweeps/*/*/extrapolation.csv"))


def copy_run(source: Path, target: Path, config: dict, seed: int, lr: float) -> None:
    """``source`` without its weights, as a run of ``seed`` and learning rate ``lr``, with the
    digest the run would have written (``digest.refresh``, as a run's evaluation ends)."""
    shutil.copytree(source, target, ignore=lambda _d, names: [n for n in names if n in SKIPPED | {digest.DIGEST}])
    config = {**config, "seed": seed, "name": target.name, "train": {**config["train"], "lr": lr}}
    (target / "config.yaml").write_text(yaml.dump(config, Dumper=yaml.CSafeDumper, sort_keys=False), encoding="utf-8")
    digest.refresh(target)


def build(base: list[Path], out: Path, start: int, stop: int, per_group: int) -> None:
    """Runs ``start`` .. ``stop`` - 1 of a synthetic sweep under ``out``: run k is member
    k % ``per_group`` of group k // ``per_group``; a group is one encoding at its own ``train.lr``,
    its members the base runs of that encoding at seeds 0, 1, 2, 3, 4, ... (every seed once)."""
    out.mkdir(parents=True, exist_ok=True)
    configs = [yaml.safe_load((b / "config.yaml").read_text(encoding="utf-8")) for b in base]
    encodings = sorted({str(c["pos"]["name"]) for c in configs})
    of = {(str(c["pos"]["name"]), int(c["seed"])): i for i, c in enumerate(configs)}
    for k in range(start, stop):
        group, member = divmod(k, per_group)
        i = of[(encodings[group % len(encodings)], member % 3)]
        seed = member  # base seed member % 3, so seeds 0, 1, 2 copy the three base runs
        lr = float(configs[i]["train"]["lr"]) * (1 + (group // len(encodings)) / 1000)
        copy_run(base[i], out / f"run{k:05d}", configs[i], seed, lr)


# Starts the command from a small process and reports its wall and CPU time and peak memory. Linux
# carries a process's peak RSS across fork and exec, so a command started straight from this
# script would report at least this script's own memory; started from here, it reports its own.
# Its figure workers are processes of their own: the waiter samples the resident memory of the
# command and every process below it every 50 ms and reports the largest sum it saw (and never
# less than the command's own peak); a command past the time limit is stopped with its workers.
_WAITER = """
import os, signal, subprocess, sys, time
limit = float(sys.argv[1])
start = time.perf_counter()
proc = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=sys.stderr, start_new_session=True)
def tree_kb(root):
    parent = {}
    for pid in os.listdir('/proc'):
        try:
            with open(f'/proc/{pid}/stat') as f:
                parent[int(pid)] = int(f.read().rsplit(')', 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            pass
    mine, total = {root}, 0
    for pid in sorted(parent):
        if parent[pid] in mine:
            mine.add(pid)
    for pid in mine:
        try:
            with open(f'/proc/{pid}/statm') as f:
                total += int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE') // 1024
        except (OSError, ValueError, IndexError):
            pass
    return total
peak, stopped = 0, False
while True:
    pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
    if pid:
        break
    peak = max(peak, tree_kb(proc.pid))
    if time.perf_counter() - start > limit:
        os.killpg(proc.pid, signal.SIGKILL)
        stopped = True
    time.sleep(0.05)
wall = time.perf_counter() - start
code = 0 if stopped else os.waitstatus_to_exitcode(status)
cpu = float('nan') if stopped else usage.ru_utime + usage.ru_stime
print(code, wall, cpu, max(peak, usage.ru_maxrss) / 1024)
"""


def measure(command: list[str], env: dict, cwd: Path, limit: float = 600.0) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds (user + system) of the command itself, peak resident memory in MB
    of the command and its workers together); CPU is NaN for a command stopped after ``limit``
    seconds. On a shared machine the CPU time is the steadier of the two times."""
    proc = subprocess.run(
        [sys.executable, "-S", "-c", _WAITER, str(limit), *command], cwd=cwd, env=env, capture_output=True, text=True
    )
    code, wall, cpu, rss = proc.stdout.split() if proc.returncode == 0 else ("-1", 0, 0, 0)
    if int(code) != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stderr[-2000:]}")
    return float(wall), float(cpu), float(rss)


def folder_mb(folder: Path) -> float:
    """The bytes of every file under ``folder``, in MB."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def time_both(sweep: Path, work: Path, env: dict, label: str, limit: float) -> None:
    posx = [sys.executable, "-m", "posx"]
    runs = measure([*posx, "runs", str(sweep)], env, work, limit)
    out = work / "reports" / f"{sweep.name}-{time.strftime('%H%M%S')}"  # its cache: work/reports/.cache
    report = measure([*posx, "report", str(sweep), "--out", str(out)], env, work, limit)
    cells = " | ".join(_cells(*m) for m in (runs, report))
    size = f"{folder_mb(out):.1f} MB, {sum(1 for p in out.iterdir())} files" if out.is_dir() else "—"
    print(f"| {label} | {cells} | {size} |", flush=True)


def _cells(wall: float, cpu: float, rss: float) -> str:
    """A measurement's cells; a command stopped at the time limit shows ``> limit``."""
    return f"> {wall:.0f} s | — | —" if cpu != cpu else f"{wall:.1f} s | {cpu:.1f} s | {rss:.0f} MB"


def time_copied(sweep: Path, work: Path, env: dict, n: int, limit: float, report: bool = True) -> None:
    """``posx runs`` and ``posx report`` over a fresh copy of ``sweep`` (new mtimes): cold, then warm."""
    copied = work / f"copied-{n}"
    shutil.rmtree(copied, ignore_errors=True)
    shutil.copytree(sweep, copied, copy_function=shutil.copyfile)  # as cp -r: every file's mtime is new
    shutil.rmtree(work / "reports" / ".cache", ignore_errors=True)
    posx = [sys.executable, "-m", "posx"]
    for label in ("cold", "warm"):
        runs = measure([*posx, "runs", str(copied)], env, work, limit)
        print(
            f"| {n:,} copied, `posx runs` {label} | {runs[0]:.1f} s | {runs[1]:.1f} s | {runs[2]:.0f} MB |", flush=True
        )
    for label in ("cold", "warm") if report else ():
        out = work / "reports" / f"{copied.name}-{label}-{time.strftime('%H%M%S')}"
        rep = measure([*posx, "report", str(copied), "--out", str(out)], env, work, limit)
        print(
            f"| {n:,} copied, `posx report` {label} | {rep[0]:.1f} s | {rep[1]:.1f} s | {rep[2]:.0f} MB |", flush=True
        )
    shutil.rmtree(copied)


ISSUE_TABLE = [(2400, 800), (300, 1), (600, 1), (2400, 1), (10000, 10)]  # (runs, runs per group)


def _sweep(base: list[Path], work: Path, n: int, per_group: int) -> Path:
    """The sweep of ``n`` runs in groups of ``per_group``, built where it is not yet complete."""
    sweep = work / f"sweep-{n}x{per_group}"
    have = sorted(p for p in sweep.iterdir() if p.is_dir()) if sweep.is_dir() else []
    if len(have) > n:
        shutil.rmtree(sweep)
        have = []
    if len(have) < n:
        if have:  # the last one may be half copied
            shutil.rmtree(have[-1])
        build(base, sweep, max(len(have) - 1, 0), n, per_group)
    return sweep


def _time_sweep(base, sweep: Path, work: Path, env: dict, args, n: int, per_group: int) -> None:
    label = f"{n:,} runs / {math.ceil(n / per_group):,} groups"
    shutil.rmtree(work / "reports" / ".cache", ignore_errors=True)  # the first report starts without a cache
    time_both(sweep, work, env, label, args.limit)
    if args.again:
        time_both(sweep, work, env, f"{label} again (cached)", args.limit)
    if args.grow:
        build(base, sweep, n, n + args.grow, per_group)
        time_both(sweep, work, env, f"{label} + {args.grow} runs", args.limit)
        for k in range(n, n + args.grow):
            shutil.rmtree(sweep / f"run{k:05d}")


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--per-group", type=int, default=12, help="runs per group (seeds); 1: every run a group")
    rows = ", ".join(f"{n} runs in groups of {k}" for n, k in ISSUE_TABLE)
    parser.add_argument("--table", action="store_true", help=f"every row of the scaling table: {rows}")
    parser.add_argument("--grow", type=int, default=10, help="runs added before the last report")
    parser.add_argument("--again", action=argparse.BooleanOptionalAction, default=True, help="report twice")
    parser.add_argument("--limit", type=float, default=600.0, help="seconds a command may run before it is stopped")
    parser.add_argument("--work", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--posx-path", type=Path, default=None, help="time this checkout's posx instead")
    parser.add_argument("--build-only", action="store_true", help="build the runs, time nothing")
    parser.add_argument("--copied", action="store_true", help="only time a copy of the runs, cold and warm")
    parser.add_argument("--listing-only", action="store_true", help="with --copied: time posx runs only")
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    work = args.work or Path(tempfile.mkdtemp(prefix="report-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    checkout = args.posx_path or Path(posx.__file__).resolve().parents[1]  # default: the posx imported here
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(checkout.resolve())}
    base = base_sweep(work)
    rows = ISSUE_TABLE if args.table else [(n, args.per_group) for n in args.runs]
    head = "| runs / groups | `posx runs` wall | CPU | peak RSS | `posx report` wall | CPU | peak RSS | report folder |"
    print(head, flush=True)
    print("|---|---|---|---|---|---|---|---|", flush=True)
    for n, per_group in rows:
        sweep = _sweep(base, work, n, per_group)
        if args.build_only:
            continue
        if args.copied:
            print("| what | wall | CPU | peak RSS |\n|---|---|---|---|", flush=True)
            time_copied(sweep, work, env, n, args.limit, not args.listing_only)
            continue
        _time_sweep(base, sweep, work, env, args, n, per_group)
    print(f"runs kept in {work}" if args.work else "", flush=True)


if __name__ == "__main__":
    main()
