"""Report figures of the task suite, the shared palette, figure formats and the fixed figures."""

from __future__ import annotations

import shutil
import warnings

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_pdf import FigureCanvasPdf
from PIL import Image

from posx.report import output, palette, task_figures
from posx.report.axes import colors_for
from posx.report.figures import encodings_figure, longest_per_line
from posx.report.plots import ppl_figure
from posx.report.summary import report

from conftest import REPO, run_posx

PREMOVE = REPO / "tests" / "fixtures" / "premove"


def tasks_frame(seeds=(0, 1)) -> pd.DataFrame:
    rows = []
    for seed in seeds:
        for enc in ("rope", "alibi"):
            for factor in (1.0, 2.0, 4.0):
                for task in ("niah", "copy"):
                    for b in range(4):
                        acc = 1.0 if (enc == "alibi" or factor == 1.0) else 0.25 * b
                        rows.append({"group": "", "encoding": enc, "method": "none", "task": task, "factor": factor,
                                     "depth_lo": b / 4, "depth_hi": (b + 1) / 4, "trials": 4, "accuracy": acc,
                                     "answer_nll": 2.0 + b,
                                     "status": "ok", "run_dir": f"{enc}-{seed}", "seed": seed})  # fmt: skip
    return pd.DataFrame(rows)


def test_task_summary_pools_depths_per_run_then_seeds():
    summary = task_figures.summarize_tasks(tasks_frame())
    rope4 = summary[(summary["encoding"] == "rope") & (summary["factor"] == 4.0) & (summary["task"] == "niah")].iloc[0]
    assert rope4["accuracy_mean"] == pytest.approx(0.375) and rope4["trials"] == 32 and rope4["n_seeds"] == 2
    assert rope4["accuracy_std"] == 0 and rope4["accuracy_lo"] == rope4["accuracy_hi"] == pytest.approx(0.375)
    assert rope4["answer_nll_mean"] == pytest.approx(3.5)  # trial-weighted over the four buckets
    one = task_figures.summarize_tasks(tasks_frame(seeds=(0,)))
    row = one[(one["encoding"] == "rope") & (one["factor"] == 4.0) & (one["task"] == "niah")].iloc[0]
    assert (row["accuracy_lo"], row["accuracy_hi"]) == pytest.approx(task_figures.wilson(6, 16))


def crowded_frame(groups: int) -> pd.DataFrame:
    """``groups`` groups of one rope run each; group k scores (k / (groups - 1))² at 2x in every
    bucket (skewed, so the median of the groups differs from their mean)."""
    frame = tasks_frame(seeds=(0,))
    frame = frame[frame["encoding"] == "rope"]
    parts = []
    for k in range(groups):
        part = frame.assign(group=f"train.lr={k}", run_dir=f"rope-{k}")
        part.loc[part["factor"] == 2.0, "accuracy"] = (k / (groups - 1)) ** 2
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def test_many_groups_pool_into_one_panel_and_one_line_per_encoding_and_method():
    data = crowded_frame(21)
    notes = []
    cells, pooled = task_figures._heatmap_cells(data[data["task"] == "niah"], notes, "niah_heatmap.png")
    assert pooled and len(notes) == 1 and "`niah_heatmap.png`: 21 groups" in notes[0]
    assert set(cells["line"]) == {"rope · none (21 groups pooled)"}
    assert cells.loc[cells["factor"] == 2.0, "accuracy"].tolist() == pytest.approx(
        [0.25] * 4
    )  # the median group, not the mean
    summary = task_figures.summarize_tasks(data)
    lines, pooled = task_figures._curves(summary, notes, "tasks_vs_length.png")
    assert pooled and len(notes) == 2 and "`tasks_vs_length.png`: 21 groups" in notes[1]
    at2 = lines[(lines["factor"] == 2.0) & (lines["task"] == "niah")].iloc[0]
    assert (at2["accuracy_mean"], at2["accuracy_lo"], at2["accuracy_hi"]) == pytest.approx((0.25, 0.0, 1.0))
    few, pooled = task_figures._heatmap_cells(crowded_frame(3), [], "niah_heatmap.png")
    assert not pooled and few["group"].nunique() == 3


def test_the_curves_title_names_line_styles_only_when_they_tell_groups_apart():
    few = task_figures.summarize_tasks(crowded_frame(3))
    lines, pooled = task_figures._curves(few, [], "tasks_vs_length.png")
    assert "line style: group" in task_figures._curves_title(lines, pooled, 3, lines["group"].nunique())
    one = task_figures.summarize_tasks(tasks_frame())
    lines, pooled = task_figures._curves(one, [], "tasks_vs_length.png")
    assert "line style" not in task_figures._curves_title(lines, pooled, 2, lines["group"].nunique())
    many = task_figures.summarize_tasks(crowded_frame(21))
    lines, pooled = task_figures._curves(many, [], "tasks_vs_length.png")
    title = task_figures._curves_title(lines, pooled, 1, lines["group"].nunique())
    assert pooled and "line style" not in title and "median" in title


