"""How ``posx report`` and ``posx runs`` scale with the number of runs.

``python -m benchmarks.report_scale --runs 100 1000 10000`` trains one tiny sweep once (two
encodings x three seeds, a few steps, evaluated at 1x/2x/4x with two methods, positions and
passkey), then for each N builds N runs as copies of its run directories (weights left out:
a report loads no model), each copy with its own seed and, every ``--seeds`` copies of a base
run, its own ``train.lr`` (so the copies form N / (3 x --seeds) x 2 groups of seeds), and times
``posx runs DIR`` and ``posx report DIR`` each in a fresh subprocess: wall time and the peak
resident memory of that process (``os.wait4``). A second report over the same runs shows what
the report cache saves; ``--grow`` runs more are then added and reported again. ``--copied``
then copies the N runs as ``cp -r``, ``scp`` or a download would (every mtime new) and times
``posx runs`` and ``posx report`` over the copy twice each: the first call after the copy (cold)
and the next one (warm).

The subprocesses run the posx this script imports (its checkout first on PYTHONPATH);
``--posx-path DIR`` times another checkout's, e.g. the code before a change, over the same runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

import posx
from posx.report import digest

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


def build(base: list[Path], out: Path, start: int, stop: int, seeds: int) -> None:
    """Runs ``start`` .. ``stop`` - 1 of a synthetic sweep under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    configs = [yaml.safe_load((b / "config.yaml").read_text(encoding="utf-8")) for b in base]
    for k in range(start, stop):
        i, copy = k % len(base), k // len(base)  # the how-many-th copy of which base run
        seed = int(configs[i]["seed"]) + 3 * (copy % seeds)
        lr = float(configs[i]["train"]["lr"]) * (1 + (copy // seeds) / 1000)
        copy_run(base[i], out / f"run{k:05d}", configs[i], seed, lr)


# Starts the command from a small process and reports its wall and CPU time and peak RSS. Linux
# carries a process's peak RSS across fork and exec, so a command started straight from this
# script would report at least this script's own memory; started from here, it reports its own.
_WAITER = """
import os, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=sys.stderr)
_, status, usage = os.wait4(proc.pid, 0)
wall = time.perf_counter() - start
print(os.waitstatus_to_exitcode(status), wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)
"""


def measure(command: list[str], env: dict, cwd: Path) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds (user + system), peak RSS in MB) of one subprocess. On a shared
    machine the CPU time is the steadier of the two times."""
    proc = subprocess.run(
        [sys.executable, "-S", "-c", _WAITER, *command], cwd=cwd, env=env, capture_output=True, text=True
    )
    code, wall, cpu, rss = proc.stdout.split() if proc.returncode == 0 else ("-1", 0, 0, 0)
    if int(code) != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stderr[-2000:]}")
    return float(wall), float(cpu), float(rss)


def time_both(sweep: Path, work: Path, env: dict, label: str) -> None:
    posx = [sys.executable, "-m", "posx"]
    runs = measure([*posx, "runs", str(sweep)], env, work)
    out = work / "reports" / f"{sweep.name}-{time.strftime('%H%M%S')}"  # its cache: work/reports/.cache
    report = measure([*posx, "report", str(sweep), "--out", str(out)], env, work)
    cells = " | ".join(f"{wall:.1f} s | {cpu:.1f} s | {rss:.0f} MB" for wall, cpu, rss in (runs, report))
    print(f"| {label} | {cells} |", flush=True)


def time_copied(sweep: Path, work: Path, env: dict, n: int) -> None:
    """``posx runs`` and ``posx report`` over a fresh copy of ``sweep`` (new mtimes): cold, then warm."""
    copied = work / f"copied-{n}"
    shutil.rmtree(copied, ignore_errors=True)
    shutil.copytree(sweep, copied, copy_function=shutil.copyfile)  # as cp -r: every file's mtime is new
    shutil.rmtree(work / "reports" / ".cache", ignore_errors=True)
    posx = [sys.executable, "-m", "posx"]
    for label in ("cold", "warm"):
        runs = measure([*posx, "runs", str(copied)], env, work)
        print(
            f"| {n:,} copied, `posx runs` {label} | {runs[0]:.1f} s | {runs[1]:.1f} s | {runs[2]:.0f} MB |", flush=True
        )
    for label in ("cold", "warm"):
        out = work / "reports" / f"{copied.name}-{label}-{time.strftime('%H%M%S')}"
        rep = measure([*posx, "report", str(copied), "--out", str(out)], env, work)
        print(
            f"| {n:,} copied, `posx report` {label} | {rep[0]:.1f} s | {rep[1]:.1f} s | {rep[2]:.0f} MB |", flush=True
        )
    shutil.rmtree(copied)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--seeds", type=int, default=4, help="copies of a base run per setting (x3 base seeds)")
    parser.add_argument("--grow", type=int, default=10, help="runs added before the last report")
    parser.add_argument("--again", action=argparse.BooleanOptionalAction, default=True, help="report twice")
    parser.add_argument("--work", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--posx-path", type=Path, default=None, help="time this checkout's posx instead")
    parser.add_argument("--build-only", action="store_true", help="build the runs, time nothing")
    parser.add_argument("--copied", action="store_true", help="only time a copy of the runs, cold and warm")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="report-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    checkout = args.posx_path or Path(posx.__file__).resolve().parents[1]  # default: the posx imported here
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(checkout.resolve())}
    base = base_sweep(work)
    print("| runs | `posx runs` wall | CPU | peak RSS | `posx report` wall | CPU | peak RSS |", flush=True)
    print("|---|---|---|---|---|---|---|", flush=True)
    for n in args.runs:
        sweep = work / f"sweep-{n}"
        have = sorted(p for p in sweep.iterdir() if p.is_dir()) if sweep.is_dir() else []
        if len(have) > n:
            shutil.rmtree(sweep)
            have = []
        if len(have) < n:
            if have:  # the last one may be half copied
                shutil.rmtree(have[-1])
            build(base, sweep, max(len(have) - 1, 0), n, args.seeds)
        if args.build_only:
            continue
        if args.copied:
            print("| what | wall | CPU | peak RSS |\n|---|---|---|---|", flush=True)
            time_copied(sweep, work, env, n)
            continue
        shutil.rmtree(work / "reports" / ".cache", ignore_errors=True)  # the first report starts without a cache
        time_both(sweep, work, env, f"{n:,}")
        if args.again:
            time_both(sweep, work, env, f"{n:,} again (cached)")
        if args.grow:
            build(base, sweep, n, n + args.grow, args.seeds)
            time_both(sweep, work, env, f"{n:,} + {args.grow}")
            for k in range(n, n + args.grow):
                shutil.rmtree(sweep / f"run{k:05d}")
    print(f"runs kept in {work}" if args.work else "", flush=True)


if __name__ == "__main__":
    main()
