"""How long a ``posx`` command takes from start to end in a fresh process, this checkout against
another (``--posx-path``, e.g. the code before a change), the two alternating in each round.

``python -m benchmarks.startup --posx-path ../posx-before --rounds 5 --command "runs results"
--command "report results/runs --out {out}"`` prints, per command and checkout, the median wall
and CPU time and the largest peak RSS over the rounds (``os.wait4``), and the ratio of the
medians. ``{out}`` in a command becomes a new, empty directory each time, all in one folder (a
report writes only into an empty one, and keeps its cache beside it, so the first round of a
report fills the cache and the later ones read it). Commands run with ``OMP_NUM_THREADS=1`` in ``--cwd``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

import posx
from benchmarks.report_scale import measure


def run_once(command: str, checkout: Path, cwd: Path, scratch: Path) -> tuple[float, float, float]:
    args = shlex.split(command)
    if "{out}" in command:  # one parent for all: a report keeps its cache beside its --out
        out = tempfile.mkdtemp(dir=scratch, prefix="out-")
        args = [a.replace("{out}", out) for a in args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(checkout)}
    return measure([sys.executable, "-m", "posx", *args], env, cwd)


def summary(samples: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """Median wall, median CPU, largest peak RSS."""
    return (
        statistics.median(s[0] for s in samples),
        statistics.median(s[1] for s in samples),
        max(s[2] for s in samples),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--command", action="append", required=True, help="posx's arguments, one command")
    parser.add_argument("--posx-path", type=Path, default=None, help="another checkout to time against this one")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cwd", type=Path, default=Path.cwd())
    args = parser.parse_args()
    here = Path(posx.__file__).resolve().parents[1]
    checkouts = {"this checkout": here} | ({"--posx-path": args.posx_path.resolve()} if args.posx_path else {})
    samples = {(c, k): [] for c in args.command for k in checkouts}
    with tempfile.TemporaryDirectory(prefix="posx-startup-") as scratch:
        for r in range(args.rounds):
            order = list(checkouts.items()) if r % 2 == 0 else list(checkouts.items())[::-1]
            for command in args.command:
                for label, checkout in order:
                    samples[command, label].append(run_once(command, checkout, args.cwd, Path(scratch)))
    print(f"| command | checkout | wall (median of {args.rounds}) | CPU | peak RSS |")
    print("|---|---|---|---|---|")
    for command in args.command:
        for label in checkouts:
            wall, cpu, rss = summary(samples[command, label])
            print(f"| `posx {command}` | {label} | {wall:.2f} s | {cpu:.2f} s | {rss:.0f} MB |")
        if args.posx_path:
            ratio = summary(samples[command, "--posx-path"])[0] / summary(samples[command, "this checkout"])[0]
            print(f"| | --posx-path / this checkout | {ratio:.2f}x | | |")


if __name__ == "__main__":
    main()
