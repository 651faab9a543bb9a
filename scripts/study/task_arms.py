"""The retrieval comparison's arms: every encoding with and without the short convolution.

The recipe (``experiment=retrieval``) puts a short causal convolution before each block's
attention (``model.short_conv``). It gives every model learned local order, whatever its
encoding, so a comparison of encodings with it in every arm compares "encoding + convolution".
Each encoding therefore has two arms: ``<encoding>`` with ``model.short_conv=0`` (pure
attention, the setting of the length-generalisation papers) and ``<encoding>-conv`` with the
recipe's kernel, named for what they have (``NoPE`` and ``NoPE + conv``). An arm's id is the
``encoding`` column of the study's exact shares (``scripts.study.task_claims``), so a claim
about ``nope`` is checked on the model without the convolution, and one about ``nope-conv`` on
the model with it. ``conv_effect`` reports the convolution's effect as rows of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from posx.report.stats import compare
from posx.report.tables.mdtable import md_table
from scripts.study import task_claims
from scripts.study.task_claims import PAST, cell

CONV_KERNEL = 4  # the recipe's model.short_conv (configs/experiment/retrieval.yaml)
CONV = "-conv"  # an arm with the convolution: <encoding>-conv
ENCODINGS = {  # the study's name of each encoding -> its training overrides
    "rope": ["pos=rope"],
    "nope": ["pos=nope"],
    "alibi": ["pos=alibi"],
    "fire": ["pos=fire"],
    "xpos": ["pos=xpos"],
    "rope-randomized": ["pos=rope", "pos.randomized=true"],
    "rope-partial": ["pos=rope", "pos.rotary_fraction=0.25"],
    "rope-hybrid": ["pos=rope", "model.nope_every=2"],
}
ENCODING_LABELS = {
    "rope": "RoPE",
    "nope": "NoPE",
    "alibi": "ALiBi",
    "fire": "FIRE",
    "xpos": "xPos",
    "rope-randomized": "RoPE, randomized positions",
    "rope-partial": "RoPE rotating 25% of its pairs",
    "rope-hybrid": "RoPE, NoPE in every 2nd layer",
}
SAMPLED_AT_TEST = ("rope-randomized",)  # trained on sampled positions: scored on sampled ones too, dense beside
DENSE = "dense"  # the exact shares' method of such an arm scored on the dense positions 0 .. n-1
CONV_CHOICES = ("both", "with", "without")  # the study's --conv: which arms of each encoding


@dataclass(frozen=True)
class Arm:
    encoding: str  # a key of ENCODINGS
    conv: bool  # model.short_conv=CONV_KERNEL (True) or 0

    @property
    def name(self) -> str:
        return self.encoding + (CONV if self.conv else "")

    @property
    def label(self) -> str:
        return ENCODING_LABELS[self.encoding] + (" + conv" if self.conv else "")

    @property
    def sampled(self) -> bool:
        """Evaluated as published on sampled positions (method ``none``), and on dense ones (``DENSE``)."""
        return self.encoding in SAMPLED_AT_TEST

    @property
    def overrides(self) -> list[str]:
        return [*ENCODINGS[self.encoding], f"model.short_conv={CONV_KERNEL if self.conv else 0}"]


ARMS = {a.name: a for e in ENCODINGS for a in (Arm(e, False), Arm(e, True))}  # name -> Arm
LABELS = {name: a.label for name, a in ARMS.items()}  # the figure's legend text
FAMILIES = {  # the encoding whose colour an arm takes a shade of: RoPE's variants and every conv arm
    name: ("rope" if a.encoding.startswith("rope-") else a.encoding)
    for name, a in ARMS.items()
    if a.conv or a.encoding.startswith("rope-")
}


def check_claims(shares: pd.DataFrame) -> pd.DataFrame:
    """The papers' claims (``task_claims.check``) on the arms without the convolution, the setting
    the papers tested, and again on the arms with it where the study has them (each such claim's
    text says so); only on the arms without it when the study has neither."""
    names = set(shares["encoding"])
    conv = any(str(n).endswith(CONV) for n in names)
    families = [("", "")] if not conv or any(n in ENCODINGS for n in names) else []
    families += [(CONV, " (arms with the convolution)")] if conv else []
    return pd.concat([task_claims.check(shares, *f) for f in families], ignore_index=True)


def arms(encodings: list[str], conv: str) -> list[str]:
    """The arm names of ``encodings`` for ``--conv`` (both: without, then with)."""
    sides = {"both": (False, True), "with": (True,), "without": (False,)}[conv]
    return [Arm(e, c).name for e in encodings for c in sides]


EFFECT_COLUMNS = ["encoding", "task", "where", "without", "with", "difference", "ci_low", "ci_high", "test", "seeds"]


def conv_effect(shares: pd.DataFrame) -> pd.DataFrame:
    """The convolution's effect, one row per encoding, task and place (at T: 1x; past T: the mean
    of 2x, 4x and 8x per seed): mean exact share without and with it, the difference (with −
    without) and its 95% CI by the one rule of ``posx.report.stats`` (paired t by seed where both arms have the
    same seeds, Welch's t otherwise; none with fewer than two seeds an arm). Only encodings with
    both arms in ``shares`` (method ``none``) get rows."""
    rows = []
    names = set(shares["encoding"])
    for encoding in ENCODINGS:
        if encoding not in names or encoding + CONV not in names:
            continue
        for task in sorted(set(shares["task"])):
            for where, factors in (("at T", (1.0,)), ("past T", PAST)):
                rows.append(_effect(shares, encoding, task, where, factors))
    return pd.DataFrame([r for r in rows if r is not None], columns=EFFECT_COLUMNS)


def effect_table(shares: pd.DataFrame) -> pd.DataFrame:
    """The convolution's effect (``conv_effect``) as shown in STUDY.md: shares as percentages."""
    effect = conv_effect(shares)
    shown = effect[["encoding", "task", "where", "test", "seeds"]].copy()
    shown["without"] = effect["without"].map("{:.1%}".format)
    shown["with"] = effect["with"].map("{:.1%}".format)
    shown["difference"] = effect["difference"].map("{:+.1%}".format)
    shown["95% CI"] = [
        "(one seed)" if lo != lo else f"[{lo:+.1%}, {hi:+.1%}]" for lo, hi in zip(effect["ci_low"], effect["ci_high"])
    ]
    return shown[["encoding", "task", "where", "without", "with", "difference", "95% CI", "test", "seeds"]]


def conv_section(shares: pd.DataFrame) -> list[str]:
    """STUDY.md's section on the convolution's effect; none when no encoding has both arms."""
    effect = effect_table(shares) if not shares.empty else pd.DataFrame()
    if effect.empty:
        return []
    return [
        "## The convolution's effect",
        "",
        "Each encoding's arm with the short convolution "
        f"(`model.short_conv={CONV_KERNEL}`, `<encoding>-conv`) "
        "against its arm without it (`model.short_conv=0`): the mean exact share over seeds, the difference "
        "(with − without) and its 95% confidence interval (scipy.stats: paired t by seed, or Welch's t when "
        "the arms' seeds differ); past T is the per-seed mean of 2x, 4x and 8x.",
        "",
        md_table(effect),
        "",
    ]


def _effect(shares: pd.DataFrame, encoding: str, task: str, where: str, factors) -> dict | None:
    """One row of ``conv_effect``, called by the one rule (``posx.report.stats.compare`` of "without
    < with"); None when an arm has no seed there."""
    without, with_ = cell(shares, encoding, task, factors), cell(shares, encoding + CONV, task, factors)
    if not without.values or not with_.values:
        return None
    test = compare(without, with_)  # d = without - with: the effect is -d, its interval [-hi, -lo]
    return {
        "encoding": encoding, "task": task, "where": where, "without": without.mean, "with": with_.mean,
        "difference": with_.mean - without.mean, "ci_low": -test.hi, "ci_high": -test.lo,
        "test": test.test or "(one seed)", "seeds": f"{len(with_.values)}/{len(without.values)}",
    }  # fmt: skip
