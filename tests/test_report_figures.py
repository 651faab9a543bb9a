"""Report figures that cannot mislead: unlike groups never share a panel or a median, every line
says what it is and looks unlike every other line of its panel, offsets stay near their factor,
bands say what they are (matplotlib figure objects inspected; nothing is trained)."""

from __future__ import annotations

import io
import math
import warnings

import numpy as np
import pandas as pd
import pytest

from posx.report.figures import output, palette, plots, position_figures, task_figures
from posx.report.figures.drawing import Drawing, draw_all
from posx.report.figures.facets import MAX_LINES, MAX_PANELS, Facets, facets_of, file_names
from posx.report.figures.looks import looks
from posx.report.figures.ppl_figures import encodings_figures, median_figure, ppl_figures

FACTORS = (1.0, 2.0, 4.0, 8.0)
BASE = {"model.n_layer": "2", "model.n_head": "4", "model.d_model": "64", "model.block": "gpt2", "steps": "40"}


def ident(enc: str, **changed) -> dict:
    return {"pos.name": enc, "T": "64", "data.tokenizer": "byte", **BASE, **changed}


def frame(lines: list[tuple], seeds: dict | None = None) -> pd.DataFrame:
    """Summary rows: one per (group, encoding, method) line and factor, perplexity 10 x factor
    (every line coincides: the hardest case for telling lines apart)."""
    rows = []
    for group, enc, method in lines:
        n = (seeds or {}).get(group, 1)
        for f in FACTORS:
            ppl = 10.0 * f
            rows.append({"group": group, "parent": "", "encoding": enc, "method": method, "protocol": "nonoverlapping",
                         "factor": f, "ppl_mean": ppl, "ppl_lo": ppl * 0.9, "ppl_hi": ppl * 1.1, "n_seeds": n,
                         "train_context": "64", "eval_context": str(int(64 * f)), "status": "ok"})  # fmt: skip
    return pd.DataFrame(rows)


def mixed() -> tuple[pd.DataFrame, Facets]:
    """The folder of the issue: two T=64 seeds of RoPE, one ALiBi, one T=128 and one llama-block run."""
    identities = {
        ("pos.name=rope, T=64, model.block=gpt2", "", "rope"): ident("rope"),
        ("-", "", "alibi"): ident("alibi"),
        ("T=128", "", "rope"): ident("rope", T="128"),
        ("model.block=llama", "", "rope"): ident("rope", **{"model.block": "llama"}),
    }
    lines = [(g, e, m) for (g, _, e) in identities for m in (("none",) if e == "alibi" else ("none", "pi", "yarn"))]
    return frame(lines, seeds={"pos.name=rope, T=64, model.block=gpt2": 2}), facets_of(identities)


def drawn(ax) -> list:
    """The lines an axes draws with data (not the 1x mark or legend-only entries)."""
    return [line for line in ax.get_lines() if len(set(np.asarray(line.get_xdata(), dtype=float))) > 1]


def legend_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_unlike_groups_go_to_panels_of_their_own_and_nothing_is_pooled():
    summary, facets = mixed()
    assert facets.keys == ("T", "model.block")
    [(name, fig)] = ppl_figures(summary, facets)
    panels = [ax for ax in fig.axes if drawn(ax)]
    assert name == "ppl_vs_length.png" and len(panels) == 3  # T=64 gpt2, T=64 llama, T=128
    titles = [ax.get_title() for ax in panels]
    assert [t.split(" ·")[0] for t in titles] == ["T=64, model.block=gpt2", "T=64, model.block=llama",
                                                 "T=128, model.block=gpt2"]  # fmt: skip
    assert len(drawn(panels[0])) == 4 and len(drawn(panels[1])) == len(drawn(panels[2])) == 3
    everything = " ".join([fig.texts[0].get_text(), *titles, *(t for ax in panels for t in legend_texts(ax))])
    assert "pooled" not in everything and "median" not in everything
    [(_, enc)] = encodings_figures(summary, facets)
    assert sum(1 for ax in enc.axes if drawn(ax)) == 6  # per facet: encodings | RoPE methods


