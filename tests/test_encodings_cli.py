"""Every encoding through the real CLI (train, then evaluate), absolute past its table,
the new config keys' bad values, and `posx frequencies`."""

from __future__ import annotations

import io
import json
import math
import re

import pandas as pd
import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from posx import rope
from posx.cli import app
from posx.cli import wavelengths as freqplot
from posx.configure.compose import compose, typed
from posx.core.errors import PosxError
from posx.eval.run import evaluate_run
from posx.model.encodings import ENCODINGS
from posx.model.rescale import WINDOWED
from posx.runs.records import RunMeta

from conftest import run_posx
from helpers.model import spec

ALL_METHODS = "[" + ",".join(rope.METHODS) + "]"


@pytest.mark.slow
@pytest.mark.parametrize("pos", ENCODINGS)
def test_every_encoding_trains_and_evaluates_end_to_end(tmp_path, tiny_args, pos):
    methods = ALL_METHODS if pos == "rope" else "[none,pi]"
    run_posx(
        "train",
        f"pos={pos}",
        f"name={pos}",
        "eval.after_train=true",
        "eval.factors=[1,8]",
        f"eval.methods={methods}",
        *tiny_args,
        cwd=tmp_path,
    )
    df = pd.read_csv(tmp_path / "results" / "runs" / pos / "extrapolation.csv")
    assert (df["pos"] == pos).all()
    none = df[df["method"] == "none"].set_index("factor")
    if pos == "absolute":
        assert none.loc[1.0, "status"] == "ok"
        assert none.loc[8.0, "status"] == "out_of_range"
    else:
        assert (none["status"] == "ok").all() and none["ppl"].map(math.isfinite).all()
        assert none["eval_context"].tolist() == [32, 256]
    if pos == "rope":
        assert len(df) == 2 * len(rope.METHODS)
        assert (df["status"] == "ok").all() and df["ppl"].map(math.isfinite).all()
        one = df[df["factor"] == 1.0].set_index("method")["ppl"]
        for method in rope.METHODS:
            # abf and resonance change frequencies even at 1x; self_extend, rerope and dca remap distances in T
            if method not in ("abf", "resonance", "resonance_yarn", "self_extend", "rerope", "dca"):
                assert one[method] == pytest.approx(one["none"], rel=1e-6), method
    elif pos != "xpos":  # xpos rotates: RoPE methods apply
        assert (df.loc[df["method"] == "pi", "status"] == "not_applicable").all()


def _evaluate_in_process(run, work, *overrides):
    """evaluate_run in this process (no interpreter start-up): the CLI path is covered above."""
    cfg = typed(compose([*overrides, "eval.tokens=512", "device=cpu", f"results_dir={work / 'results'}"]))
    return evaluate_run(run, cfg, Console(file=io.StringIO()))


@pytest.mark.slow
def test_absolute_clamp_and_interpolate_give_finite_perplexity_at_8x(trained_runs):
    work, run = trained_runs["work"], trained_runs["absolute"]
    ppl = {}
    for mode in ("clamp", "interpolate"):
        _evaluate_in_process(run, work, f"eval.absolute_beyond={mode}", "eval.factors=[1,8]", "eval.methods=[none]")
        df = pd.read_csv(run / "extrapolation.csv").set_index("factor")
        assert (df["status"] == "ok").all() and (df["absolute_beyond"] == mode).all()
        assert math.isfinite(df.loc[8.0, "ppl"])
        ppl[mode] = df["ppl"]
    # inside the table both patches are the plain lookup; past it they differ
    assert ppl["clamp"][1.0] == pytest.approx(ppl["interpolate"][1.0], rel=1e-9)
    assert ppl["clamp"][8.0] != pytest.approx(ppl["interpolate"][8.0], rel=1e-6)


