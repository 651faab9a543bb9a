"""The process boundary under random hostile input: every case ends in exit 0, or in one error
line with exit 2 (or 3, an internal error: a bug to fix), never in a traceback, and changes no
file that was there before it other than a run's evaluation records.

Cases are drawn by a seeded generator (the same cases on every machine and run): each schema key
with values of every type (huge, negative, NaN and infinite numbers; strings with brackets,
quotes, backslashes and line breaks; lists, mappings, nulls, paths with ``[``), unknown and
misspelt keys, random commands and flags, and damaged copies of run directories (truncated or
garbage model.json, checkpoint records, config.yaml, weights, evaluation tables; fields set to
hostile values) given to every command that takes a run. Nothing trains but tiny runs: ``train``
and ``extend`` cases compose and check (``--cfg job``), which is where bad input is refused.
``run_cases`` tallies the outcomes; docs/measurements.md records them.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from collections import Counter
from pathlib import Path

import pytest

from posx.configure.reference import keys
from posx.schema.config import ExtendRootConfig

from conftest import run_posx

SEED = 28
CHUNKS = 8  # the cases run as this many tests, so CI's workers share them
PER_CHUNK = 66  # 528 cases in all
CHEAP_EVAL = ["eval.factors=[1]", "eval.tokens=64", "eval.batch_tokens=64", "eval.passkey.enabled=false"]
KEYS = [k for k, *_ in keys(ExtendRootConfig) if not k.startswith(("parent", "results_dir", "data.cache_dir"))]
MISSPELT = ["train.stepz", "modle.n_layer", "eval.factor", "pos.nam", "seeed", "logger.nmae", "data.pth", "zzz"]
NUMBERS = ["-1", "0", "-0.0", "1e308", "-1e308", "1e309", "nan", "-inf", "inf", "99999999999999999999999", "0x10"]
TEXTS = ["abc", "''", "'a[b]c'", "a[b", "'[bold]x[/bold]'", '"q"', "a\\b", "'x\ny'", "x y", "é", "'${oc.env:HOME}'"]
SHAPES = ["[]", "[1,2,x]", "[nan]", "[[1]]", "{}", "{a:1}", "[-1]", "[1e308]", "null", "true", "maybe", "'/no/[dir'"]
VALUES = NUMBERS + TEXTS + SHAPES
FIELDS = [
    "train_context", "step", "weights_sha256", "format", "model", "rope", "data", "extended_from",
]  # fmt: skip
HOSTILE_JSON = [None, -1, 1e308, float("nan"), float("inf"), "x[y]", [], {}, True, 2**70]
RECORDS = [
    "model.json", "config.yaml", "model.safetensors", "metrics.csv", "extrapolation.csv", "eval.yaml",
    "checkpoint/latest.json", "checkpoint/step-00000006/state.json", "checkpoint/step-00000006/model.safetensors",
]  # fmt: skip
EVAL_RECORDS = {
    "extrapolation.csv", "extrapolation.md", "positions.csv", "passkey.csv", "tasks.csv", "eval.yaml", "digest.json",
    "tables.json",
}  # fmt: skip


def hostile_override(rng: random.Random) -> str:
    key = rng.choice(KEYS + MISSPELT) if rng.random() < 0.9 else rng.choice(KEYS) + "." + rng.choice(MISSPELT)
    prefix = rng.choice(["", "", "", "", "+", "++", "~"])
    return f"{prefix}{key}={rng.choice(VALUES)}"


def damage(run: Path, rng: random.Random) -> str:
    """Damage one record of the copied run at random; what was done."""
    present = [r for r in RECORDS if (run / r).is_file()] or ["model.json"]
    record = rng.choice(present)
    path = run / record
    data = path.read_bytes() if path.is_file() else b""
    how = rng.choice(["truncate", "garbage", "field", "field", "empty", "remove"])
    if how == "field" and record.endswith(".json"):
        doc = json.loads(data)
        target = doc if not isinstance(doc.get("model"), dict) or rng.random() < 0.5 else doc["model"]
        field = rng.choice(sorted(target) + FIELDS)
        target[field] = rng.choice(HOSTILE_JSON)
        path.write_text(json.dumps(doc))
    elif how == "truncate":
        path.write_bytes(data[: int(rng.random() * (len(data) + 1))])  # one draw whatever the length: the cases repeat
    elif how == "garbage":
        path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))) + data[64:])
    elif how == "empty":
        path.write_bytes(b"")
    else:
        path.unlink(missing_ok=True)
    return f"{how} {record}"


def draw_case(rng: random.Random, work: Path, bases: dict[str, Path]) -> tuple[list[str], set[Path]]:
    """One command line, with the damaged runs it names set up under ``work``; the argument list
    and the run directories whose evaluation records it may rewrite."""
    kind = rng.choice(["compose"] * 5 + ["run"] * 4 + ["junk"])
    extra = [hostile_override(rng) for _ in range(rng.choice([0, 1, 1, 2, 3]))]
    if kind == "compose":
        command = rng.choice([["train"], ["train", "-m"], ["extend", "rope"], ["data", "prepare", "--cfg", "job"]])
        flags = ["--cfg", rng.choice(["job", "job", "hydra", "bogus"])] if command[0] != "data" else []
        return [*command, *extra, *flags], set()
    if kind == "junk":
        words = ["train", "runs", "report", "compare", "--resume", "--latest", "--force", "--csv", "-m", "--cfg", "x[y"]
        return [rng.choice(["bogus", "runs", "compare", "frequencies", "report", "eval-extrapolate"]),
                *rng.sample(words, rng.randrange(1, 4))], set()  # fmt: skip
    name = rng.choice(sorted(bases))
    run = work / "results" / "runs" / name
    shutil.copytree(bases[name], run, ignore=shutil.ignore_patterns(".posx.lock", "eval"))
    damage(run, rng)
    other = work / "results" / "runs" / "other"
    shutil.copytree(bases["rope"], other, ignore=shutil.ignore_patterns(".posx.lock", "eval"))
    extra = [e for e in extra if not e.lstrip("+~").startswith(("eval.tokens", "eval.factors", "eval.batch"))]
    commands = [
        ["eval-extrapolate", name, *CHEAP_EVAL, *extra],
        ["eval-extrapolate", name, "--force", *CHEAP_EVAL, *extra],
        ["compare", name, "other"],
        ["export", name, "--out", "hf"],
        ["frequencies", name, *extra],
        ["runs", "results", "--csv", "-"],
        ["report", f"results/runs/{name}", "--out", "report"],
        ["extend", name, *extra, "--cfg", "job"],
        ["train", "--resume", name, *extra],
    ]
    return rng.choice(commands), {run, other}


def snapshot(root: Path) -> dict[Path, str]:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()}


def changed_files(before: dict[Path, str], after: dict[Path, str], evaluated: set[Path]) -> list[Path]:
    """Files that were there before and are gone or different, less a run's evaluation records."""
    return [
        p
        for p, digest in before.items()
        if after.get(p) != digest and not (p.name in EVAL_RECORDS and p.parent in evaluated)
    ]