def test_a_crowded_panel_goes_on_in_further_panels_and_files():
    groups = [f"steps={k}" for k in range(MAX_LINES + 2)]
    identities = {(g, "", "rope"): ident("rope", steps=str(k)) for k, g in enumerate(groups)}
    [(_, fig)] = ppl_figures(frame([(g, "rope", "none") for g in groups]), facets_of(identities))
    counts = [len(drawn(ax)) for ax in fig.axes if drawn(ax)]
    assert counts == [MAX_LINES, 2]
    assert "lines 1 of 2 panels" in fig.axes[0].get_title().replace("\n", " ")
    many = {(f"T={t}", "", "rope"): ident("rope", T=str(t)) for t in range(32, 32 * (MAX_PANELS + 3), 32)}
    files = ppl_figures(frame([(g, "rope", "none") for g, _, _ in many]), facets_of(many))
    assert [name for name, _ in files] == ["ppl_vs_length.png", "ppl_vs_length-2.png"]
    assert [sum(1 for ax in fig.axes if drawn(ax)) for _, fig in files] == [MAX_PANELS, 2]


def test_the_median_over_groups_is_drawn_only_by_name_and_counts_its_groups_honestly():
    summary, _ = mixed()
    [(name, fig)] = median_figure(summary)
    labels = legend_texts(fig.axes[0])
    assert name == "ppl_median_over_groups.png"
    assert "alibi · none · median of 1 group(s)" in labels  # ALiBi's single run is not "4 groups"
    assert "rope · none · median of 3 group(s)" in labels
    assert "not one model" in fig.texts[0].get_text()


def test_labels_name_the_key_that_differs_whole_and_wrapped():
    common = {f"eval.key_{i}": "x" * 10 for i in range(30)}  # the same in both groups: never named
    identities = {
        (f"g{k}", "", "rope"): {**ident("rope", **common), "train.lr": lr, "model.attn_scale": "log"}
        for k, lr in enumerate(("0.001", "0.003"))
    }
    summary = frame([(g, "rope", "pi") for g, _, _ in identities])
    [(_, fig)] = ppl_figures(summary, facets_of(identities))
    labels = legend_texts(fig.axes[0])
    assert [label.replace("\n", " ") for label in labels[:2]] == [
        "rope · pi · train.lr=0.001",
        "rope · pi · train.lr=0.003",
    ]
    long = palette.wrap("rope · pi · " + ", ".join(f"model.key_{i}=value" for i in range(12)))
    assert all(len(line) <= palette.WRAP for line in long.split("\n")) and "model.key_11=value" in long


def variants() -> tuple[pd.DataFrame, Facets]:
    """Six RoPE groups, five of them with one option away from the rest, four methods each, and ALiBi."""
    plain = {"pos.rope_fraction": "1.0", "pos.nope_every": "0", "pos.logn_scaling": "False", "pos.rope_theta": "10000"}
    changes = [{}, {"pos.rope_fraction": "0.25"}, {"pos.nope_every": "2"}, {"pos.logn_scaling": "True"},
               {"pos.rope_theta": "500000"}, {"pos.rope_fraction": "0.5"}]  # fmt: skip
    identities = {(f"g{k}", "", "rope"): ident("rope", **{**plain, **c}) for k, c in enumerate(changes)}
    identities[("alibi", "", "alibi")] = ident("alibi")  # reads none of the RoPE keys
    lines = [(g, "rope", m) for g, _, _ in identities if g != "alibi" for m in ("none", "pi", "ntk", "yarn")]
    return frame([*lines, ("alibi", "alibi", "none")]), facets_of(identities)


