"""Kill-and-resume soak: kill -9 a real `python -m posx train` at random moments, resume it,
and check that what is on disk is loadable after every kill and that the final weights equal
those of an uninterrupted run.

    python -m scripts.kill_resume_soak --kills 30 --steps 200

Each attempt waits until the run has checkpointed past where the previous attempt left it,
sleeps a random 0..--max-delay seconds (checkpoint_every=1, so most kills land while a
checkpoint is being written), then sends SIGKILL. After each kill it loads the latest
checkpoint (weights, optimizer, RNG states) into a fresh model and reads config.yaml and
metrics.csv. Then it runs `posx train --resume` again. Prints the counts and the largest
weight difference. ``soak`` is also used, with a few kills, by tests/test_resume.py.

    python -m scripts.kill_resume_soak --phases train,eval,report --kills 20 --other-kills 10

The eval and report phases kill ``posx eval-extrapolate`` and ``posx report`` of the finished run
at random moments: after each kill every table the run holds must parse whole (each is
replaced atomically), and the report directory must be absent or complete (it is published by
one rename); the next attempt with the same ``--out`` must work.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch
from safetensors.torch import load_file

from posx.configure.compose import typed
from posx.configure.resume import saved_config
from posx.eval.tables import TABLE_COLUMNS, read_table
from posx.model.gpt import GPT
from posx.model.spec import ModelSpec
from posx.runs import checkpoint, resumable
from posx.runs.rundir import load_run
from posx.schema.config import BYTES
from posx.train.steps import make_optimizer
from scripts.study.args import OneLineParser, number, positive, whole

REPORT_FILES = {"summary.csv", "summary.md", "missing.csv"}

TINY = [
    "model.n_layer=2",
    "model.n_head=2",
    "model.d_model=32",
    "model.dropout=0.1",
    "train.context_length=32",
    "train.batch_size=4",
    "train.eval_every=5",
    "train.eval_batches=1",
    "train.warmup_steps=2",
    "train.checkpoint_every=1",
    "device=cpu",
]


def _env() -> dict:
    return {**os.environ, "HYDRA_FULL_ERROR": "0"}  # the posx this interpreter imports


def _posx(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "posx", *args],
        cwd=cwd,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def check_loadable(run_dir: Path) -> int:
    """Load everything a killed run left; raise if anything is unloadable. Returns its step."""
    cfg = typed(saved_config(run_dir))
    if (run_dir / "metrics.csv").is_file():
        pd.read_csv(run_dir / "metrics.csv")
    if (run_dir / "model.json").is_file():
        load_run(run_dir)
    if not resumable.exists(run_dir):
        return 0
    model = GPT(ModelSpec.from_config(cfg, BYTES))
    optimizer = make_optimizer(model, cfg, torch.device("cpu"))
    state = checkpoint.load(run_dir, model, optimizer, torch.Generator(), "cpu")
    assert len(state.metrics) == state.step, (len(state.metrics), state.step)
    return state.step


def soak(work: Path, corpus: Path, kills: int, steps: int, seed: int = 0, max_delay: float = 0.4, log=print) -> dict:
    """Run the loop; returns counts and whether the final weights equal the reference."""
    rng = random.Random(seed)
    args = [*TINY, f"train.steps={steps}", "data=text", f"data.path={corpus}", f"seed={seed}"]
    ref = _posx(["train", *args, "name=reference"], work)
    _, err = ref.communicate()
    if ref.returncode != 0:
        raise RuntimeError(f"reference run failed: {err}")
    run_dir = work / "results" / "runs" / "killed"
    counts = {"kills": 0, "resumes": 0, "loads_checked": 0, "finished_before_kill": 0}
    attempt = ["train", *args, "name=killed"]
    reached = 0  # the first kill comes after the first checkpoint, so config.yaml exists
    while True:
        proc = _posx(attempt, work)
        if counts["kills"] < kills:
            # wait until this attempt has made progress past the last one, then a random delay
            while proc.poll() is None and (resumable.latest_step(run_dir) or 0) <= reached:
                time.sleep(0.01)
            time.sleep(rng.uniform(0, max_delay))
        if proc.poll() is None and counts["kills"] < kills:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            counts["kills"] += 1
            reached = check_loadable(run_dir)
            counts["loads_checked"] += 1
            log(f"kill {counts['kills']}: checkpoint at step {reached} loads")
        else:
            _, err = proc.communicate()
            if proc.returncode != 0:
                raise RuntimeError(f"posx {' '.join(attempt)} failed ({proc.returncode}): {err}")
            if counts["kills"] < kills:
                counts["finished_before_kill"] += 1
            break
        attempt = ["train", "--resume", str(run_dir)]
        counts["resumes"] += 1
    a = load_file(str(work / "results" / "runs" / "reference" / "model.safetensors"))
    b = load_file(str(run_dir / "model.safetensors"))
    diff = max((a[k] - b[k]).abs().max().item() for k in a)
    steps_logged = pd.read_csv(run_dir / "metrics.csv")["step"].tolist()
    return {
        **counts,
        "max_abs_diff": diff,
        "equal": set(a) == set(b) and diff <= 1e-6,
        "metrics_complete": steps_logged == list(range(1, steps + 1)),
    }


def kill_other(work: Path, run_dir: Path, phase: str, kills: int, seed: int = 0, log=print) -> dict:
    """Kill ``posx eval-extrapolate`` (phase eval) or ``posx report`` (phase report) of a finished
    run ``kills`` times at random moments; returns counts of kills and of partial outputs."""
    rng = random.Random(seed)
    counts = {f"{phase}_kills": 0, f"{phase}_partial": 0, f"{phase}_finished_before_kill": 0}
    for i in range(kills):
        out = work / f"report-{i}"
        args = (
            ["eval-extrapolate", str(run_dir), "device=cpu", "eval.tokens=512", "eval.batch_tokens=512"]
            if phase == "eval"
            else ["report", str(run_dir), "--out", str(out)]
        )
        proc = _posx(args, work)
        time.sleep(rng.uniform(0.5, 8.0))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            counts[f"{phase}_kills"] += 1
        else:
            counts[f"{phase}_finished_before_kill"] += 1
        proc.communicate()
        if phase == "eval":
            for name in TABLE_COLUMNS:
                if (run_dir / name).exists():
                    try:
                        read_table(run_dir / name)
                    except Exception as exc:  # noqa: BLE001 - any failure to read is a partial table
                        counts["eval_partial"] += 1
                        log(f"{phase} kill {i}: {name} does not read back: {exc}")
        elif out.exists() and not REPORT_FILES <= {p.name for p in out.iterdir()}:
            counts["report_partial"] += 1
            log(f"report kill {i}: {out} is partial")
        elif not out.exists():
            again = _posx(["report", str(run_dir), "--out", str(out)], work)
            _, err = again.communicate()
            if again.returncode != 0:
                raise RuntimeError(f"the report after a kill failed: {err}")
    log(f"{phase}: {counts}")
    return counts


def _corpus(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(40):
        lines = [f"def f{i}_{j}(x):\n    return x * {j} + {i}  # line {j}\n" for j in range(30)]
        (root / f"mod{i:02d}.py").write_text("".join(lines), encoding="utf-8")
    return root


def main() -> None:
    parser = OneLineParser(prog="python -m scripts.kill_resume_soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=whole, default=20)
    parser.add_argument("--steps", type=positive, default=200)
    parser.add_argument("--seed", type=whole, default=0)
    parser.add_argument("--max-delay", type=number(0, 3600), default=0.4)
    parser.add_argument("--phases", default="train", help="comma-separated: train, eval, report")
    parser.add_argument("--other-kills", type=whole, default=10, help="kills in each of the eval and report phases")
    opts = parser.parse_args()
    phases = [p.strip() for p in opts.phases.split(",") if p.strip()]
    if not phases or set(phases) - {"train", "eval", "report"}:
        parser.error(f"--phases {opts.phases}: give train, eval and report, comma-separated")
    work = Path(tempfile.mkdtemp(prefix="posx-soak-"))
    try:
        start = time.perf_counter()
        result = soak(
            work,
            _corpus(work / "corpus"),
            opts.kills if "train" in phases else 0,
            opts.steps,
            opts.seed,
            opts.max_delay,
        )
        run_dir = work / "results" / "runs" / "killed"
        for phase in ("eval", "report"):
            if phase in phases:
                result.update(kill_other(work, run_dir, phase, opts.other_kills, opts.seed))
        result["seconds"] = round(time.perf_counter() - start, 1)
        for key, value in result.items():
            print(f"{key:>22}: {value}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