def outcome(proc) -> str:
    """The case's class: exit0, exit2, exit3, or what went wrong."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    if "Traceback" in proc.stdout + proc.stderr:
        return "traceback"
    if proc.returncode == 0:
        return "exit0"
    if proc.returncode in (2, 3) and len(lines) == 1 and lines[0].startswith(("error: ", "internal error: ")):
        return f"exit{proc.returncode}"
    return f"bad output (exit {proc.returncode})"


def run_cases(chunk: int, bases: dict[str, Path], tmp: Path, corpus: Path) -> Counter:
    rng = random.Random(SEED * 1000 + chunk)
    tally: Counter = Counter()
    failures = []
    corpus_before = snapshot(corpus)
    for i in range(PER_CHUNK):
        work = tmp / f"case{i}"
        work.mkdir()
        (work / "notes.txt").write_text("the user's own file\n", encoding="utf-8")
        args, evaluated = draw_case(rng, work, bases)
        before = snapshot(work)
        proc = run_posx(*args, cwd=work, check=False)
        kind = outcome(proc)
        tally[kind] += 1
        changed = changed_files(before, snapshot(work), evaluated)
        if kind not in ("exit0", "exit2") or changed:
            failures.append(f"{args}: {kind}, changed {changed}\n{proc.stderr[-2000:]}")
        shutil.rmtree(work)
    assert snapshot(corpus) == corpus_before
    assert not failures, "\n\n".join(failures)
    return tally


@pytest.fixture(scope="module")
def bases(trained_runs, tmp_path_factory) -> dict[str, Path]:
    """A RoPE run, a learned-absolute run and a YaRN extension of the RoPE run (rescaled)."""
    work = tmp_path_factory.mktemp("fuzz-bases")
    shutil.copytree(trained_runs["rope"], work / "results" / "runs" / "rope")
    ext = ["method=yarn", "factor=2", "name=yarn2", "extend.steps=2", "extend.warmup_steps=1", "extend.eval_every=1"]
    run_posx("extend", "rope", *ext, "device=cpu", "eval.tokens=512", "eval.batch_tokens=512", cwd=work)
    return {"rope": trained_runs["rope"], "absolute": trained_runs["absolute"], "yarn2": work / "results/runs/yarn2"}


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_hostile_cases_end_in_one_line_and_change_nothing(chunk, bases, tmp_path, text_corpus):
    tally = run_cases(chunk, bases, tmp_path, text_corpus)
    print(f"fuzz chunk {chunk}: {dict(sorted(tally.items()))}")