def test_a_label_names_only_what_sets_its_group_apart_and_the_legend_says_the_rest():
    summary, facets = variants()
    [(_, fig)] = encodings_figures(summary, facets)
    panels = [ax for ax in fig.axes if drawn(ax)]
    texts = {t.replace("\n", " ") for ax in panels for t in legend_texts(ax)}
    assert {"rope · none", "alibi · none", "rope · yarn · pos.rope_fraction=0.25", "rope · pi · pos.nope_every=2",
            "rope · ntk · pos.rope_theta=500000", "rope · none · pos.rope_fraction=0.5"} <= texts  # fmt: skip
    assert not any("alibi" in t and "pos." in t for t in texts)  # a key ALiBi does not read is not on its line
    titles = {ax.get_legend().get_title().get_text().replace("\n", " ") for ax in panels}
    assert titles == {"where a label does not say: pos.logn_scaling=False, pos.nope_every=0, pos.rope_fraction=1.0, "
                      "pos.rope_theta=10000"}  # fmt: skip
    tie = {(f"g{k}", "", "rope"): ident("rope", **{"train.lr": lr}) for k, lr in enumerate(("0.001", "0.003"))}
    assert list(facets_of(tie).names(list(tie)).values()) == ["train.lr=0.001", "train.lr=0.003"]  # no usual value
    assert facets_of(tie).usual(list(tie)) == ""


def test_a_crowded_method_panel_goes_on_in_rows_and_keeps_each_group_whole():
    summary, facets = variants()
    [(_, fig)] = encodings_figures(summary, facets)
    right = [ax for ax in fig.axes if drawn(ax) and "RoPE + rescaling" in ax.get_title().replace("\n", " ")]
    groups = [{t.split(" · ", 2)[-1] if t.count(" · ") > 1 else "plain" for t in legend_texts(ax)[:-1]} for ax in right]
    assert len(right) == 2 and all(len(drawn(ax)) <= MAX_LINES for ax in right)
    assert sum(len(drawn(ax)) for ax in right) == 24 and not groups[0] & groups[1]  # no group split over two panels
    assert "lines 2 of 2 panels" in right[1].get_title().replace("\n", " ")


def test_a_crowded_training_figure_goes_on_in_further_rows(tmp_path, monkeypatch):
    groups = [f"steps={k}" for k in range(MAX_LINES + 3)]
    identities = {(g, "", "rope"): ident("rope", steps=str(k)) for k, g in enumerate(groups)}
    training = pd.DataFrame([{"group": g, "parent": "", "encoding": "rope", "step": step, "train_loss": 3 - step / 100,
                              "train_std": 0.1, "val_loss": 3 - step / 90, "val_std": 0.1}
                             for g in groups for step in (0, 50, 100)])  # fmt: skip
    saved = []
    monkeypatch.setattr(output, "save", lambda fig, path, formats=(): saved.append(fig) or path)
    plots.plot_training(training, tmp_path, facets_of(identities))
    [fig] = saved
    assert [len(drawn(ax)) for ax in fig.axes] == [MAX_LINES, MAX_LINES, 3, 3]  # (training | validation) per row
    assert "lines 2 of 2 panels" in fig.axes[2].get_title()


