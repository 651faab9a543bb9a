"""Report figures of the task suite, the shared palette, figure formats and the fixed figures."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_pdf import FigureCanvasPdf
from PIL import Image

from posx.report.figures import output, task_figures
from posx.report.figures.facets import Facets
from posx.report.figures.position_figures import longest_per_line
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
                                     "answer_nll": 2.0 + b, "chance": 1.0 if task == "niah" else 0.1 / factor,
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


@pytest.mark.slow
def test_task_figures_are_png_at_200_dpi_and_pdf(tmp_path):
    drawn = task_figures.draw(tasks_frame(), tmp_path, Facets())
    for name in ("tasks_vs_length", "niah_heatmap"):
        assert drawn[f"{name}.png"] == tmp_path / f"{name}.png"
        assert (tmp_path / f"{name}.pdf").read_bytes()[:4] == b"%PDF"
        with Image.open(tmp_path / f"{name}.png") as im:
            assert round(im.info["dpi"][0]) == output.DPI
    assert (tmp_path / "tasks_summary.csv").is_file()
    (tmp_path / "png").mkdir()
    png_only = task_figures.draw(tasks_frame(), tmp_path / "png", Facets(), formats=("png",))
    assert png_only["niah_heatmap.png"].is_file() and not list((tmp_path / "png").glob("*.pdf"))
    nothing = task_figures.draw(pd.DataFrame(), tmp_path / "none", Facets())
    assert nothing == {"tasks_vs_length.png": None, "niah_heatmap.png": None}


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


def test_the_task_legend_names_lines_that_only_later_panels_draw():
    frame = tasks_frame(seeds=(0,))
    frame = frame[
        ((frame["encoding"] == "rope") & (frame["task"] == "niah"))
        | ((frame["encoding"] == "alibi") & (frame["task"] == "copy"))
    ]
    fig = task_figures._curves_figure(task_figures.summarize_tasks(frame), Facets(), "")
    texts = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert len(texts) == 3 and any("rope" in t for t in texts) and any("alibi" in t for t in texts)
    assert task_figures.CHANCE in texts


def test_each_task_panel_states_its_chance_level_at_each_length():
    summary = task_figures.summarize_tasks(tasks_frame())
    copy = summary[(summary["task"] == "copy") & (summary["encoding"] == "rope")].sort_values("factor")
    assert list(copy["chance"]) == pytest.approx([0.1, 0.05, 0.025])
    fig = task_figures._curves_figure(summary, Facets(), "")
    dotted = {ax.get_title(): [ln for ln in ax.get_lines() if ln.get_label() == task_figures.CHANCE] for ax in fig.axes}
    assert [list(ln.get_ydata()) for ln in dotted["copy"]] == [pytest.approx([0.1, 0.05, 0.025])]
    assert [list(ln.get_ydata()) for ln in dotted["niah"]] == [[1.0, 1.0, 1.0]]
    assert all(ln.get_linestyle() == ":" for lines in dotted.values() for ln in lines)
    # two settings of one task (the groups' chance levels differ): a line for each
    other = tasks_frame().assign(group=lambda d: np.where(d["encoding"] == "alibi", "b", "a"))
    other.loc[other["group"] == "b", "chance"] *= 2
    fig = task_figures._curves_figure(task_figures.summarize_tasks(other), Facets(), "")
    copy_axis = next(ax for ax in fig.axes if ax.get_title() == "copy")
    assert len([ln for ln in copy_axis.get_lines() if ln.get_label() == task_figures.CHANCE]) == 2
    # tables from before the chance column: no line, and no legend entry
    fig = task_figures._curves_figure(task_figures.summarize_tasks(tasks_frame().assign(chance=np.nan)), Facets(), "")
    texts = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert task_figures.CHANCE not in texts
