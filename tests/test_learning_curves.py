"""The report's learning curves: task_curve.csv of each counted run, gathered per group."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from posx.core.errors import PosxError
from posx.report.figures import learning
from posx.train import taskcurve


def run(tmp_path, name: str, group: str, pos: str, accuracies, chance: dict | None = None):
    path = tmp_path / name
    path.mkdir()
    rows = [
        {"step": s, "tokens": 1000 * s, "task": t, "trials": 8, "accuracy": a, "token_accuracy": a, "answer_nll": 1.0,
         **({"chance": chance[t]} if chance else {})}
        for (s, t), a in accuracies.items()
    ]  # fmt: skip
    pd.DataFrame(rows).to_csv(path / "task_curve.csv", index=False)
    return SimpleNamespace(path=path, group=group, member=SimpleNamespace(identity={"pos.name": pos}))


def test_curves_are_the_mean_lowest_and_highest_over_a_groups_runs(tmp_path):
    runs = [
        run(tmp_path, "a", "g", "rope", {(1, "mqar"): 0.25, (2, "mqar"): 0.5}),
        run(tmp_path, "b", "g", "rope", {(1, "mqar"): 0.75, (2, "mqar"): 1.0}),
        run(tmp_path, "c", "g", "nope", {(1, "mqar"): 0.0, (1, "copy"): 0.5}),
        SimpleNamespace(path=tmp_path, group="g", member=None),  # no task_curve.csv: not drawn
    ]
    curves = learning.gather(runs)[0].set_index(["encoding", "task", "tokens"])
    assert curves.loc[("rope", "mqar", 1000), ["accuracy_mean", "accuracy_min", "accuracy_max", "runs"]].tolist() == [
        0.5,
        0.25,
        0.75,
        2,
    ]
    assert curves.loc[("rope", "mqar", 2000), "accuracy_mean"] == 0.75 and len(curves) == 4
    drawn = learning.draw(runs, tmp_path, formats=("png",))
    assert drawn["task_learning.png"].is_file() and (tmp_path / "task_learning.csv").is_file()


def test_each_panel_draws_the_tasks_chance_level_once_per_distinct_level(tmp_path):
    runs = [
        run(tmp_path, "a", "g", "rope", {(1, "mqar"): 0.25, (2, "mqar"): 0.5}, {"mqar": 0.01}),
        run(tmp_path, "b", "h", "rope", {(1, "mqar"): 0.5, (1, "copy"): 0.5}, {"mqar": 0.04, "copy": 0.2}),
        run(tmp_path, "c", "i", "nope", {(1, "copy"): 0.5}),  # a curve from before chance was kept: no level
    ]
    curves, identities = learning.gather(runs)
    assert curves.set_index(["group", "task", "tokens"]).loc[("g", "mqar", 2000), "chance"] == 0.01
    fig = learning.figure(curves, identities)
    dotted = {ax.get_title(): sorted(ln.get_ydata()[0] for ln in ax.get_lines() if ln.get_linestyle() == ":")
              for ax in fig.axes}  # fmt: skip
    assert dotted == {"mqar": [0.01, 0.04], "copy": [0.2]}
    labels = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert labels.count("chance level") == 2  # one entry per panel


def test_no_curve_anywhere_draws_nothing(tmp_path):
    assert learning.draw([], tmp_path, formats=("png",)) == {"task_learning.png": None}
    assert not (tmp_path / "task_learning.csv").exists()


def test_each_panel_names_what_differs_and_no_two_lines_look_alike(tmp_path):
    def ident(pos, lr):
        return {"pos.name": pos, "train.lr": lr, "model.d_model": 64, "seed": 0}

    runs = []
    for i, (group, pos, lr) in enumerate([("-", "rope", 1e-3), ("-", "alibi", 1e-3), ("lr", "rope", 3e-3)]):
        r = run(tmp_path, f"r{i}", group, pos, {(1, "mqar"): 0.1 * i, (2, "mqar"): 0.2 * i})
        r.member.identity = ident(pos, lr)
        runs.append(r)
    curves, identities = learning.gather(runs)
    assert len(curves) == 6  # rope's "-" and alibi's "-" are two lines, not one pooled
    names = learning.labels([("-", "rope"), ("-", "alibi"), ("lr", "rope")], identities)
    assert names == {
        ("-", "rope"): "rope · train.lr=0.001",
        ("-", "alibi"): "alibi · train.lr=0.001",
        ("lr", "rope"): "rope · train.lr=0.003",
    }
    (ax,) = learning.figure(curves, identities).axes[:1]
    drawn = ax.get_lines()
    assert sorted(line.get_label() for line in drawn) == sorted(names.values())
    assert len({str(line.get_color()) for line in drawn}) == 3


CURVE_DAMAGE = {
    "a last row cut inside a number": lambda t: t[:-3],
    "an accuracy of 5.0": lambda t: t.replace(",0.25,", ",5.0,", 1),
    "a negative count": lambda t: t.replace(",8,", ",-8,", 1),
    "a count that is not whole": lambda t: t.replace(",8,", ",8.5,", 1),
    "a step going back": lambda t: t.replace("2,2000,", "0,2000,", 1),
    "an empty file": lambda t: "",
    "a removed column": lambda t: (
        "\n".join(",".join(r.split(",")[:4] + r.split(",")[5:]) for r in t.splitlines()) + "\n"
    ),
    "a non-numeric cell": lambda t: t.replace(",1000,", ",lots,", 1),
    "an empty score with trials": lambda t: t.replace(",0.25,", ",,", 1),
    "a column named twice": lambda t: t.replace("answer_nll", "accuracy", 1),
    "a chance level of 2.0": lambda t: t.replace(",0.5\n", ",2.0\n", 1),
}


@pytest.mark.parametrize("kind", list(CURVE_DAMAGE))
def test_a_damaged_curve_is_one_line_naming_the_file_in_the_report_and_on_resume(tmp_path, kind):
    runs = [run(tmp_path, "a", "g", "rope", {(1, "mqar"): 0.25, (2, "mqar"): 0.5}, {"mqar": 0.5})]
    path = tmp_path / "a" / "task_curve.csv"
    path.write_text(CURVE_DAMAGE[kind](path.read_text(encoding="utf-8")), encoding="utf-8")
    for read in (lambda: learning.gather(runs), lambda: taskcurve.read(tmp_path / "a", 1)):
        with pytest.raises(PosxError) as info:
            read()
        message = str(info.value)
        assert "\n" not in message and str(path) in message and "move task_curve.csv aside" in message


def test_resume_keeps_the_curve_up_to_the_checkpoint_with_its_types(tmp_path):
    run(tmp_path, "a", "g", "rope", {(1, "mqar"): 0.25, (1, "copy"): 0.0, (2, "mqar"): 0.5, (3, "mqar"): 0.75})
    rows = taskcurve.read(tmp_path / "a", 2)
    assert [(r["step"], r["task"]) for r in rows] == [(1, "mqar"), (1, "copy"), (2, "mqar")]
    assert all(type(r["step"]) is int and type(r["trials"]) is int for r in rows)
    assert taskcurve.read(tmp_path / "nothing") == []


def test_a_task_with_no_trial_keeps_its_empty_scores_and_draws_no_point(tmp_path):
    rows = [{"step": 1, "tokens": 10, "task": "copy", "trials": 0, "accuracy": float("nan"),
             "token_accuracy": float("nan"), "answer_nll": float("nan")}]  # fmt: skip
    (tmp_path / "a").mkdir()
    taskcurve.write(tmp_path / "a", rows)
    assert taskcurve.read(tmp_path / "a")[0]["trials"] == 0
    curve = SimpleNamespace(path=tmp_path / "a", group="g", member=None)
    assert learning.gather([curve])[0].empty
