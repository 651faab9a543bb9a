"""`posx report` over real tiny runs, checked against numbers computed here from the CSVs."""

from __future__ import annotations

import csv
import json
import shutil
import signal
import statistics
import struct
import time
from collections import defaultdict
from pathlib import Path

import pytest

from posx.core.errors import PosxError
from posx.report.figures.output import DPI, parse_formats
from posx.report.summary import report
from posx.runs.records import Lineage, RunMeta

from conftest import REPO, run_posx
from helpers.cli import start_posx
from helpers.model import spec

pytestmark = pytest.mark.slow  # every test here runs the CLI in a subprocess or trains

EVAL = [
    "eval.factors=[1,2,4]",
    "eval.methods=[none,pi]",
    "eval.passkey.digits=3",
    "eval.passkey.trials=4",
    "eval.passkey.depth_buckets=2",
]


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory, tiny_args) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("report")
    for seed in (0, 1):
        run_posx("train", f"seed={seed}", f"name=rope-s{seed}", "eval.after_train=true", *EVAL, *tiny_args, cwd=work)
    runs = work / "results" / "runs"
    return {"work": work, "a": runs / "rope-s0", "b": runs / "rope-s1"}


def read(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_evaluation_writes_positions_that_average_back_to_the_table(two_seeds):
    run = two_seeds["a"]
    table = {(r["method"], r["factor"]): r for r in read(run / "extrapolation.csv")}
    sums, counts, spans = defaultdict(float), defaultdict(int), defaultdict(list)
    for r in read(run / "positions.csv"):
        key = (r["method"], r["factor"])
        sums[key] += float(r["nll"]) * int(r["tokens"])
        counts[key] += int(r["tokens"])
        spans[key].append((int(r["bucket_start"]), int(r["bucket_end"])))
    assert set(sums) == set(table)
    for key, row in table.items():
        assert counts[key] == int(row["tokens"])
        assert sums[key] / counts[key] == pytest.approx(float(row["nll"]), rel=1e-6)
        L = int(row["eval_context"])
        assert [p for s, e in sorted(spans[key]) for p in range(s, e)] == list(range(L))
        assert all(e - s == 4 for s, e in spans[key])  # default width T/8 with T=32
    pk = read(run / "passkey.csv")
    assert {r["variant"] for r in pk} == {"prompt", "copy"}
    assert len(pk) == 2 * 3 * 2 * 2  # methods x factors x variants x depth buckets
    assert all(int(r["trials"]) == 2 and r["status"] == "ok" for r in pk)


def test_report_mean_and_std_over_two_seeds(two_seeds, tmp_path):
    out = tmp_path / "rep"
    proc = run_posx("report", str(two_seeds["a"]), str(two_seeds["b"]), "--out", str(out), cwd=two_seeds["work"])
    ppl = defaultdict(list)
    for run in ("a", "b"):
        for r in read(two_seeds[run] / "extrapolation.csv"):
            if r["status"] == "ok":
                ppl[(r["method"], float(r["factor"]))].append(float(r["ppl"]))
    summary = {(r["method"], float(r["factor"])): r for r in read(out / "summary.csv")}
    assert set(summary) == set(ppl) and len(summary) == 2 * 3
    for key, values in ppl.items():
        row = summary[key]
        assert len(values) == 2 and int(row["n_seeds"]) == 2 and row["seeds"] == "0,1"
        assert row["encoding"] == "rope" and row["protocol"] == "nonoverlapping"
        assert float(row["ppl_mean"]) == pytest.approx(statistics.mean(values), rel=1e-9)
        assert float(row["ppl_std"]) == pytest.approx(statistics.stdev(values), rel=1e-9)
        one = statistics.mean(ppl[(key[0], 1.0)])
        assert float(row["ratio_to_1x"]) == pytest.approx(statistics.mean(values) / one, rel=1e-9)
    # passkey accuracy: per run over its depth buckets, then mean over runs
    acc = defaultdict(list)
    for run in ("a", "b"):
        hits, trials = defaultdict(float), defaultdict(int)
        for r in read(two_seeds[run] / "passkey.csv"):
            k = (r["method"], r["variant"], float(r["factor"]))
            hits[k] += float(r["accuracy"]) * int(r["trials"])
            trials[k] += int(r["trials"])
        for k in hits:
            acc[k].append(hits[k] / trials[k])
    pk = {(r["method"], r["variant"], float(r["factor"])): r for r in read(out / "passkey_summary.csv")}
    assert set(pk) == set(acc)
    for k, values in acc.items():
        assert float(pk[k]["accuracy_mean"]) == pytest.approx(statistics.mean(values), abs=1e-12)
    for name in ("ppl_vs_length.png", "positions.png", "passkey.png"):
        width, height = png_size(out / name)
        inches = width / DPI, height / DPI  # a sensible page size, whatever the resolution
        assert 3.5 <= inches[0] <= 27 and 2.5 <= inches[1] <= 18, (name, width, height)
    md = (out / "summary.md").read_text()
    assert "± " in md and "ratio_to_1x" in md
    assert "mean ± std" in proc.stdout and read(out / "missing.csv") == []


def test_report_with_no_path_reads_every_run_under_the_results_dir(two_seeds, tmp_path):
    out = tmp_path / "rep"
    run_posx("report", "--out", str(out), "--format", "png", cwd=two_seeds["work"])
    assert {r["n_seeds"] for r in read(out / "summary.csv")} == {"2"}  # both seeds' runs, pooled
    proc = run_posx("report", "--results-dir", str(tmp_path / "nowhere"), cwd=two_seeds["work"], check=False)
    assert proc.returncode == 2 and "nowhere does not exist" in proc.stderr and "Traceback" not in proc.stderr


def test_a_run_missing_a_table_is_listed_not_dropped(two_seeds, tmp_path):
    work = two_seeds["work"]
    sweep = tmp_path / "sweep"
    for name, drop in (
        ("0_rope_s0", ["positions.csv", "passkey.csv"]),
        ("1_rope_s1", ["extrapolation.csv", "positions.csv"]),
    ):
        shutil.copytree(two_seeds["a" if name.startswith("0") else "b"], sweep / name)
        for table in drop:
            (sweep / name / table).unlink()
    proc = run_posx("report", str(sweep), cwd=work)  # a sweep directory, default output dir
    reports = sorted((work / "results" / "reports").iterdir())
    out = reports[-1]
    missing = {(Path(r["run"]).name, r["missing"]) for r in read(out / "missing.csv")}
    assert missing == {
        ("0_rope_s0", "positions.csv"),
        ("0_rope_s0", "passkey.csv"),
        ("1_rope_s1", "extrapolation.csv"),
        ("1_rope_s1", "positions.csv"),
    }
    assert "missing" in proc.stdout and "1_rope_s1" in proc.stdout.replace("\n", "")
    assert all(int(r["n_seeds"]) == 1 for r in read(out / "summary.csv"))
    assert "positions: not drawn" in proc.stdout
    assert not (out / "positions.png").exists()  # no run has positions.csv
    for figure in ("ppl_vs_length.png", "passkey.png"):
        assert (out / figure).read_bytes().startswith(b"\x89PNG\r\n\x1a\n"), figure


def test_a_table_the_evaluation_does_not_write_is_not_missing(two_seeds, tmp_path):
    work, run = two_seeds["work"], tmp_path / "runs" / "quiet"
    shutil.copytree(two_seeds["a"], run)
    run_posx("eval-extrapolate", str(run), *EVAL, "eval.passkey.enabled=false", "eval.tasks=[]", cwd=work)
    assert not (run / "passkey.csv").exists()
    for evaluations, missing in (("current", []), ("all", [])):  # "all" still holds the passkey evaluation
        out = tmp_path / f"rep-{evaluations}"
        run_posx("report", str(run), "--out", str(out), "--evaluations", evaluations, "--format", "png", cwd=work)
        assert [r["missing"] for r in read(out / "missing.csv")] == missing, evaluations
    (run / "eval.yaml").unlink()  # no record of the settings: the table is expected again
    run_posx("report", str(run), "--out", str(tmp_path / "rep-legacy"), "--format", "png", cwd=work)
    assert [r["missing"] for r in read(tmp_path / "rep-legacy" / "missing.csv")] == ["passkey.csv"]


def test_a_report_is_never_overwritten_and_bad_paths_are_one_line(two_seeds, tmp_path):
    work = two_seeds["work"]
    out = tmp_path / "taken"
    out.mkdir()
    (out / "summary.csv").write_text("keep me\n")
    for args, needle in (
        ([str(two_seeds["a"]), "--out", str(out)], "already exists"),
        ([str(tmp_path / "nowhere")], "does not exist"),
        ([str(tmp_path)], "neither a run directory"),
    ):
        proc = run_posx("report", *args, cwd=work, check=False)
        assert proc.returncode != 0 and needle in proc.stderr and "Traceback" not in proc.stderr
    assert (out / "summary.csv").read_text() == "keep me\n"


def _fake_run(root: Path, name: str, rows: list[dict], seed: int, parent: str | None = None) -> Path:
    """A run directory holding only what `posx report` reads: tables, config, model.json."""
    run = root / name
    run.mkdir()
    (run / "config.yaml").write_text(f"seed: {seed}\n")
    lineage = (
        Lineage(parent=parent, parent_path="", method="yarn", factor=4.0, steps=1, train_context=128, parent_step=1)
        if parent
        else None
    )
    meta = RunMeta(spec(), train_context=512 if parent else 128, data={}, step=1, extended_from=lineage)
    (run / "model.json").write_text(json.dumps(meta.to_dict()))
    with open(run / "extrapolation.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return run


def test_report_groups_extended_runs_by_parent_and_stage(tmp_path):
    def row(method, factor, ppl, stage):
        return {
            "run": "r",
            "pos": "rope",
            "train_context": 128,
            "eval_context": int(128 * factor),
            "factor": factor,
            "method": method,
            "ppl": ppl,
            "status": "ok",
            "protocol": "nonoverlapping",
            "stage": stage,
        }

    runs = tmp_path / "runs"
    runs.mkdir()
    _fake_run(runs, "base", [row("yarn", 1.0, 4.0, "zero-shot"), row("yarn", 4.0, 5.0, "zero-shot")], 0)
    for i, (zs, ext) in enumerate([(5.0, 3.0), (7.0, 4.0)]):
        _fake_run(
            runs,
            f"base-yarn-x4-{i}",
            [
                row("yarn", 1.0, 4.0, "zero-shot"),
                row("yarn", 4.0, zs, "zero-shot"),
                row("yarn", 1.0, 3.0, "extended"),
                row("yarn", 4.0, ext, "extended"),
            ],
            seed=i,
            parent="base",
        )
    out = report([runs], out=tmp_path / "rep")
    summary = {(r["parent"], r["method"], float(r["factor"])): r for r in read(out / "summary.csv")}
    # the plain run stands alone; the two extensions of `base` (a RoPE run at T=128) group
    # together, per stage, as two replicates: extension seeds 0 and 1 of parent seed 0
    assert float(summary[("", "yarn", 4.0)]["ppl_mean"]) == 5.0
    ext = summary[("rope-T128", "yarn (extended)", 4.0)]
    assert float(ext["ppl_mean"]) == pytest.approx(statistics.mean([3.0, 4.0]))
    assert float(ext["ppl_std"]) == pytest.approx(statistics.stdev([3.0, 4.0]))
    assert int(ext["n_seeds"]) == 2
    assert float(summary[("rope-T128", "yarn (zero-shot)", 4.0)]["ppl_mean"]) == pytest.approx(6.0)
    assert float(ext["ratio_to_1x"]) == pytest.approx(3.5 / 3.0)


def test_format_none_writes_the_same_tables_and_no_figure(tmp_path):
    """``--format none``: the tables alone, equal to those of a report that draws, and summary.md says so."""
    row = {"run": "r", "pos": "rope", "train_context": 128, "method": "none", "status": "ok",
           "protocol": "nonoverlapping", "stage": "zero-shot"}  # fmt: skip
    runs = tmp_path / "runs"
    runs.mkdir()
    for seed in range(2):
        rows = [{**row, "eval_context": int(128 * f), "factor": f, "ppl": 4.0 + f + seed} for f in (1.0, 2.0)]
        _fake_run(runs, f"rope-s{seed}", rows, seed)
    drawn = report([runs], out=tmp_path / "drawn", formats="png")
    bare = report([runs], out=tmp_path / "bare", formats="none")
    assert list(drawn.glob("*.png")) and not list(bare.glob("*.png")) and not list(bare.glob("*.pdf"))
    assert read(bare / "summary.csv") == read(drawn / "summary.csv")
    assert "no figures: `--format none`" in (bare / "summary.md").read_text()
    for bad in ("none,png", "svg"):
        with pytest.raises(PosxError, match="or none"):
            parse_formats(bad)


FIXTURE = REPO / "tests" / "fixtures" / "premove"
REPORT_FILES = {"summary.csv", "summary.md", "missing.csv"}


def _staged(tmp_path: Path, out: str, name: str) -> bool:
    """Whether the staging directory of report ``out`` holds ``name`` (or exists, for ``""``)."""
    return any((staging / name).exists() for staging in tmp_path.glob(f".{out}.*.tmp"))


@pytest.mark.parametrize("cue", ["", "summary.md"], ids=["just-staged", "tables-written"])
def test_a_killed_report_leaves_no_partial_report(tmp_path, cue):
    """SIGKILL a report once its staging directory holds ``cue`` (the figures come after it):
    nothing is published, only a hidden staging directory stays, and the same --out works."""
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    out = tmp_path / "rep"
    proc = start_posx("report", "runs/old-rope", "runs/old-rope-yarn", "--out", str(out), cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not _staged(tmp_path, out.name, cue) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    assert proc.poll() is None, f"the report ended before its staging directory held {cue!r}"
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists()  # killed before the publishing rename
    stale = [p.name for p in tmp_path.iterdir() if p.name.startswith(f".{out.name}")]
    assert stale and all(name.endswith(".tmp") for name in stale), stale
    run_posx("report", "runs/old-rope", "--out", str(out), cwd=tmp_path)
    assert REPORT_FILES <= {p.name for p in out.iterdir()}
    assert "old-rope" in (out / "summary.md").read_text(encoding="utf-8")
