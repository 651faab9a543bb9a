"""scripts/study/sections.py: the second edition's sections come from the runs' numbers (kinds by
run name, bits per byte per seed, an ordering named only where the interval of the difference of
means excludes zero, the first edition's verdict beside each claim, the extension rows named)."""

from __future__ import annotations

import pandas as pd
import pytest

from scripts.study import REPO, sections, verdicts
from scripts.study import figure as study_figure

import helpers.summary


def _sweep(values: dict[str, list[float]], factor: float = 8.0) -> pd.DataFrame:
    """One row per seed of each kind: bpb as given, ppl = 2**bpb (byte tokens)."""
    rows = [
        {"job": f"{kind}-s{seed}", "method": "none", "absolute_beyond": None, "protocol": "nonoverlapping",
         "factor": factor, "status": "ok", "bpb": v, "ppl": 2**v}
        for kind, vs in values.items()
        for seed, v in enumerate(vs)
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_an_extension_is_not_a_kind_and_seeds_pool():
    sweep = _sweep({"rope": [1.0, 1.2, 1.4]})
    sweep = pd.concat([sweep, sweep.iloc[:1].assign(job="rope-s0-yarn-x4", bpb=9.0)], ignore_index=True)
    table = sections.cells(sweep, "bpb")
    assert list(table["kind"]) == ["rope"] and table["count"].iloc[0] == 3
    assert table["mean"].iloc[0] == pytest.approx(1.2) and table["std"].iloc[0] == pytest.approx(0.2)
    cell = sections.cell(sections.seed_values(sweep, "bpb"), "rope", 8.0)
    assert cell.seeds == (0, 1, 2) and cell.values == pytest.approx((1.0, 1.2, 1.4))


def test_an_ordering_that_a_tokenizer_change_undoes_is_reported():
    sweep = pd.concat(
        [
            _sweep({"rope": [2.0, 2.1, 2.2], "alibi": [1.0, 1.1, 1.2]}, f)  # byte: ALiBi lower by 1.0, std 0.1
            for f in sections.FACTORS
        ]
        + [_sweep({"bpe-rope": [1.0, 1.5, 2.0], "bpe-alibi": [1.2, 1.4, 1.9]}, f) for f in sections.FACTORS]
    )
    text = "\n".join(sections.bpe_lines(sweep))
    row = next(line for line in text.splitlines() if line.startswith("| 8x T"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[5:] == ["ALiBi", "inconclusive", "no"]


def test_a_missing_arm_is_not_scored_rather_than_level():
    sweep = pd.concat(
        [_sweep({"rope": [2.0, 2.1], "bpe-rope": [1.0, 1.1], "bpe-alibi": [1.0, 1.1]}, f) for f in (1.0,)]
    )
    row = next(line for line in "\n".join(sections.bpe_lines(sweep)).splitlines() if line.startswith("| 1x T"))
    assert [c.strip() for c in row.strip("|").split("|")][5] == "—"


def test_each_verdict_stands_beside_the_first_editions(tmp_path):
    def rows(claims: list[str], verdict: str) -> pd.DataFrame:
        keys = {"paper": "P", "block": "gpt2", "protocol": "nonoverlapping", "holm_verdict": "inconclusive"}
        return pd.DataFrame([{**keys, "claim": c, "verdict": verdict} for c in claims])

    first = tmp_path / "claims.csv"
    rows(["a", "a"], "contradicted").to_csv(first, index=False)  # one claim, two comparisons
    text = "\n".join(sections.glance_lines(rows(["a", "b"], "supported"), first, "caption"))
    assert "This edition: 2 supported (of 2 checks). The first edition, under the same rule: 1 contradicted" in text
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| P ")]
    expected = [["supported", "inconclusive", "contradicted"], ["supported", "inconclusive", "not checked"]]
    assert [r[4:] for r in rows] == expected and "| Holm-corrected " in text


def test_the_bpe_arm_stays_out_of_the_byte_level_claims():
    byte, bpe = "data.tokenizer=byte", "data.tokenizer=bpe, data.vocab_size=1024"
    rows = [
        ("alibi", byte, 1, 4.4, 0.01), ("alibi", byte, 8, 4.3, 0.01), ("alibi", bpe, 1, 90.0, 1.0),
        ("alibi", bpe, 8, 99.0, 1.0), ("t5", "-", 1, 5.0, 0.1), ("t5", "-", 8, 8.6, 0.5),
    ]  # fmt: skip
    seeds = helpers.summary.per_seed({(e, g, f): (m, s) for e, g, f, m, s in rows})
    claims = verdicts.claims_table(seeds, None, {})
    flat = claims[claims["claim"].str.startswith("ALiBi stays flat")]
    assert set(flat["verdict"]) == {"supported"} and not flat["comparison"].str.contains("99.0").any()


def test_the_extension_rows_name_pose():
    columns = ("zero_shot", "extended", "extended_1x", "extended_2x_new")
    ext = pd.DataFrame(
        [
            {"group": f"extend.pose={p}, method=yarn", "parent": "rope-T128", "method": "yarn", "factor": 4.0,
             "steps": 200, "n_seeds": 3, **{c: 4.0 for c in columns}, **{f"{c}_std": 0.1 for c in columns}}
            for p in (True, False)
        ]
    )  # fmt: skip
    table = [line for line in "\n".join(sections.extension_lines(ext)).splitlines() if line.startswith("| yarn")]
    assert [line.split("|")[1].strip() for line in table] == ["yarn + PoSE (trained at T)", "yarn (fine-tuned at s·T)"]


def test_the_headline_figure_has_a_line_per_kind_in_its_panel():
    frames = [_sweep({"rope": [2.0, 2.2], "alibi": [1.8, 1.9], "rope-hybrid": [2.1, 2.3]}, f) for f in sections.FACTORS]
    sweep = pd.concat(frames + [f.assign(method="yarn") for f in frames[:1]], ignore_index=True)
    sweep = sweep[(sweep["job"].str.startswith("rope-s")) | (sweep["method"] == "none")]
    axes = study_figure.figure(sweep).axes
    labels = [[t for t in ax.get_legend_handles_labels()[1] if t != "training length T"] for ax in axes]
    assert labels == [
        ["rope (2)", "alibi (2)"],
        ["RoPE (2)", "NoPE every 2nd layer (2)"],
        ["none (2)", "yarn (2)"],
        ["none (2)"],
    ]


def test_the_task_arm_reads_the_committed_retrieval_arms(tmp_path):
    """The methods study's retrieval section, from the committed comparison: a row per encoding and task,
    every cell a share (an arm renamed there, e.g. to ``<encoding>-conv``, must not empty the table)."""
    retrieval = REPO / "results" / "reference" / "cpu-retrieval"
    lines = sections.task_lines(retrieval, tmp_path, tmp_path / "no-runs")
    rows = "\n".join(lines).splitlines()
    exact = pd.read_csv(retrieval / "exact.csv")
    kept = {e for e in exact["encoding"] if e.removesuffix(sections.CONV) in sections.TASK_ENCODINGS}
    table = [row for row in rows if row.startswith("| ") and row.split("|")[1].strip() in kept]
    assert kept and len(table) == len(kept) * exact["task"].nunique()
    assert not any("nan" in row for row in rows)
