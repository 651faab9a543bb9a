"""The newer methods' published claims, checked on synthetic summary tables with the 2-sigma rule."""

from __future__ import annotations

import pandas as pd
import pytest

from posx.report.claims import Numbers, check, method_claims, parse_label
from posx.report.groups import identity
from posx.runs.records import RunMeta

from helpers.model import spec
from helpers.summary import summary as _summary

BASE = {
    ("rope", "-", 1): (4.0, 0.1),
    ("rope", "-", 2): (8.0, 0.2),
    ("rope", "-", 4): (20.0, 0.5),
    ("rope", "-", 8): (60.0, 1.0),
    ("alibi", "-", 8): (4.5, 0.1),
    ("t5", "-", 8): (6.0, 0.1),
}


def _verdicts(cells: dict, extension: pd.DataFrame | None = None) -> dict[str, str]:
    rows = method_claims(Numbers(_summary(cells), extension))
    return {r["paper"].split(" (")[1].rstrip(")") if "(" in r["paper"] else r["paper"]: r["verdict"] for r in rows}


def test_no_run_of_a_method_no_claim_so_old_reports_keep_their_table():
    assert method_claims(Numbers(_summary(BASE))) == []
    assert len(check(Numbers(_summary(BASE)))) == 6  # the ALiBi and YaRN claims, as before


def test_fire_kerple_and_xpos_reproduce_and_reverse_as_the_numbers_say():
    cells = {**BASE, ("fire", "-", 8): (4.0, 0.1), ("kerple", "-", 8): (4.1, 0.1), ("xpos", "-", 2): (6.0, 0.1)}
    cells |= {("xpos", "-", 4): (10.0, 0.1), ("xpos", "-", 8): (30.0, 1.0)}
    v = _verdicts(cells)
    assert v["FIRE"] == v["KERPLE"] == v["xPos"] == "reproduced"
    cells[("fire", "-", 8)] = (7.0, 0.1)  # worse than ALiBi and T5: reversed
    cells[("kerple", "-", 8)] = (4.6, 0.1)  # within 2 sigma of ALiBi's 4.5: not called
    cells[("xpos", "-", 8)] = (60.5, 1.0)  # within 2 sigma of RoPE at 8x: not called
    v = _verdicts(cells)
    assert v["FIRE"] == "reversed" and v["KERPLE"] == v["xPos"] == "not reproduced"


def test_partial_rope_is_read_from_the_group_label():
    label = "pos.rotary_fraction=0.25"
    cells = {**BASE}
    cells[("rope", "pos.rotary_fraction=1", 1)] = cells.pop(("rope", "-", 1))
    cells[("rope", "pos.rotary_fraction=1", 8)] = cells.pop(("rope", "-", 8))
    cells |= {("rope", label, 1): (4.05, 0.1), ("rope", label, 8): (20.0, 1.0)}
    assert _verdicts(cells)["p-RoPE"] == "reproduced"  # no worse at T (within 2 sigma), better far out
    cells[("rope", label, 1)] = (5.0, 0.1)  # worse at T by far
    assert _verdicts(cells)["p-RoPE"] == "not reproduced"


def test_scales_randomized_and_nope_layers_against_plain_rope():
    cells = {**BASE}
    for label in ("model.attn_scale=logn", "model.attn_scale=ssmax", "pos.randomized=True", "model.nope_every=4"):
        cells[("rope", label, 8)] = (30.0, 1.0)
    v = _verdicts(cells)
    assert v["log-n scaling"] == v["Scalable-Softmax"] == v["randomized positions"] == "reproduced"
    assert v["hybrid NoPE layers"] == "reproduced"
    cells[("rope", "model.nope_every=4", 8)] = (90.0, 1.0)
    assert _verdicts(cells)["hybrid NoPE layers"] == "reversed"