@pytest.mark.slow
def test_task_figures_are_png_at_200_dpi_and_pdf(tmp_path):
    notes = []
    drawn = task_figures.draw(tasks_frame(), tmp_path, notes)
    assert notes == []  # two lines, two panels: nothing pooled
    for name in ("tasks_vs_length", "niah_heatmap"):
        assert drawn[f"{name}.png"] == tmp_path / f"{name}.png"
        assert (tmp_path / f"{name}.pdf").read_bytes()[:4] == b"%PDF"
        with Image.open(tmp_path / f"{name}.png") as im:
            assert round(im.info["dpi"][0]) == output.DPI
    assert (tmp_path / "tasks_summary.csv").is_file()
    (tmp_path / "png").mkdir()
    png_only = task_figures.draw(tasks_frame(), tmp_path / "png", [], formats=("png",))
    assert png_only["niah_heatmap.png"].is_file() and not list((tmp_path / "png").glob("*.pdf"))
    nothing = task_figures.draw(pd.DataFrame(), tmp_path / "none", [])
    assert nothing == {"tasks_vs_length.png": None, "niah_heatmap.png": None}


def test_one_colour_per_encoding_and_method_whatever_else_is_drawn():
    alone = colors_for(["rope · none", "rope · yarn"])
    crowded = colors_for(["alibi · none", "nope · none", "rope · pi", "rope · yarn", "rope · none (llama)"])
    assert alone["rope · yarn"] == crowded["rope · yarn"] == palette.color_of("yarn")
    assert alone["rope · none"] == crowded["rope · none (llama)"] == palette.color_of("rope")
    assert palette.color_of("absolute · clamp") == palette.color_of("absolute")
    assert palette.color_of("rope · data.task_mix=0.5") == palette.color_of("rope")  # a group, not a method
    every = [*palette.ENCODING_COLORS, *[m for m in palette.METHOD_COLORS if m != "none"]]
    assert len({palette.color_of(n) for n in every}) == len(every)  # all distinct
    assert palette.color_of("fire") == palette.color_of("fire · none")  # an unknown name: stable
    assert palette.marker_of("rope · none") == palette.marker_of("rope")
    assert len({palette.marker_of(n) for n in every}) == len(every)  # all distinct, like the colours


def ppl_summary() -> pd.DataFrame:
    """Lines that coincide exactly: pi and yarn, and plain RoPE and ALiBi; one seed."""
    rows = []
    for enc, method in (("rope", "none"), ("rope", "pi"), ("rope", "yarn"), ("alibi", "none")):
        for factor in (1.0, 2.0, 4.0):
            ppl = 5.0 * factor if method != "none" else 4.0 + factor
            rows.append({"group": "-", "parent": "", "encoding": enc, "method": method, "protocol": "nonoverlapping",
                         "factor": factor, "ppl_mean": ppl, "ppl_lo": ppl * 0.9, "ppl_hi": ppl * 1.1, "n_seeds": 1,
                         "train_context": "32", "eval_context": str(int(32 * factor))})  # fmt: skip
    return pd.DataFrame(rows)


def drawn_lines(ax) -> dict:
    """{legend label: Line2D} of the lines an axes draws with data (not the 1x mark or legend-only lines)."""
    return {line.get_label(): line for line in ax.get_lines() if len(line.get_xdata()) > 1}


def assert_apart(one, other) -> None:
    """Two lines with equal values both stay visible: different markers, hollow, at other x."""
    assert one.get_marker() != other.get_marker()
    assert one.get_markerfacecolor() == other.get_markerfacecolor() == "none"
    np.testing.assert_array_equal(one.get_ydata(), other.get_ydata())  # they do coincide
    assert not np.isclose(np.asarray(one.get_xdata()), np.asarray(other.get_xdata())).any()


def test_lines_that_coincide_keep_their_own_markers_side_by_side():
    summary = ppl_summary()
    fig = encodings_figure(summary, [])
    left, right = fig.axes[:2]
    methods = drawn_lines(right)
    assert_apart(methods["pi"], methods["yarn"])
    assert methods["yarn"].get_marker() == palette.marker_of("yarn")
    assert methods["yarn"].get_color() == palette.color_of("yarn")
    encodings = drawn_lines(left)
    assert_apart(encodings["rope"], encodings["alibi"])  # plain RoPE and ALiBi: equal numbers here too
    assert encodings["alibi"].get_marker() == palette.marker_of("alibi")
    assert "offset sideways" in fig.texts[0].get_text()  # the title says the lines were moved
    handles, labels = right.get_legend_handles_labels()
    assert handles[labels.index("yarn")].get_marker() == palette.marker_of("yarn")  # the legend shows it
    ax = ppl_figure(summary, []).axes[0]
    lines = drawn_lines(ax)
    assert_apart(lines["rope · pi"], lines["rope · yarn"])
    assert "offset sideways" in ax.get_title()
    # dense lines (per position) keep their points: their markers sit on different buckets
    marked = [set(range(start, 64, step)) for start, step in (palette.stagger(i, 3, 64) for i in range(3))]
    assert all(len(m) >= 8 for m in marked) and not (marked[0] & marked[1] or marked[1] & marked[2])


