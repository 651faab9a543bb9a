"""The file-damage half of the fuzzer, in process: every file of a run, its digest and each file of
a report-cache shard, damaged each way a disk, a copy or a hand can damage it (truncated, columns
swapped, wrong types, NaN and inf, a huge cell, bad UTF-8, a FIFO, a symbolic link out, a
directory), then listed (``posx runs``) and reported (the report's reading and its numbers, the
figures left out). Each case must end in numbers equal to those a plain reading of the damaged
files gives (``reference``; for a digest or a shard, those of the undamaged run: it is computed
again), or in one error line (a PosxError, exit 2): never another exception (exit 3), a wrong
number or a hang. The report is made twice: of the damaged run alone, and of it beside a sound
run of another encoding (``beside``), where a run the plain reading refuses must be left out and
named in one line (``left-out``) and the sound run's numbers must be those it has without it:
one damaged run never stops a report of the others. ``run_target`` tallies the outcomes;
docs/measurements.md records them.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import signal
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import yaml
from test_report_groups import _run
from test_report_scale import _tasks_csv

from posx.core.errors import PosxError
from posx.eval.tables import read_table
from posx.report.compare import collection
from posx.report.figures import learning
from posx.report.store import cache, digest, queries
from posx.report.summary import _load, summarize
from posx.runs.paths import TASK_CURVE
from posx.train import taskcurve

from helpers.marks import one_fast

RUN_FILES = ["config.yaml", "model.json", "eval.yaml", "metrics.csv", "extrapolation.csv", "positions.csv",
             "tasks.csv", "task_curve.csv", "digest.json"]  # fmt: skip
SHARD_FILES = ["digests.parquet", "extrapolation.parquet", "positions.parquet", "tasks.parquet", "metrics.parquet",
               "sums.json"]  # fmt: skip
DERIVED = {"digest.json", *SHARD_FILES}  # posx's own: damage to them is computed again, never an error
KINDS = ["truncated-head", "truncated-half", "truncated-tail", "columns-swapped", "wrong-types", "nan", "inf",
         "huge-cell", "bad-utf8", "fifo", "symlink-out", "directory"]  # fmt: skip
NUMBERS = ("ppl", "nll", "accuracy", "val_loss", "tokens", "trials", "seed", "step", "train_context")
HUGE = "x" * 200_000
NO_TABLE = "none of the runs has extrapolation.csv"  # reported's refusal of a report with no perplexity
BESIDE = "absolute"  # the encoding of the sound run beside the damaged one
LIMIT_S = 20  # a case still running after this long hangs


def _positions(run: Path) -> None:
    rows = [
        {"run": run.name, "pos": "rope", "train_context": 32, "eval_context": 32, "factor": 1.0, "method": "none",
         "protocol": "nonoverlapping", "bucket_start": b, "bucket_end": b + 16, "tokens": 8, "nll": 2.0 + b / 16,
         "stage": "zero-shot"}
        for b in (0, 16)
    ]  # fmt: skip
    pd.DataFrame(rows).to_csv(run / "positions.csv", index=False)


def _curve(run: Path) -> None:
    """task_curve.csv of a run trained with a task mix: two tasks at two validations."""
    rows = [
        {"step": s, "tokens": 512 * s, "task": t, "trials": 8, "accuracy": a, "token_accuracy": a, "answer_nll": 1.5}
        for s, (t, a) in [(3, ("niah", 0.25)), (3, ("copy", 0.5)), (6, ("niah", 0.5)), (6, ("copy", 0.75))]
    ]
    taskcurve.write(run, rows)


def _csv(path: Path, kind: str) -> None:
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
    header = rows[0]
    column = next((header.index(c) for c in NUMBERS if c in header), min(2, len(header) - 1))
    if kind == "columns-swapped":
        rows = [list(reversed(r)) for r in rows]
    else:
        value = {"wrong-types": "abc", "nan": "nan", "inf": "inf", "huge-cell": HUGE}[kind]
        rows[1][column] = value
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    path.write_text(out.getvalue(), encoding="utf-8")


def _mapping(doc, kind: str):
    """A JSON or YAML mapping damaged: two values swapped, or one value replaced."""
    keys = list(doc)
    if kind == "columns-swapped":
        doc[keys[0]], doc[keys[1]] = doc[keys[1]], doc[keys[0]]
        return doc
    key = next((k for k in keys if k in NUMBERS or k == "seal"), keys[-1])
    doc[key] = {"wrong-types": [1, "a"], "nan": math.nan, "inf": math.inf, "huge-cell": HUGE}[kind]
    return doc


def _parquet(path: Path, kind: str) -> None:
    frame = pd.read_parquet(path)
    numeric = [c for c in frame.columns if pd.api.types.is_float_dtype(frame[c])] or list(frame.columns)
    if kind == "columns-swapped":
        a, b = (numeric * 2)[:2] if len(numeric) < 2 else numeric[:2]
        frame = frame.rename(columns={a: b, b: a})
    elif kind == "wrong-types":
        frame[numeric[0]] = frame[numeric[0]].astype(str)
    elif kind == "huge-cell":
        frame[frame.columns[0]] = HUGE
    else:
        frame[numeric[0]] = math.nan if kind == "nan" else math.inf
    frame.to_parquet(path)


def damage(path: Path, kind: str, outside: Path) -> None:
    """Damage ``path`` one way (``KINDS``); ``outside``: a folder beside the results, for a link out."""
    data = path.read_bytes()
    if kind.startswith("truncated"):
        keep = {"truncated-head": min(10, len(data) // 2), "truncated-half": len(data) // 2}.get(kind, len(data) - 1)
        path.write_bytes(data[:keep])
    elif kind == "bad-utf8":
        path.write_bytes(data[: len(data) // 2] + b"\xff\xfe\xc3" + data[len(data) // 2 :])
    elif kind == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif kind == "symlink-out":
        (outside / "elsewhere.txt").write_text("outside,the,run\n1,2,3\n", encoding="utf-8")
        path.unlink()
        path.symlink_to(outside / "elsewhere.txt")
    elif kind == "directory":
        path.unlink()
        path.mkdir()
        (path / "inside").write_text("x\n")
    elif path.suffix == ".csv":
        _csv(path, kind)
    elif path.suffix == ".parquet":
        _parquet(path, kind)
    elif path.suffix == ".json":
        path.write_text(json.dumps(_mapping(json.loads(data), kind)), encoding="utf-8")
    else:
        path.write_text(yaml.safe_dump(_mapping(yaml.safe_load(data), kind)), encoding="utf-8")


def _table(path: Path):
    """read_table of ``path`` as a plain reader sees it: None when it is not a regular file, the
    PosxError when read_table refuses it."""
    if not path.is_file():
        return None
    try:
        return read_table(path)
    except PosxError as exc:
        return exc


def reference(run: Path) -> dict:
    """What a plain reading of the run's tables gives: perplexity per (method, factor) and task
    accuracy per (method, factor, task), or the refusal."""
    ext, tasks, curve = _table(run / "extrapolation.csv"), _table(run / "tasks.csv"), _table(run / TASK_CURVE)
    if ext is None or isinstance(ext, Exception):
        return {"refused": True}
    ok = ext[ext["status"] == "ok"]
    found = {"ppl": {(m, float(f)): float(g["ppl"].mean()) for (m, f), g in ok.groupby(["method", "factor"])}}
    if isinstance(tasks, Exception) or isinstance(curve, Exception):  # a listing reads neither: it has the ppl
        return {**found, "refused": True}
    if tasks is not None:
        t = tasks[tasks["status"] == "ok"]
        found["tasks"] = {
            (m, float(f), k): float((g["accuracy"] * g["trials"]).sum() / g["trials"].sum())
            for (m, f, k), g in t.groupby(["method", "factor", "task"])
        }
    if curve is not None:  # one run: the mean over its runs is its own accuracy
        found["curve"] = {(k, int(n)): float(a) for k, n, a in zip(curve["task"], curve["tokens"], curve["accuracy"])}
    return found


def reported(results: Path, beside: bool = False) -> dict:
    """The report's numbers (its reading and queries, as ``posx report`` has them before drawing);
    ``beside``: of the runs beside them too, whose perplexities (``BESIDE``'s encoding) go to
    ``beside``, with the runs left out as damaged (``left``: name -> the line)."""
    folders = [results / "runs", results / "beside"] if beside else [results / "runs"]
    loaded, runs, grouping, gathered = _load(folders, "current", results, [])
    try:
        con = gathered.con
        if con.execute("SELECT count(*) FROM ext_rows").fetchone()[0] == 0:
            raise PosxError(NO_TABLE)  # the report's refusal (_publish)
        summary = summarize(con)
        other = summary["encoding"] == BESIDE
        ppl = {(r.method, float(r.factor)): float(r.ppl_mean) for r in summary[~other].itertuples()}
        near = {(r.method, float(r.factor)): float(r.ppl_mean) for r in summary[other].itertuples()}
        left = {Path(p).name: why for p, why in gathered.damaged.items()}
        tasks = queries.tasks(con)
        curve = learning.gather(runs)[0]
    except BaseException:
        cache.discard(gathered)
        raise
    cache.keep(gathered)
    found = {"ppl": ppl, **({"beside": near, "left": left} if beside else {})}
    if not tasks.empty:
        t = tasks[tasks["status"] == "ok"]
        found["tasks"] = {
            (m, float(f), k): float((g["accuracy"] * g["trials"]).sum() / g["trials"].sum())
            for (m, f, k), g in t.groupby(["method", "factor", "task"])
        }
    if not curve.empty:
        means = zip(curve["task"], curve["tokens"], curve["accuracy_mean"])
        found["curve"] = {(k, int(n)): float(a) for k, n, a in means}
    return found


def _same(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    return all(
        set(a[k]) == set(b[k]) and all(x == y or (x != x and y != y) for x, y in ((a[k][i], b[k][i]) for i in a[k]))
        for k in a
    )


def _alarm(_signum, _frame):
    raise TimeoutError("hang")


def _left_out(results: Path, alone, clean: dict) -> tuple[str, str]:
    """The report of the damaged run beside a sound one: (outcome, what was wrong or ''). ``alone``:
    what the report of the damaged run alone gave (its numbers, or its PosxError). The sound run's
    numbers are those it has without the damaged one; the damaged run is left out, named in one
    line, exactly when its report alone is refused (one with no extrapolation.csv at all is not
    damaged: it is reported, without perplexities), else its numbers are those it has alone."""
    got = reported(results, beside=True)
    near, left = got.pop("beside"), got.pop("left")
    if not _same({"ppl": near}, {"ppl": clean["beside"]}):
        return "wrong", f"the sound run beside reported {near}, alone {clean['beside']}"
    if not isinstance(alone, PosxError):
        right = not left and _same(got, alone)
        return "correct", "" if right else f"reported {got} (left out {left}), alone {alone}"
    if str(alone) == NO_TABLE:
        return "no-table", "" if not left and got["ppl"] == {} else f"reported {got}, left out {left}"
    named = list(left) == ["a0"] and left["a0"] == str(alone)  # the line the report of it alone stops with
    return "left-out", "" if named and got == {"ppl": {}} else f"reported {got}, left out {left}, alone: {alone}"


def one_case(results: Path, run: Path, command: str, clean: dict, seen: dict) -> tuple[str, str]:
    """(outcome, what was wrong or ''): correct, recomputed, left-out, no-table or exit2 are fine.
    ``seen["alone"]``: what the report of the damaged run alone gave, for the report beside."""
    derived = os.environ.get("FUZZ_TARGET", "") in DERIVED
    alone = {k: v for k, v in clean.items() if k != "beside"}  # the undamaged run's own numbers
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(LIMIT_S)
    try:
        if command == "runs":
            row = collection.list_runs(results / "runs").iloc[0]
            got = {"lengths": row["evaluated_lengths"], "damaged": row["damaged"]}
            want = reference(run)
            lengths = ",".join(sorted({str(32 * int(f)) for _, f in want["ppl"]})) if "ppl" in want else ""
            right = got["lengths"] == lengths or ("ppl" not in want and got["damaged"])
            wrong = "" if right else f"listed {got}, the files give lengths {lengths!r}"
        elif command == "beside":
            outcome, wrong = _left_out(results, seen["alone"], clean)
            return ("recomputed" if derived and outcome == "correct" else outcome), wrong
        else:
            got, want = reported(results), (alone if derived else reference(run))
            seen["alone"] = got
            wrong = "" if not want.get("refused") and _same(got, want) else f"reported {got}, the files give {want}"
    except PosxError as exc:
        one = "\n" not in str(exc)
        seen["alone"] = exc
        if command == "beside":
            return "exit2", f"one damaged run stopped the report of the sound one beside it: {exc}"
        if derived:
            return "exit2", f"a damaged {os.environ['FUZZ_TARGET']} must be computed again, not refused: {exc}"
        return "exit2", "" if one else f"an error of more than one line: {exc}"
    except TimeoutError:
        return "hang", "no answer within the limit"
    except Exception as exc:  # noqa: BLE001 - any other exception is the failure this test looks for
        return "exit3", f"{type(exc).__name__}: {exc}"
    finally:
        signal.alarm(0)
    return ("recomputed" if derived else "correct"), wrong


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, dict]:
    """A run with extrapolation, positions and tasks tables, its digest, and a cache shard holding it."""
    root = tmp_path_factory.mktemp("fuzz-files")
    results = root / "work"
    run = _run(results / "runs", "a0", 0, 10.0)
    _positions(run)
    _tasks_csv(run, 0.5)
    _curve(run)
    digest.refresh(run)
    clean = reported(results)
    digest.refresh(_run(results / "beside", "b0", 1, 14.0, pos=BESIDE))  # not in the cache: read by each case
    shutil.copytree(results, root / "base", symlinks=True)
    both = reported(results, beside=True)  # the undamaged report of both (its cache goes with ``work``)
    assert _same({k: v for k, v in both.items() if k not in ("beside", "left")}, clean) and not both["left"]
    return root, {**clean, "beside": both["beside"]}


def _shard(results: Path) -> Path:
    return next(s for s in (results / cache.CACHE).iterdir() if not s.name.startswith("."))


def run_target(target: str, root: Path, clean: dict) -> Counter:
    tally: Counter = Counter()
    failures = []
    os.environ["FUZZ_TARGET"] = target
    try:
        for kind in KINDS:
            seen: dict = {}  # the report alone comes before the report beside
            for command in ("runs", "report", "beside"):
                results = root / "work"
                shutil.rmtree(results, ignore_errors=True)
                shutil.copytree(root / "base", results, symlinks=True)  # the same paths, times kept: the cache holds it
                outside = root / "outside"
                outside.mkdir(exist_ok=True)
                path = (_shard(results) if target in SHARD_FILES else results / "runs" / "a0") / target
                damage(path, kind, outside)
                outcome, wrong = one_case(results, results / "runs" / "a0", command, clean, seen)
                tally[outcome] += 1
                if wrong:
                    failures.append(f"{target} {kind} {command}: {outcome}: {wrong}")
    finally:
        os.environ.pop("FUZZ_TARGET", None)
    assert not failures, "\n".join(failures)
    return tally


@pytest.mark.parametrize("target", one_fast(RUN_FILES + SHARD_FILES, fast="extrapolation.csv"))
def test_a_damaged_file_ends_in_the_right_numbers_or_one_line(base, target):
    root, clean = base
    tally = run_target(target, root, clean)
    print(f"fuzz files {target}: {dict(sorted(tally.items()))}")