def test_resonance_improves_yarn_in_the_extension_table():
    ext = pd.DataFrame(
        [
            {"group": "-", "method": "yarn", "factor": 4.0, "extended": 5.0, "extended_std": 0.1},
            {"group": "-", "method": "resonance_yarn", "factor": 4.0, "extended": 4.5, "extended_std": 0.1},
        ]
    ).assign(zero_shot=9.0, zero_shot_std=0.2)
    assert _verdicts(BASE, ext)["Resonance RoPE"] == "reproduced"
    ext.loc[1, "extended"] = 5.05
    assert _verdicts(BASE, ext)["Resonance RoPE"] == "not reproduced"


def test_a_run_without_an_option_key_counts_as_its_default():
    cells = {**BASE, ("rope", "model.attn_scale=logn", 8): (30.0, 1.0)}
    cells[("rope", "model.attn_scale=—", 8)] = cells.pop(("rope", "-", 8))  # a run written before the key
    assert _verdicts(cells)["log-n scaling"] == "reproduced"


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
    def row(pose: bool, extended: float, zero: float) -> dict:
        group = "extend.pose=True" if pose else "extend.pose=False"
        return {"group": group, "method": "yarn", "factor": 4.0, "extended": extended, "extended_std": 0.1,
                "zero_shot": zero, "zero_shot_std": 0.2}  # fmt: skip

    ext = pd.DataFrame([row(False, 5.0, 9.0), row(True, 5.2, 9.0)])
    assert _verdicts(BASE, ext)["PoSE"] == "reproduced"  # 5.2 < 1.1 x 5.0 and < 9.0
    ext = pd.DataFrame([row(False, 5.0, 9.0), row(True, 7.0, 9.0)])
    assert _verdicts(BASE, ext)["PoSE"] == "reversed"  # far from the fine-tune
    assert "PoSE" not in _verdicts(BASE, pd.DataFrame([row(False, 5.0, 9.0)]))  # no PoSE run: no claim


def _held_rows(summary: pd.DataFrame, name: str) -> list[dict]:
    return [r for r in method_claims(Numbers(summary)) if name in r["paper"]]


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
    """Flat (no worse than RoPE at T) and below plain RoPE far out: reproduced; climbing past
    RoPE's 1x by more than 2 sigma: not reproduced; no rows of the method: no claim."""
    summary = _summary(BASE)
    rows = summary[summary["encoding"] == "rope"].assign(method=method)
    rows.loc[rows["factor"] == 8.0, ["ppl_mean", "ppl_std"]] = (4.1, 0.1)
    assert _held_rows(summary, name) == []
    (row,) = _held_rows(pd.concat([summary, rows]), name)
    assert row["verdict"] == "reproduced" and f"rope/{method} at 8x 4.100" in row["numbers"]
    rows.loc[rows["factor"] == 8.0, "ppl_mean"] = 5.0  # flat no more: 1.0 above 4.0 at T, sigma 0.14
    (row,) = _held_rows(pd.concat([summary, rows]), name)
    assert row["verdict"] == "not reproduced"


def test_rerope_is_called_from_its_rows_at_2x_and_4x_against_rope_at_t():
    """Below RoPE's 1x at 2x and 4x by more than 2 sigma: reproduced; above it at 4x: reversed."""
    summary = _summary(BASE)
    rectified = summary[summary["encoding"] == "rope"].assign(method="rerope")
    rectified.loc[rectified["factor"].isin([2.0, 4.0]), ["ppl_mean", "ppl_std"]] = (3.5, 0.1)

    def verdict(rows: pd.DataFrame) -> str:
        (row,) = [r for r in method_claims(Numbers(pd.concat([summary, rows]))) if "ReRoPE" in r["paper"]]
        return row["verdict"]

    assert not [r for r in method_claims(Numbers(summary)) if "ReRoPE" in r["paper"]]
    assert verdict(rectified) == "reproduced"
    rectified.loc[rectified["factor"] == 4.0, "ppl_mean"] = 5.0
    assert verdict(rectified) == "reversed"