def test_a_crowded_positions_by_encoding_row_goes_on_in_further_rows(tmp_path, monkeypatch):
    summary, facets = variants()
    lines = summary.drop_duplicates(["group", "encoding", "method"])[["group", "encoding", "method"]]
    cells = pd.concat([lines.assign(x=x / 4, nll=1.0 + x, nll_std=0.1, n=1) for x in range(1, 9)])
    cells = cells.assign(parent="", protocol="nonoverlapping", factor=4.0)
    saved = []
    monkeypatch.setattr(output, "save", lambda fig, path, formats=(): saved.append(fig) or path)
    position_figures.plot_position_encodings(cells, 4.0, tmp_path, 1, facets, [])
    [fig] = saved
    right = [ax for ax in fig.axes if drawn(ax) and "RoPE + rescaling" in ax.get_title().replace("\n", " ")]
    assert len(right) == 2 and [len(drawn(ax)) for ax in right] == [MAX_LINES, 24 - MAX_LINES]
    methods = [f"m{k}" for k in range(MAX_LINES + 5)]  # one group evaluated with many methods: positions.png
    one = pd.concat([cells[cells["group"] == "g0"].drop_duplicates("x").assign(method=m) for m in methods])
    position_figures.plot_positions(one, tmp_path, 4.0, 1, facets)
    panels = [ax for ax in saved[-1].axes if drawn(ax)]
    assert [len(drawn(ax)) for ax in panels] == [MAX_LINES, 5]
    assert "lines 2 of 2 panels" in panels[1].get_title().replace("\n", " ")


def test_no_two_lines_of_a_panel_look_alike():
    methods = ["none", "pi", "ntk", "yarn", "abf", "yarn (extended)", "yarn (zero-shot)"]
    identities = {(f"steps={s}", "", enc): ident(enc, steps=str(s)) for s in (10, 20) for enc in ("rope", "xpos")}
    summary = frame([(g, e, m) for g, _, e in identities for m in methods])
    for _, fig in ppl_figures(summary, facets_of(identities)):
        for ax in fig.axes:
            seen = [(line.get_color(), line.get_marker(), line.get_linestyle()) for line in drawn(ax)]
            assert len(seen) == len(set(seen)) and len(seen) > 1
    one = looks([("rope", "g", "pi"), ("xpos", "g", "pi"), ("rope", "g", "yarn (extended)"),
                 ("rope", "g", "yarn (zero-shot)"), ("rope", "h", "pi")])  # fmt: skip
    assert one[0]["color"] != one[1]["color"]  # colour: the encoding
    assert one[0]["marker"] == one[1]["marker"] == palette.marker_of("pi")  # marker: the method
    assert one[2]["linestyle"] != one[3]["linestyle"]  # the stage: line style
    assert one[0]["color"] != one[4]["color"] and one[0]["marker"] == one[4]["marker"]  # a shade per group
    crowd = looks([("rope", "g", "pi")] * 3 + [("rope", "g", "mystery")] * 2)  # repeats: still all apart
    assert len({(look["color"], look["marker"], str(look["linestyle"])) for look in crowd}) == 5


@pytest.mark.parametrize("factors", [(1.0, 2.0, 4.0, 8.0), (1.0, 1.5, 2.0), (0.5, 1.0, 16.0)])
def test_sideways_offsets_never_reach_halfway_to_the_neighbouring_factor(factors):
    gap = min(math.log(b / a) for a, b in zip(factors, factors[1:]))
    for n in (2, 5, 12, 40):
        moved = [math.log(palette.dodge(np.array(factors), i, n, factors)[0] / factors[0]) for i in range(n)]
        assert max(abs(m) for m in moved) <= gap / 4 + 1e-12  # a quarter of the way at most
        assert len(set(np.round(moved, 12))) == n  # and still apart
    summary, facets = mixed()
    [(_, fig)] = ppl_figures(summary, facets)
    for ax in fig.axes:
        for line in drawn(ax):
            x = np.asarray(line.get_xdata(), dtype=float)
            nearest = np.array([min(FACTORS, key=lambda f: abs(math.log(v / f))) for v in x])
            assert (np.abs(np.log(x / nearest)) < math.log(2) / 2).all()
            assert (nearest == np.array(FACTORS)).all()  # each point beside its own factor


def test_bands_say_what_they_are():
    summary, facets = mixed()
    [(_, fig)] = ppl_figures(summary, facets)
    panels = [ax for ax in fig.axes if drawn(ax)]
    first = legend_texts(panels[0])
    assert any("rope · pi" in t and "± std over 2 seeds" in t for t in first)  # two seeds: their spread
    assert any("alibi" in t and "95% window interval" in t.replace("\n", " ") for t in first)  # one: its windows
    # shared by every line: said once
    assert "band 95% window interval (one seed)" in panels[1].get_title().replace("\n", " ")


