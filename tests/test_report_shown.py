"""Which groups a report draws when it has more than a figure shows, the compact summary.md
tables, and work that follows what is drawn, not the number of groups (calls counted; nothing
is timed, nothing is trained)."""

from __future__ import annotations

import pandas as pd
import pytest

from posx.core.errors import PosxError
from posx.report.figures import drawing, output, ppl_figures, shown, task_figures
from posx.report.figures.drawing import Drawing
from posx.report.figures.facets import facets_of
from posx.report.store.groups import Grouping
from posx.report.tables import writeup

FACTORS = (1.0, 2.0, 4.0)


def summary_of(groups: int, worst_at_4x: dict | None = None) -> pd.DataFrame:
    """Summary rows of ``groups`` one-seed RoPE groups g0, g1, ... under methods none and pi:
    perplexity 10 + k at 1x, and at 4x ``worst_at_4x[k]`` where given, else 100 + k (pi: 1 less)."""
    rows = []
    for k in range(groups):
        for method, less in (("none", 0.0), ("pi", 1.0)):
            for f in FACTORS:
                ppl = (worst_at_4x or {}).get(k, 100.0 + k) - less if f == 4.0 else 10.0 + k
                rows.append({"group": f"g{k}", "parent": "", "encoding": "rope", "method": method,
                             "protocol": "nonoverlapping", "factor": f, "ppl_mean": ppl, "ppl_std": float("nan"),
                             "ppl_lo": ppl - 1, "ppl_hi": ppl + 1, "n_seeds": 1, "seeds": "0",
                             "train_context": "32", "eval_context": str(int(32 * f)), "status": "ok"})  # fmt: skip
    return pd.DataFrame(rows)


def test_groups_rank_by_their_lowest_perplexity_at_the_longest_factor():
    summary = summary_of(5, worst_at_4x={3: 50.0, 1: 70.0})
    unscored = summary[summary["group"] == "g4"].assign(n_seeds=0, ppl_mean=float("nan"))
    shorter = summary[(summary["group"] == "g0") & (summary["factor"] < 4.0)].assign(group="g5")
    table = pd.concat([summary[summary["group"] != "g4"], unscored, shorter])
    ranked = shown.rank(table)
    assert list(ranked["group"]) == ["g3", "g1", "g0", "g2", "g5", "g4"]  # g5 reaches 2x only; g4 never scored
    assert list(ranked["rank"]) == [1, 2, 3, 4, 5, 6]
    first = ranked.iloc[0]
    assert (first["factor"], first["best_ppl"], first["best_method"]) == (4.0, 49.0, "pi")  # pi is 1 lower
    assert ranked.iloc[4]["factor"] == 2.0 and pd.isna(ranked.iloc[5]["best_ppl"])


def test_a_report_with_few_groups_draws_them_all_and_says_nothing():
    ranked = shown.rank(summary_of(shown.TOP))
    chosen = shown.choose(ranked, shown.TOP, asked=False)
    assert chosen.lines is None and chosen.note == ""
    table = summary_of(3)
    assert chosen.rows(table) is table


def test_past_top_the_figures_draw_the_best_and_say_how_they_were_chosen():
    summary = summary_of(40, worst_at_4x={k: 200.0 - k for k in range(40)})  # g39 is best at 4x
    chosen = shown.choose(shown.rank(summary), 3, asked=True)
    assert chosen.lines == {("g39", "", "rope"), ("g38", "", "rope"), ("g37", "", "rope")}
    assert chosen.note.startswith("**40 groups: the figures draw 3 of them (--top 3)**")
    assert "4x" in chosen.note and "--top N" in chosen.note and "--where KEY=VALUE" in chosen.note
    assert set(chosen.rows(summary)["group"]) == {"g39", "g38", "g37"}
    passkey = pd.DataFrame({"group": ["g39", "g0"], "encoding": ["rope", "rope"], "factor": [1.0, 1.0]})
    assert list(chosen.rows(passkey)["group"]) == ["g39"]  # a table without a parent column
    default = shown.choose(shown.rank(summary), shown.parse_top(None), asked=False)
    assert len(default.lines) == shown.TOP and "the default" in default.note


@pytest.mark.parametrize("text", ["0", "-3", "2.5", "ten", "", "1e3"])
def test_a_bad_top_is_refused_in_one_line(text):
    with pytest.raises(PosxError) as err:
        shown.parse_top(text)
    assert "\n" not in str(err.value) and "--top" in str(err.value)