BAD = [
    (["eval.absolute_beyond=bogus"], "eval.absolute_beyond=bogus"),
    (["pos=t5", "pos.num_buckets=1"], "pos.num_buckets=1"),
    (["pos=t5", "pos.max_distance=16"], "pos.max_distance=16 must exceed"),
    (["eval.llama3.low_freq_factor=8"], "low_freq_factor < high_freq_factor"),
    (["eval.yarn.beta_slow=40"], "beta_slow < beta_fast"),
    (["eval.dynamic_ntk.factor=0.5"], "eval.dynamic_ntk.factor=0.5 must be at least 1"),
    (["eval.longrope.short_factor=[1,0]"], "eval.longrope.short_factor[1] must be positive"),
    (["eval.self_extend.group=0"], "eval.self_extend.group must be positive, got 0"),
    (["eval.self_extend.window=0"], "eval.self_extend.window must be positive, got 0"),
    (["eval.rerope.window=0"], "eval.rerope.window must be positive, got 0"),
    (["eval.rerope.leak_factor=0.5"], "eval.rerope.leak_factor=0.5 must be at least 1"),
    (["eval.lm_infinite.global_tokens=-1"], "eval.lm_infinite.global_tokens=-1 must be 0 or more"),
    (["eval.dca.chunk_size=0"], "eval.dca.chunk_size must be positive, got 0"),
    (
        ["eval.dca.chunk_size=8", "eval.dca.local_window=8"],
        "eval.dca.local_window=8 must be below eval.dca.chunk_size=8",
    ),
    (["eval.streaming_llm.sinks=-1"], "eval.streaming_llm.sinks=-1 must be 0 or more"),
]


@pytest.mark.parametrize("overrides,needle", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_encoding_and_method_values_are_rejected_by_check_config(overrides, needle):
    # check_config's PosxError is what the CLI prints as one line (tested in test_cli.py)
    with pytest.raises(PosxError, match=re.escape(needle)):
        compose(overrides)


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides, needle",
    [
        (
            ["eval.methods=[none,longrope]", "eval.longrope.long_factor=[2,2,2]"],
            "long_factor has 3 entries, expected head_dim // 2 = 8",
        ),
        (
            ["eval.methods=[none,dca]", "eval.dca.chunk_size=64"],
            "eval.dca.chunk_size 64 is past the trained context T=32",
        ),
    ],
    ids=["longrope list of the wrong length", "dca chunk past T"],
)
def test_a_method_that_does_not_fit_the_model_fails_before_any_row(trained_runs, overrides, needle):
    work, run = trained_runs["work"], trained_runs["rope"]
    table = run / "extrapolation.csv"
    before = table.read_bytes() if table.exists() else None
    with pytest.raises(PosxError, match=re.escape(needle)):
        _evaluate_in_process(run, work, *overrides)
    assert (table.read_bytes() if table.exists() else None) == before


