"""The papers' claims (``scripts.study.claims``), the newer methods' and ALiBi's, checked on synthetic
per-seed cells by the one rule of posx.report.stats (three seeds each, paired by seed)."""

from __future__ import annotations

import pandas as pd
import pytest

from posx.report.store.groups import identity
from posx.runs.records import RunMeta
from scripts.study.claims import COMPARISON_COLUMNS, Numbers, check, corrected, method_claims, parse_label, per_claim

from helpers.model import spec
from helpers.summary import per_seed

BASE = {
    ("rope", "-", 1): (4.0, 0.1),
    ("rope", "-", 2): (8.0, 0.2),
    ("rope", "-", 4): (20.0, 0.5),
    ("rope", "-", 8): (60.0, 1.0),
    ("alibi", "-", 8): (4.5, 0.1),
    ("t5", "-", 8): (6.0, 0.1),
}


def _table(seeds: pd.DataFrame, extension: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per claim of the newer methods: paper, claim, verdict, holm_verdict."""
    rows = [r for claim in method_claims(Numbers(seeds, extension)) for r in claim]
    frame = pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
    return per_claim(corrected(frame, ["paper", "claim"]), ["paper", "claim"]) if rows else frame


def _verdicts(cells: dict, extension: pd.DataFrame | None = None, extended: dict | None = None) -> dict[str, str]:
    seeds = per_seed(cells)
    if extended:
        seeds = pd.concat([seeds, per_seed(extended, parent="rope-T128")], ignore_index=True)
    table = _table(seeds, extension)
    if table.empty:
        return {}
    return {p.split(" (")[1].rstrip(")") if "(" in p else p: v for p, v in zip(table["paper"], table["verdict"])}


def test_no_run_of_a_method_no_claim_so_old_reports_keep_their_table():
    assert method_claims(Numbers(per_seed(BASE))) == []
    assert check(Numbers(per_seed(BASE)))["claim"].nunique() == 6  # the ALiBi and YaRN claims, as before


def test_fire_kerple_and_xpos_supported_contradicted_or_inconclusive_as_the_numbers_say():
    cells = {**BASE, ("fire", "-", 8): (4.0, 0.1), ("kerple", "-", 8): (4.1, 0.1), ("xpos", "-", 2): (6.0, 0.1)}
    cells |= {("xpos", "-", 4): (10.0, 0.1), ("xpos", "-", 8): (30.0, 1.0)}
    v = _verdicts(cells)
    assert v["FIRE"] == v["KERPLE"] == v["xPos"] == "supported"
    cells[("fire", "-", 8)] = (7.0, 0.1)  # worse than ALiBi and T5 by far: contradicted
    cells[("kerple", "-", 8)] = (4.45, 0.3)  # 0.05 below ALiBi's 4.5 with a spread of 0.3: inconclusive
    cells[("xpos", "-", 8)] = (59.5, 3.0)  # 0.5 below RoPE's 60 with a spread of 3: inconclusive
    v = _verdicts(cells)
    assert v["FIRE"] == "contradicted" and v["KERPLE"] == v["xPos"] == "inconclusive"


def test_partial_rope_is_read_from_the_group_label():
    label = "pos.rotary_fraction=0.25"
    cells = {**BASE}
    cells[("rope", "pos.rotary_fraction=1", 1)] = cells.pop(("rope", "-", 1))
    cells[("rope", "pos.rotary_fraction=1", 8)] = cells.pop(("rope", "-", 8))
    cells |= {("rope", label, 1): (4.05, 0.1), ("rope", label, 8): (20.0, 1.0)}
    cells[("rope", label, 1)] = (4.0, 0.02)
    cells[("rope", "pos.rotary_fraction=1", 1)] = (4.0, 0.02)  # a spread small enough for three seeds
    assert _verdicts(cells)["p-RoPE"] == "supported"  # no worse at T (below 1.05 x RoPE's), better far out
    cells[("rope", label, 1)] = (5.0, 0.1)  # worse at T by far more than 5%
    assert _verdicts(cells)["p-RoPE"] == "contradicted"


def test_scales_randomized_and_nope_layers_against_plain_rope():
    cells = {**BASE}
    for label in ("model.attn_scale=logn", "model.attn_scale=ssmax", "pos.randomized=True", "model.nope_every=4"):
        cells[("rope", label, 8)] = (30.0, 1.0)
    v = _verdicts(cells)
    assert v["log-n scaling"] == v["Scalable-Softmax"] == v["randomized positions"] == "supported"
    assert v["hybrid NoPE layers"] == "supported"
    cells[("rope", "model.nope_every=4", 8)] = (90.0, 1.0)
    assert _verdicts(cells)["hybrid NoPE layers"] == "contradicted"


def _extension(*groups: str) -> pd.DataFrame:
    """extension.csv's rows that say which group is which extension: (group label, method)."""
    return pd.DataFrame([{"group": g, "method": g.split("method=")[1].split(",")[0], "factor": 4.0} for g in groups])


def test_resonance_improves_yarn_in_the_extension_table():
    yarn, res = "extend.pose=False, method=yarn", "extend.pose=False, method=resonance_yarn"
    extended = {
        ("rope", yarn, 4, "yarn (extended)"): (5.0, 0.1),
        ("rope", res, 4, "resonance_yarn (extended)"): (4.5, 0.1),
    }
    assert _verdicts(BASE, _extension(yarn, res), extended)["Resonance RoPE"] == "supported"
    extended[("rope", res, 4, "resonance_yarn (extended)")] = (4.98, 0.3)
    assert _verdicts(BASE, _extension(yarn, res), extended)["Resonance RoPE"] == "inconclusive"


def test_a_run_without_an_option_key_counts_as_its_default():
    cells = {**BASE, ("rope", "model.attn_scale=logn", 8): (30.0, 1.0)}
    cells[("rope", "model.attn_scale=—", 8)] = cells.pop(("rope", "-", 8))  # a run written before the key
    assert _verdicts(cells)["log-n scaling"] == "supported"


def test_labels_parse_into_keys_and_values():
    assert parse_label("-") == {}
    assert parse_label("model.attn_scale=logn, pos.rotary_fraction=0.5") == {
        "model.attn_scale": "logn",
        "pos.rotary_fraction": "0.5",
    }


def test_keys_a_model_never_reads_do_not_split_groups():
    """A run written before the newer options (model.json without them: the values format 1 built)
    and a new run with the same settings have one identity."""
    old = RunMeta(spec(), 64, {}, 10)
    new = RunMeta(spec(attn_scale_length=64, randomized_max=512), 64, {}, 10)
    assert identity({}, old, None, None, []) == identity({}, new, None, None, [])
    scaled = RunMeta(spec(attn_scale="logn", attn_scale_length=64), 64, {}, 10)
    assert identity({}, scaled, None, None, [])["model.attn_scale_length"] == "64"


def test_pose_comes_close_to_fine_tuning_at_the_new_length():
    full, pose = "extend.pose=False, method=yarn", "extend.pose=True, method=yarn"

    def extended(at_pose: float) -> dict:
        return {
            ("rope", full, 4, "yarn (extended)"): (5.0, 0.02),
            ("rope", full, 4, "yarn (zero-shot)"): (9.0, 0.2),
            ("rope", pose, 4, "yarn (extended)"): (at_pose, 0.02),
            ("rope", pose, 4, "yarn (zero-shot)"): (9.0, 0.2),
        }

    assert _verdicts(BASE, _extension(full, pose), extended(5.2))["PoSE"] == "supported"  # < 1.1 x 5.0, < 9.0
    assert _verdicts(BASE, _extension(full, pose), extended(7.0))["PoSE"] == "contradicted"  # far from it
    assert "PoSE" not in _verdicts(BASE, _extension(full), extended(5.2))  # no PoSE run: no claim


def _held(seeds: pd.DataFrame, name: str) -> list[str]:
    table = _table(seeds)
    return list(table[table["paper"].str.contains(name, regex=False)]["verdict"]) if not table.empty else []


@pytest.mark.parametrize(
    "method, name",
    [
        ("self_extend", "Self-Extend"),
        ("lm_infinite", "LM-Infinite"),
        ("dca", "Dual Chunk Attention"),
        ("streaming_llm", "StreamingLLM"),
    ],
)
def test_a_training_free_method_is_called_from_its_rows_at_t_and_far_out(method, name):
    """Flat (no worse than 1.05 x RoPE at T) and below plain RoPE far out: supported; climbing
    past RoPE's 1x by far more than the margin: contradicted; no rows of the method: no claim."""
    cells = {**BASE, ("rope", "-", 1): (4.0, 0.02), ("rope", "-", 8, method): (4.1, 0.02)}
    assert _held(per_seed(BASE), name) == []
    assert _held(per_seed(cells), name) == ["supported"]
    rows = check(Numbers(per_seed(cells)))
    assert rows["comparison"].str.contains(f"rope/{method} at 8x 4.100", regex=False).any()
    cells[("rope", "-", 8, method)] = (5.0, 0.1)  # 1.0 above 4.0 at T: far past the 5% margin
    assert _held(per_seed(cells), name) == ["contradicted"]


def test_rerope_is_called_from_its_rows_at_2x_and_4x_against_rope_at_t():
    """Below RoPE's 1x at 2x and 4x: supported; above it at 4x by far: contradicted."""
    cells = {**BASE, ("rope", "-", 2, "rerope"): (3.5, 0.1), ("rope", "-", 4, "rerope"): (3.5, 0.1)}
    assert _held(per_seed(BASE), "ReRoPE") == []
    assert _held(per_seed(cells), "ReRoPE") == ["supported"]
    cells[("rope", "-", 4, "rerope")] = (5.0, 0.1)
    assert _held(per_seed(cells), "ReRoPE") == ["contradicted"]


def _claims(cells: dict) -> pd.DataFrame:
    """The claims of per-seed cells (encoding, method, factor) -> (mean, std), one row per claim."""
    rows = check(Numbers(per_seed({(e, "-", f, m): v for (e, m, f), v in cells.items()})))
    return per_claim(corrected(rows, ["paper", "claim"]), ["paper", "claim"])


def test_the_alibi_paper_orderings_are_supported_and_contradicted_as_the_numbers_say():
    cells = {
        ("sinusoidal", "none", 1): (4.0, 0.1),
        ("sinusoidal", "none", 2): (40.0, 5.0),
        ("sinusoidal", "none", 8): (900.0, 50.0),
        ("rope", "none", 1): (4.0, 0.1),
        ("rope", "none", 8): (60.0, 5.0),
        ("t5", "none", 1): (4.0, 0.1),
        ("t5", "none", 8): (8.0, 0.5),
        ("alibi", "none", 1): (4.0, 0.1),
        ("alibi", "none", 8): (3.9, 0.02),  # 0.3 below 1.05 x 4.0, far beyond 3 seeds' spread
    }
    claims = _claims(cells)
    verdicts = dict(zip(claims["claim"].str.split(" ").str[0], claims["verdict"]))
    assert verdicts["sinusoidal"] == verdicts["rotary"] == verdicts["ALiBi"] == "supported"
    assert verdicts["the"] == "supported"  # the T5 bias degrades slowly
    cells[("alibi", "none", 8)] = (6.0, 0.1)  # worse far out than at T by far more than 5%: not flat
    claims = _claims(cells)
    assert claims[claims["claim"].str.startswith("ALiBi")]["verdict"].iloc[0] == "contradicted"
    cells[("alibi", "none", 8)] = (4.1, 0.1)  # 2.5% worse: inside the 5% of "no worse", but not clearly
    claims = _claims(cells)
    assert claims[claims["claim"].str.startswith("ALiBi")]["verdict"].iloc[0] == "inconclusive"
    cells[("t5", "none", 8)] = (90.0, 1.0)  # T5 worse than rotary by far: that part is contradicted
    claims = _claims(cells)
    assert claims[claims["claim"].str.startswith("the T5")]["verdict"].iloc[0] == "contradicted"
