"""What the reference study needs of `posx report`: every kept evaluation read (--evaluations
all), learned absolute's ways past its table as methods, extensions of seeds pooled with an
extension table and curve (fake run directories; no model is trained)."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from posx.core.errors import PosxError
from posx.report.summary import report
from posx.runs.records import Lineage, RunMeta

from helpers.model import spec

T = 32


def _table(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _rows(name, pos, ppl: dict, protocol="nonoverlapping", beyond="none", stage="zero-shot", method="none"):
    return [
        {
            "run": name,
            "pos": pos,
            "train_context": T,
            "eval_context": int(T * f),
            "factor": float(f),
            "method": method,
            "ppl": p,
            "status": "ok",
            "tokens": 512,
            "protocol": protocol,
            "stage": stage,
            "absolute_beyond": beyond,
        }
        for f, p in ppl.items()
    ]


def _run(
    root: Path,
    name: str,
    seed: int,
    pos: str = "rope",
    sha: str = "w0",
    lineage: Lineage | None = None,
    metrics: str = "step,train_loss,val_loss,lr,tokens_per_s\n1,5.0,,1,1\n",
) -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "name": name, "train": {"context_length": T}}))
    context = T * (4 if lineage else 1)
    meta = RunMeta(
        spec(pos=pos, max_positions=context),
        train_context=context,
        data={"sha256": "ab" * 32},
        step=6,
        weights_sha256=sha,
        extended_from=lineage,
    )
    (run / "model.json").write_text(json.dumps(meta.to_dict()))
    (run / "metrics.csv").write_text(metrics)
    return run


def _evaluate(run: Path, settings: dict, rows: list[dict], sha: str = "w0", when: float | None = None) -> None:
    """One kept evaluation, as posx.eval.history writes it, made the current one."""
    eid = f"e{abs(hash(json.dumps(settings, sort_keys=True))) % 10**8:08d}"
    folder = run / "eval" / eid
    folder.mkdir(parents=True)
    _table(folder / "extrapolation.csv", rows)
    (folder / "eval.yaml").write_text(
        yaml.safe_dump({"id": eid, "settings": settings, "device": "cpu", "weights_sha256": sha})
    )
    for name in ("extrapolation.csv", "eval.yaml"):
        (run / name).write_bytes((folder / name).read_bytes())
    if when is not None:
        os.utime(folder / "extrapolation.csv", (when, when))


def _summary(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "summary.csv", keep_default_na=False, na_values=[""])


@pytest.mark.slow
def test_every_kept_evaluation_is_read_and_absolute_ways_past_the_table_are_methods(tmp_path):
    values = {}
    for seed in range(3):
        run = _run(tmp_path / "runs", f"abs-s{seed}", seed, pos="absolute")
        for i, beyond in enumerate(("none", "clamp", "interpolate")):
            ppl = {1: 4.0 + seed, 2: 10.0 * (i + 1) + seed}
            values[(beyond, seed)] = ppl
            _evaluate(
                run, {"absolute_beyond": beyond}, _rows(run.name, "absolute", ppl, beyond=beyond), when=1_000_000 + i
            )
        _evaluate(
            run,
            {"protocol": "sliding"},
            _rows(run.name, "absolute", {1: 3.0, 2: 3.5}, protocol="sliding"),
            when=1_000_010,
        )
    out = report([tmp_path / "runs"], out=tmp_path / "all", evaluations="all")
    s = _summary(out)
    got = {(r.method, r.protocol, r.factor): r for r in s.itertuples()}
    for beyond in ("clamp", "interpolate"):
        expect = [values[(beyond, seed)][2] for seed in range(3)]
        row = got[(beyond, "nonoverlapping", 2.0)]
        assert row.n_seeds == 3 and row.ppl_mean == pytest.approx(np.mean(expect))
        assert row.ppl_std == pytest.approx(np.std(expect, ddof=1))
    assert got[("none", "sliding", 2.0)].ppl_mean == pytest.approx(3.5)
    assert (out / "encodings.png").stat().st_size > 10_000
    # the default reads only each run's current (last) evaluation: the sliding one
    current = _summary(report([tmp_path / "runs"], out=tmp_path / "current"))
    assert set(current["protocol"]) == {"sliding"} and set(current["method"]) == {"none"}
    with pytest.raises(PosxError, match="--evaluations"):
        report([tmp_path / "runs"], out=tmp_path / "bad", evaluations="some")


def test_the_newest_evaluation_wins_a_cell_and_stale_weights_are_left_out(tmp_path, capsys):
    run = _run(tmp_path / "runs", "r", 0)
    _evaluate(run, {"tokens": 512}, _rows("r", "rope", {1: 5.0, 2: 9.0}), when=1_000_000)
    _evaluate(run, {"tokens": 1024}, _rows("r", "rope", {1: 4.0, 2: 8.0}), when=1_000_100)
    _evaluate(run, {"tokens": 2048}, _rows("r", "rope", {1: 1.0, 2: 1.0}), sha="other weights", when=1_000_200)
    s = _summary(report([run], out=tmp_path / "rep", evaluations="all"))
    assert dict(zip(s["factor"], s["ppl_mean"])) == {1.0: 4.0, 2.0: 8.0}
    assert "scored by more than one evaluation" in capsys.readouterr().out


def _extension_family(root: Path, zero: dict, extended: dict, val: dict) -> None:
    """Three parents (seeds 0-2) and, per method, one extension of each (all with extension seed 0)."""
    for seed in range(3):
        parent = _run(root, f"rope-s{seed}", seed)
        _evaluate(parent, {"m": 1}, _rows(parent.name, "rope", {1: 4.0 + 0.1 * seed, 4: 6.0}))
        for method in zero:
            lineage = Lineage(
                parent=parent.name,
                parent_path=str(parent),
                method=method,
                factor=4.0,
                steps=40,
                train_context=T,
                parent_step=6,
            )
            curve = "".join(f"{step},3.0,{math.log(v[seed])},1,1\n" for step, v in val[method].items())
            child = _run(
                root,
                f"rope-s{seed}-{method}",
                0,
                lineage=lineage,
                metrics="step,train_loss,val_loss,lr,tokens_per_s\n" + curve,
            )
            rows = _rows(child.name, "rope", {4: zero[method][seed]}, method=method) + _rows(
                child.name, "rope", {1: 4.5, 4: extended[method][seed], 8: 7.0}, stage="extended", method=method
            )
            _evaluate(child, {"m": 2}, rows)


@pytest.mark.slow
def test_extensions_of_seeds_pool_into_an_extension_table_and_curve(tmp_path):
    zero = {"pi": [12.0, 13.0, 14.0], "yarn": [5.0, 5.5, 6.0]}
    extended = {"pi": [4.4, 4.5, 4.6], "yarn": [3.7, 3.8, 3.9]}
    val = {m: {20: [6.0, 6.2, 6.4], 40: [4.0, 4.2, 4.4]} for m in zero}
    _extension_family(tmp_path / "runs", zero, extended, val)
    out = report([tmp_path / "runs"], out=tmp_path / "rep", evaluations="all")
    ext = pd.read_csv(out / "extension.csv")
    assert set(ext["method"]) == {"pi", "yarn"} and set(ext["parent"]) == {"rope-T32"}
    for method in zero:
        row = ext[ext["method"] == method].iloc[0]
        assert row["n_seeds"] == 3 and row["factor"] == 4.0
        assert row["zero_shot"] == pytest.approx(np.mean(zero[method]))
        assert row["extended_std"] == pytest.approx(np.std(extended[method], ddof=1))
        assert row["extended_2x_new"] == pytest.approx(7.0)
    groups = pd.read_csv(out / "groups.csv")  # one extension seed (0) of three parent seeds: three replicates
    assert list(groups[groups["parent"] == "rope-T32"]["runs"]) == [3, 3]
    assert pd.read_csv(out / "duplicates.csv").empty
    assert (out / "extension.png").stat().st_size > 10_000
    assert "## Extension" in (out / "summary.md").read_text()


@pytest.mark.slow
def test_two_extensions_of_one_parent_with_one_seed_are_duplicates(tmp_path):
    _extension_family(tmp_path / "runs", {"pi": [12.0] * 3}, {"pi": [4.0] * 3}, {"pi": {20: [5.0] * 3}})
    twin = tmp_path / "runs" / "rope-s1-pi-again"
    twin.mkdir()
    for item in (tmp_path / "runs" / "rope-s1-pi").iterdir():
        (shutil.copytree if item.is_dir() else shutil.copy2)(item, twin / item.name)
    out = report([tmp_path / "runs"], out=tmp_path / "rep", evaluations="all")
    dup = pd.read_csv(out / "duplicates.csv")
    assert len(dup) == 1 and {Path(dup["run"][0]).name, Path(dup["counted"][0]).name} == {
        "rope-s1-pi",
        "rope-s1-pi-again",
    }
    assert pd.read_csv(out / "extension.csv")["n_seeds"].tolist() == [3]


@pytest.mark.slow
def test_an_extension_whose_parent_is_gone_keeps_the_parent_name(tmp_path):
    _extension_family(tmp_path / "runs", {"pi": [12.0] * 3}, {"pi": [4.0] * 3}, {"pi": {20: [5.0] * 3}})
    for seed in range(3):
        for name in os.listdir(tmp_path / "runs" / f"rope-s{seed}"):
            p = tmp_path / "runs" / f"rope-s{seed}" / name
            if p.is_file():
                p.unlink()
    out = report([tmp_path / "runs"], out=tmp_path / "rep", evaluations="all")
    assert set(pd.read_csv(out / "extension.csv")["parent"]) == {"rope-s0", "rope-s1", "rope-s2"}