@pytest.mark.slow
def test_frequencies_prints_the_table_and_writes_a_png(tmp_path):
    out = tmp_path / "plots" / "freq.png"
    proc = run_posx(
        "frequencies",
        "--head-dim",
        "16",
        "--context",
        "64",
        "--factor",
        "4",
        "--methods",
        "none,pi,yarn,llama3",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    lines = proc.stdout.splitlines()
    assert any("head_dim=16" in line and "T=64" in line for line in lines)
    pair0 = next(line for line in lines if line.strip("│ ").startswith("0 "))
    cells = [c.strip() for c in pair0.strip("│").split("│")]
    assert cells[1] == "6.283"  # 2*pi: pair 0 of plain RoPE turns once every 2*pi positions
    assert cells[2] == "25.13"  # PI divides every frequency by s = 4
    assert "attention" in proc.stdout and f"wrote {out}" in proc.stdout.replace("\n", "")


def test_frequencies_rejects_a_bad_factor_and_method():
    ev = compose([]).eval
    with pytest.raises(PosxError, match=re.escape("--factor 0.5 must be a finite number from 1 to")):
        freqplot.wavelength_table(ev, ["none"], 16, 10000.0, 64, 0.5)
    with pytest.raises(PosxError, match="unknown method 'bogus'"):
        freqplot.wavelength_table(ev, ["none", "bogus"], 16, 10000.0, 64, 4.0)
    with pytest.raises(PosxError, match="--head-dim 15"):
        freqplot.check_head_dim(15)


def test_frequency_table_columns_follow_the_methods():
    df, attention = freqplot.wavelength_table(compose([]).eval, list(rope.METHODS), 32, 10000.0, 128, 8.0)
    assert list(df.columns) == list(rope.METHODS) and len(df) == 16
    torch.testing.assert_close(torch.tensor(df["pi"].values), 8 * torch.tensor(df["none"].values))
    assert (df["ntk_by_parts"] == df["yarn"]).all()
    assert attention["yarn"] == pytest.approx(0.1 * math.log(8) + 1) and attention["ntk_by_parts"] == 1.0


@pytest.mark.slow
def test_frequencies_takes_head_dim_base_and_t_from_a_run_and_never_cuts_a_value(tmp_path, monkeypatch):
    run = tmp_path / "results" / "runs" / "r"
    run.mkdir(parents=True)
    meta = RunMeta(spec(n_head=2, d_model=32, base=500.0), train_context=16, data={}, step=1)
    (run / "model.json").write_text(json.dumps(meta.to_dict()))
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(app, ["frequencies", "r", "--factor", "2"], env={"COLUMNS": "80"})
    assert out.exit_code == 0, out.output
    assert "head_dim=16, base=500, T=16, s=2 (from r)" in out.output
    # not a terminal: one table as wide as its cells, no value cut
    assert "…" not in out.output and "(1/" not in out.output
    assert all((method in out.output) == (method not in WINDOWED) for method in rope.METHODS)
    assert "coincide here" in out.output
    assert (tmp_path / "results" / "frequencies.png").is_file()
    again = CliRunner().invoke(app, ["frequencies", "--methods", "none,pi"])
    assert again.exit_code == 0 and (tmp_path / "results" / "frequencies-2.png").is_file()
    taken = CliRunner().invoke(app, ["frequencies", "--out", "results/frequencies.png"])
    assert taken.exit_code == 2 and "already exists" in taken.output
    ignored = CliRunner().invoke(app, ["frequencies", "r", "model.n_head=4"])
    assert ignored.exit_code == 2 and "with a run, head_dim, base and T come from it" in ignored.output
    assert not (tmp_path / "results" / "frequencies-3.png").exists()


@pytest.mark.parametrize(
    "overrides, with_run, needle",
    [
        (["eval.methods=[none,dca]"], False, "does not read eval.methods; use --methods"),
        (["+eval.factors=[1,4]"], True, "does not read eval.factors; use --factor"),
        (["train.context_length=64"], True, "train.context_length=64: with a run"),
        (["pos.base=500"], True, "pos.base=500: with a run"),
    ],
)
def test_frequencies_refuses_overrides_it_would_ignore(overrides, with_run, needle):
    with pytest.raises(PosxError, match=re.escape(needle)):
        freqplot.check_overrides(overrides, with_run)
    freqplot.check_overrides(["eval.yarn.beta_fast=16", "results_dir=out"], with_run)  # read: accepted


def test_frequencies_without_a_run_read_the_configured_model(tmp_path, monkeypatch):
    """No run: head_dim, base and T are the composed config's, so overrides of it count."""
    monkeypatch.chdir(tmp_path)
    cfg = compose([])
    default = CliRunner().invoke(app, ["frequencies", "--methods", "none", "--out", "a.png"])
    assert default.exit_code == 0, default.output
    want = f"head_dim={cfg.model.d_model // cfg.model.n_head}, base={cfg.pos.base:g}, T={cfg.train.context_length}"
    assert want in default.output
    changed = CliRunner().invoke(
        app, ["frequencies", "pos.base=500000", "model.n_head=2", "train.context_length=64", "--methods", "none"]
    )
    assert changed.exit_code == 0, changed.output
    assert f"head_dim={cfg.model.d_model // 2}, base=500000, T=64" in changed.output


def test_frequency_tables_split_over_a_narrow_terminal_and_cut_no_value():
    cfg = compose(["device=cpu"])
    df, attention = freqplot.wavelength_table(cfg.eval, list(rope.METHODS), 16, 500.0, 16, 2.0)
    tables = freqplot.rich_tables(df, attention, 16, 32, "title", width=80)
    assert len(tables) > 1
    out = Console(file=io.StringIO(), width=80)
    for table in tables:
        out.print(table)
    text = out.file.getvalue()
    assert "…" not in text and "(1/" in text
    assert max(len(line) for line in text.splitlines()) <= 80