def test_top_takes_a_number_or_all():
    assert shown.parse_top("7") == 7 and shown.parse_top(" ALL ") is None and shown.parse_top(None) == shown.TOP


def test_the_summary_tables_are_a_pivot_per_method_with_every_factor():
    summary = summary_of(2)
    lines = writeup.pivot(summary)
    assert lines[0] == "### method none, nonoverlapping windows" and "### method pi, nonoverlapping windows" in lines
    header, _, *rows = lines[2].splitlines()
    assert header == "| encoding | group | 1x | 2x | 4x |"
    assert rows[0].startswith("| rope | g0 | 10.000 [9.000, 11.000] |") and rows[0].endswith(
        "| 100.000 [99.000, 101.000] |"
    )


def _grouping(groups: int) -> Grouping:
    listed = [{"group": f"n{k}", "encoding": "rope", "parent": "", "label": f"g{k}", "runs": 1, "seeds": "0",
               "run_dirs": f"r{k}"} for k in range(groups)]  # fmt: skip
    identities = {(f"g{k}", "", "rope"): {"pos.name": "rope", "T": "32", "train.lr": str(k)} for k in range(groups)}
    return Grouping({}, listed, [], ["train.lr"], identities)


def _markdown(groups: int, top: int | None) -> str:
    summary = summary_of(groups)
    chosen = shown.choose(shown.rank(summary), top, asked=False)
    empty = pd.DataFrame()
    tables = {"passkey": empty, "missing": empty, "damaged": empty, "extension": None}
    return writeup.markdown(summary, tables, [], _grouping(groups), {}, chosen)


def test_summary_md_stays_the_same_length_however_many_groups_there_are(monkeypatch):
    calls = []
    monkeypatch.setattr(writeup, "ppl_cell", lambda row, digits=3: calls.append(row["group"]) or "x")
    small, large = _markdown(20, 5), _markdown(2000, 5)
    assert len(large.splitlines()) == len(small.splitlines())
    assert len(calls) == 2 * 5 * 2 * len(FACTORS)  # the cells of the groups shown, once each, in both reports
    assert "**2000 groups: the figures draw 5 of them" in large.splitlines()[2]
    assert "groups.csv lists all 2000" in large


def test_figures_are_built_for_the_groups_drawn_only(monkeypatch, tmp_path):
    """The figures of a report of 400 groups cost what those of 4 do, 3 drawn of each (fewer than
    the default --top, to draw less): the same files saved, and the task figure splits its rows
    once per figure, not once per line."""
    saved, splits = [], []
    monkeypatch.setattr(output, "save", lambda fig, path, formats=output.FORMATS: saved.append(path.name) or path)
    original = task_figures._by_line
    monkeypatch.setattr(task_figures, "_by_line", lambda data: splits.append(len(data)) or original(data))
    counts = []
    for groups in (4, 400):
        summary = summary_of(groups)
        chosen = shown.choose(shown.rank(summary), 3, asked=False)
        tasks = summary.assign(
            task="niah", depth_lo=0.0, trials=4, accuracy=0.5, answer_nll=2.0, chance=1.0, run_dir=summary["group"]
        )
        tables = {"summary": summary, "positions": pd.DataFrame(), "longest_factor": None, "passkey": pd.DataFrame(),
                  "training": pd.DataFrame(), "tasks": tasks}  # fmt: skip
        drawn_tables = {k: chosen.rows(v) if isinstance(v, pd.DataFrame) else v for k, v in tables.items()}
        lines = {k: v for k, v in _grouping(groups).identities.items() if k in chosen.lines}
        before = len(saved)
        drawing.draw_all(drawn_tables, tmp_path, Drawing(facets_of(lines), ("png",)), workers=1)
        counts.append(sorted(saved[before:]))
    assert counts[0] == counts[1] and "ppl_vs_length.png" in counts[0]
    assert len(splits) == 2  # one split of the task rows per report


def test_a_figure_of_a_choice_of_groups_never_calls_itself_all_groups():
    summary = summary_of(30)
    chosen = shown.choose(shown.rank(summary), 4, asked=True)
    lines = {k: v for k, v in _grouping(30).identities.items() if k in chosen.lines}
    facets = shown.titled(facets_of(lines), chosen)
    figures = ppl_figures.ppl_figures(chosen.rows(summary), facets)
    titles = [ax.get_title() for _, fig in figures for ax in fig.axes if ax.get_title()]
    assert titles and all("the 4 best of 30 groups" in t and "all groups" not in t for t in titles)
    assert shown.titled(facets_of(lines), shown.choose(shown.rank(summary), None, asked=True)).of == facets_of(lines).of