def test_a_figure_split_over_files_writes_every_file():
    """No file of a figure is left out: ``--top`` bounds what is drawn, and ``--top all`` draws all."""
    names = file_names("positions.png", 12)
    assert names[:3] == ["positions.png", "positions-2.png", "positions-3.png"]
    assert len(set(names)) == 12 and names[-1] == "positions-12.png"


def test_every_figure_kind_is_faceted_and_the_median_is_drawn_only_when_asked(tmp_path):
    summary, facets = mixed()
    empty = pd.DataFrame()
    tables = {"summary": summary, "positions": empty, "longest_factor": None, "passkey": empty, "training": empty}
    drawn, _ = draw_all({**tables, "tasks": empty}, tmp_path, Drawing(facets, ("png",)), workers=1)
    assert drawn["ppl_vs_length.png"].is_file() and "ppl_median_over_groups.png" not in drawn
    asked, _ = draw_all({**tables, "tasks": empty}, tmp_path / "m", Drawing(facets, ("png",), median=True), workers=1)
    assert asked["ppl_median_over_groups.png"] is not None
    # tasks: one file per facet, heatmaps one panel per group
    rows = []
    for (group, _, enc), t in (((g, p, e), ident_["T"]) for (g, p, e), ident_ in facets.identities.items()):
        for factor in (1.0, 2.0):
            for b in range(2):
                rows.append({"group": group, "encoding": enc, "method": "none", "task": "niah", "factor": factor,
                             "depth_lo": b / 2, "depth_hi": (b + 1) / 2, "trials": 4, "accuracy": 0.5, "chance": 0.5,
                             "answer_nll": 2.0, "status": "ok", "run_dir": f"{group}-{t}", "seed": 0})  # fmt: skip
    tasks = pd.DataFrame(rows)
    made = task_figures.draw(tasks, tmp_path, facets, ("png",))
    assert sorted(made) == ["niah_heatmap.png", "tasks_vs_length-2.png", "tasks_vs_length-3.png", "tasks_vs_length.png"]


def test_long_legends_grow_their_panel_instead_of_squeezing_it():
    """Groups that differ in thirty keys (a table from before settings were kept beside runs that
    keep them): every label whole, and the layout still fits (matplotlib warns when it cannot)."""
    identities = {
        (f"g{k}", "", "rope"): {**ident("rope"), **{f"eval.key_{i}": f"{k}{i}" * 3 for i in range(30)}}
        for k in range(4)
    }
    summary = frame([(g, "rope", m) for g, _, _ in identities for m in ("none", "pi")])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _, fig in ppl_figures(summary, facets_of(identities)):
            fig.savefig(io.BytesIO(), format="png", dpi=50, bbox_inches="tight")
    labels = legend_texts(fig.axes[0])
    assert all("eval.key_29=" in label for label in labels if label.startswith("rope"))
    assert fig.get_size_inches()[1] > 4.2


@pytest.mark.slow  # starts two worker processes
def test_figures_drawn_in_worker_processes_are_the_figures_drawn_here(tmp_path):
    summary, facets = mixed()
    empty = pd.DataFrame()
    tables = {"summary": summary, "positions": empty, "longest_factor": None, "passkey": empty, "training": empty}
    here, notes_here = draw_all({**tables, "tasks": empty}, tmp_path / "here", Drawing(facets, ("png",)), workers=1)
    there, notes_there = draw_all({**tables, "tasks": empty}, tmp_path / "there", Drawing(facets, ("png",)), workers=2)
    assert {k: v.name for k, v in here.items() if v} == {k: v.name for k, v in there.items() if v}
    assert notes_here == notes_there and all(v.is_file() for v in there.values() if v)