def test_long_group_labels_are_cut_in_legends_and_kept_apart():
    """A run with recorded settings beside one without differs in every key: its group label runs to
    a thousand characters. Legends cut it, keep cut labels apart, and the layout still fits."""
    common = ", ".join(f"eval.key_{i}=—" for i in range(40))
    summary = ppl_summary()
    summary = pd.concat([summary.assign(group=f"{common}, eval.tokens={n}") for n in (512, 1024)], ignore_index=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "Tight layout not applied" included
        fig = encodings_figure(summary, [])
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    rope = [label for label in labels if label.startswith("rope")]
    assert len(rope) == 2 and len(set(rope)) == 2  # two groups, told apart
    assert all(len(label) <= palette.LABEL_LIMIT + 3 for label in labels)
    assert rope[1].endswith("#2") and rope[0].endswith("…")
    # a line without a band (a table from before intervals were kept) still gets ticks up to its values
    unbanded = summary.assign(ppl_mean=summary["ppl_mean"] * 3, ppl_lo=np.nan, ppl_hi=np.nan, group="old")
    ax = encodings_figure(pd.concat([summary, unbanded], ignore_index=True), []).axes[0]
    assert max(ax.get_yticks()) >= 0.95 * unbanded["ppl_mean"].max()
    assert palette.fitted(["a" * 80, "a" * 80, "a" * 79 + "b"]) == [palette.fit("a" * 80)] * 2 + [
        palette.fit("a" * 80) + " #2"
    ]


def test_positions_by_encoding_draws_each_run_at_its_longest_and_says_so():
    data = pd.DataFrame({"group": [""] * 5, "encoding": ["absolute"] * 2 + ["rope"] * 3, "method": ["none"] * 5,
                         "factor": [1.0, 1.0, 1.0, 2.0, 4.0], "nll": np.arange(5.0)})  # fmt: skip
    kept, shorter = longest_per_line(data, ["group", "encoding", "method"], 4.0)
    assert list(kept["factor"]) == [1.0, 1.0, 4.0] and list(kept["nll"]) == [0.0, 1.0, 4.0]
    assert shorter == ["absolute drawn at 1 x T, its longest"]
    assert longest_per_line(data[data["encoding"] == "rope"], ["encoding"], 4.0)[1] == []


@pytest.mark.slow
def test_frequencies_png_keeps_its_title_and_a_full_width_plot(tmp_path):
    out = tmp_path / "f.png"
    run_posx("frequencies", "--out", str(out), cwd=tmp_path)
    with Image.open(out) as im:
        width, height = im.size
        assert round(im.info["dpi"][0]) == output.DPI
        pixels = np.asarray(im.convert("L"))
    assert width / height < 1.6  # the legend sits under the plot, not beside it
    dark_columns = np.flatnonzero((pixels < 128).any(axis=0))
    assert dark_columns.max() - dark_columns.min() > 0.9 * width  # the drawing spans the width


@pytest.mark.slow
def test_a_report_in_png_draws_no_pdf_at_all(tmp_path, monkeypatch):
    """``--format png``: no figure is ever drawn as PDF (not drawn and then removed), and the
    default draws both."""
    runs = tmp_path / "runs"
    shutil.copytree(PREMOVE / "runs" / "old-rope", runs / "old-rope")
    report([runs], out=tmp_path / "both", results_dir=tmp_path)
    pngs = sorted(p.stem for p in (tmp_path / "both").glob("*.png"))
    assert pngs and pngs == sorted(p.stem for p in (tmp_path / "both").glob("*.pdf"))

    def no_pdf(*args, **kwargs):
        raise AssertionError("a PDF was drawn")

    monkeypatch.setattr(FigureCanvasPdf, "print_pdf", no_pdf)
    report([runs], out=tmp_path / "png", results_dir=tmp_path, formats="png")
    assert sorted(p.stem for p in (tmp_path / "png").glob("*.png")) == pngs


def test_a_bad_figure_format_is_one_line(tmp_path):
    proc = run_posx("report", str(tmp_path), "--format", "gif", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "--format gif" in proc.stderr and "Traceback" not in proc.stderr


def test_the_report_says_when_tokenizers_differ():
    byte, bpe = {"data.tokenizer": "byte"}, {"data.tokenizer": "bpe", "data.vocab_size": "512"}
    assert task_figures.tokenizer_note([byte, byte]) is None
    note = task_figures.tokenizer_note([byte, bpe])
    assert "bpe, byte" in note and "bits per byte" in note
    assert "vocabularies 1024, 512" in task_figures.tokenizer_note([bpe, {**bpe, "data.vocab_size": "1024"}])
