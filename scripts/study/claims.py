"""The papers' extrapolation claims, checked against a study's numbers.

Each claim is a set of comparisons "a is lower than b" between two cells of a study: a
perplexity per seed (``scripts.study.seed_cells``, whose means are ``summary.csv``'s). Every
comparison is called by the one rule of ``posx.report.stats``: the difference of means with its
95% interval (paired t by seed where both cells have the same seeds, Welch's t otherwise), and
its outcome *supported*, *contradicted* or *inconclusive* (the smallest difference it could
have detected stated), or *not checked* (a cell missing, or with one seed). "Within 10%" and "no
worse than" are non-inferiority tests: a < (1 + margin)·b, the margin RECOVERED − 1 or
``stats.NO_WORSE``.

Perplexities at different lengths are compared only where the claim is about degradation: with
non-overlapping windows a model that used the longer context well would score *lower* at s·T
than at T, so "worse at s·T than at T" is a conservative test of "poor".

A claim is contradicted when any of its comparisons is, else inconclusive when any is, else not
checked when any is, else supported (``stats.combine``): a claim whose cells a study did not
score says so instead of counting against the paper. ``corrected`` adds Holm's correction across
a study's comparisons beside the uncorrected calls. The claims, below, are those of the ALiBi
paper (four encodings past T), of PI, YaRN and Llama 2 Long (ABF) on trained and extended runs,
and of the newer methods
(``method_claims``), each of those listed only when the report has a run of its method, so a
report without them keeps its table; every paper, with its arXiv id, is cited in
docs/encodings.md. ReRoPE's claim is about ReRoPE, ``eval.rerope.leak_factor``'s default: the
rows do not say whether it was set.

A run with one of the options (``pos.rotary_fraction``, ``model.attn_scale``, ...) is found by its
group label (``posx.report.store.groups``): a key the label does not name counts as at its default.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from posx.report.stats import NO_WORSE, Sample, combine, compare, holm, holm_call

ALIBI, PI, YARN, ABF = (
    "Press et al. 2022 (ALiBi)",
    "Chen et al. 2023 (PI)",
    "Peng et al. 2023 (YaRN)",
    "Xiong et al. 2023 (Llama 2 Long, ABF)",
)
FIRE, KERPLE, XPOS, PROPE, RANDOMIZED, LOGN, SSMAX, HYBRID, RESONANCE, POSE = (
    "Li et al. 2024 (FIRE)",
    "Chi et al. 2022 (KERPLE)",
    "Sun et al. 2023 (xPos)",
    "Barbero et al. 2025 (p-RoPE)",
    "Ruoss et al. 2023 (randomized positions)",
    "Chiang & Cholak 2022 (log-n scaling)",
    "Nakanishi 2025 (Scalable-Softmax)",
    "Yang et al. 2025 (hybrid NoPE layers)",
    "Wang et al. 2024 (Resonance RoPE)",
    "Zhu et al. 2024 (PoSE)",
)
SELF_EXTEND, REROPE, LM_INFINITE = "Jin et al. 2024 (Self-Extend)", "Su 2023 (ReRoPE)", "Han et al. 2024 (LM-Infinite)"
DCA, STREAMING = "An et al. 2024 (Dual Chunk Attention)", "Xiao et al. 2024 (StreamingLLM)"
# The options the newer claims compare, as group labels write them, with their defaults.
OPTION_DEFAULTS = {
    "pos.rotary_fraction": "1",
    "model.attn_scale": "none",
    "model.nope_every": "0",
    "pos.randomized": "False",
}
RECOVERED = 1.10  # "fixed": the extended model at s·T within 10% of the parent's perplexity at T


Cell = Sample  # a claim's number: one value per seed (posx.report.stats.Sample)
COMPARISON_COLUMNS = [
    "paper", "claim", "comparison", "low", "high", "n_low", "n_high", "diff", "ci_low", "ci_high", "test", "df",
    "p", "outcome", "detectable", "low_seeds", "low_values", "high_seeds", "high_values",
]  # fmt: skip


def listed(values) -> str:
    """Seeds or values as claims.csv lists them: space-separated, values to full precision."""
    return " ".join(repr(float(v)) if isinstance(v, float) else str(v) for v in values)


class Numbers:
    """Per-seed cells of one study (``scripts.study.seed_cells``), read by (encoding, method, factor)
    for trained runs and by (method, what) for the extension table, whose rows say which group is
    which extension. ``groups`` names, per encoding, the group to read where an encoding has
    several (e.g. the gpt2 and the llama block)."""

    def __init__(
        self,
        seeds: pd.DataFrame,
        extension: pd.DataFrame | None = None,
        groups: dict | None = None,
        protocol: str = "nonoverlapping",
    ):
        mine = seeds[seeds["protocol"] == protocol]
        trained = mine[mine["parent"].fillna("") == ""]
        for enc, group in (groups or {}).items():
            trained = trained[(trained["encoding"] != enc) | (trained["group"] == group)]
        self.trained, self.seeds = trained, mine
        self.extension = extension if extension is not None else pd.DataFrame()

    def ppl(self, encoding: str, method: str, factor: float) -> Cell:
        """The encoding's cell with ``method``, of the group with every option at its default."""
        return self._cell(encoding, method, factor, {}, f"{encoding}/{method} at {factor:g}x")

    def option(self, encoding: str, factor: float, settings: dict | None = None) -> Cell:
        """The encoding's own cell (method none) of the group with ``settings`` (group-label keys
        and values) and every other option of OPTION_DEFAULTS at its default."""
        settings = settings or {}
        label = " ".join([encoding, *(f"{k}={v}" for k, v in settings.items()), f"at {factor:g}x"])
        return self._cell(encoding, "none", factor, settings, label)

    def _cell(self, encoding: str, method: str, factor: float, settings: dict, label: str) -> Cell:
        wanted = {**OPTION_DEFAULTS, **settings}
        rows = self.trained[
            (self.trained["encoding"] == encoding)
            & (self.trained["method"] == method)
            & np.isclose(self.trained["factor"], factor)
        ]
        return _sample(rows[np.array([matches(str(g), wanted) for g in rows["group"]], dtype=bool)], label)

    def labelled(self, key: str) -> set[str]:
        """Every value ``key`` takes in a group label of the report."""
        return {parse_label(str(g)).get(key) for g in self.trained["group"]} - {None}

    def extended(self, method: str, column: str, pose: bool = False) -> Cell:
        """``column``: zero_shot or extended (at s·T), extended_1x; ``pose``: of the extension
        with ``extend.pose`` (its group label says extend.pose=True) or of the one without."""
        rows = self.extension[self.extension["method"] == method] if not self.extension.empty else self.extension
        if len(rows):
            rows = rows[[parse_label(str(g)).get("extend.pose", "False") == str(pose) for g in rows["group"]]]
        label = {
            "zero_shot": f"{method} zero-shot at s·T",
            "extended": f"{method} PoSE-trained at T, at s·T" if pose else f"{method} fine-tuned at s·T",
            "extended_1x": f"{method} fine-tuned at T",
        }[column]
        if len(rows) != 1:
            return Cell(label)
        stage = "zero-shot" if column == "zero_shot" else "extended"
        factor = 1.0 if column == "extended_1x" else self.factor()
        cells = self.seeds[
            (self.seeds["group"] == str(rows["group"].iloc[0]))
            & (self.seeds["method"] == f"{method} ({stage})")
            & np.isclose(self.seeds["factor"], factor)
        ]
        return _sample(cells, label)

    def factor(self) -> float:
        return float(self.extension["factor"].iloc[0]) if not self.extension.empty else math.nan


def _sample(rows: pd.DataFrame, label: str) -> Cell:
    """The cell of ``rows`` (one group's seeds); empty when no group or several groups match."""
    if rows["group"].nunique() != 1:
        return Cell(label)
    return Cell(label, tuple(float(v) for v in rows["ppl"]), tuple(int(s) for s in rows["seed"]))


def parse_label(label: str) -> dict[str, str]:
    """A group label "k=v, k2=v2" (``posx.report.store.groups``) as a dict; "-" is empty."""
    parts = re.split(r", (?=[\w.]+=)", label) if label not in ("", "-") else []
    return dict(p.split("=", 1) for p in parts if "=" in p)


def matches(label: str, wanted: dict[str, str]) -> bool:
    """Whether a group label has ``wanted``; a key it does not name, or names as "—" (a run
    without the key), counts as at its default."""
    found = {k: v for k, v in parse_label(label).items() if v != "—"}
    return all(found.get(k, OPTION_DEFAULTS.get(k)) == v for k, v in wanted.items())


def _row(paper: str, claim: str, text: str, low: Cell, high: Cell) -> dict:
    """One comparison "low < high" of a claim, with its test (``posx.report.stats.compare``)."""
    t = compare(low, high)
    values = [text, low.label, high.label, len(low.values), len(high.values), t.diff, t.lo, t.hi, t.test, t.df, t.p]
    arms = [listed(low.seeds), listed(low.values), listed(high.seeds), listed(high.values)]
    return dict(zip(COMPARISON_COLUMNS, [paper, claim, *values, t.outcome, t.detectable, *arms]))


def _claim(paper: str, claim: str, pairs: list[tuple[Cell, Cell]], flat: list[tuple[Cell, Cell]] = ()) -> list[dict]:
    """``pairs``: (a, b) where the paper says a < b. ``flat``: (a, b) where it says a is no worse
    than b: the non-inferiority test a < (1 + NO_WORSE)·b (``posx.report.stats``)."""
    rows = [_row(paper, claim, f"{lo.text()} < {hi.text()}", lo, hi) for lo, hi in pairs]
    for a, b in flat:
        bound = b.scaled(1 + NO_WORSE)
        text = f"{a.text()} no worse than {b.text()}: below {bound.label} {bound.mean:.3f}"
        rows.append(_row(paper, claim, text, a, bound))
    return rows


def check(numbers: Numbers, longest: float = 8.0) -> pd.DataFrame:
    """Every comparison of every claim whose cells the report has (the extension claims need an
    extension table), one row each (COMPARISON_COLUMNS)."""
    found = [*_trained_claims(numbers, longest), *_extension_claims(numbers), *method_claims(numbers, longest)]
    return pd.DataFrame([row for rows in found for row in rows], columns=COMPARISON_COLUMNS)


def corrected(rows: pd.DataFrame, claim_keys: list[str]) -> pd.DataFrame:
    """A study's comparisons with Holm's correction across all of them (``p_holm``,
    ``holm_outcome``) and each claim's outcome, uncorrected (``verdict``) and corrected
    (``holm_verdict``), combined over the comparisons sharing ``claim_keys``."""
    rows = rows.assign(p_holm=holm(list(rows["p"].astype(float))))
    rows["holm_outcome"] = [holm_call(o, p) for o, p in zip(rows["outcome"], rows["p_holm"])]
    by = rows.groupby(claim_keys, sort=False)
    rows["verdict"] = by["outcome"].transform(lambda s: combine(list(s)))
    rows["holm_verdict"] = by["holm_outcome"].transform(lambda s: combine(list(s)))
    return rows


def per_claim(rows: pd.DataFrame, claim_keys: list[str]) -> pd.DataFrame:
    """One row per claim of ``corrected`` rows: its keys, verdict and Holm-corrected verdict."""
    return rows.drop_duplicates(claim_keys)[[*claim_keys, "verdict", "holm_verdict"]].reset_index(drop=True)


def _trained_claims(n: Numbers, longest: float) -> list[dict]:
    """The claims on trained runs: the ALiBi paper's four encodings past T, zero-shot YaRN's lead."""
    rows = [
        _claim(
            ALIBI,
            "sinusoidal blows up past T (worse at 2x than at T, and worse than rotary far out)",
            [
                (n.ppl("sinusoidal", "none", 1), n.ppl("sinusoidal", "none", 2)),
                (n.ppl("rope", "none", longest), n.ppl("sinusoidal", "none", longest)),
            ],
        ),
        _claim(ALIBI, "rotary degrades past T", [(n.ppl("rope", "none", 1), n.ppl("rope", "none", longest))]),
        _claim(
            ALIBI,
            "the T5 bias degrades slowly (worse than at T, better than rotary)",
            [
                (n.ppl("t5", "none", 1), n.ppl("t5", "none", longest)),
                (n.ppl("t5", "none", longest), n.ppl("rope", "none", longest)),
            ],
        ),
        _claim(
            ALIBI,
            "ALiBi stays flat (no worse than at T, and better than the T5 bias far out)",
            [(n.ppl("alibi", "none", longest), n.ppl("t5", "none", longest))],
            flat=[(n.ppl("alibi", "none", longest), n.ppl("alibi", "none", 1))],
        ),
    ]
    lengths = (2, 4, longest)
    return rows + [
        _claim(
            YARN,
            f"zero-shot YaRN beats {name} (at {', '.join(f'{f:g}x' for f in lengths)})",
            [(n.ppl("rope", "yarn", f), n.ppl("rope", method, f)) for f in lengths],
        )
        for method, name in (("pi", "PI"), ("ntk", "NTK"))
    ]


def _extension_claims(n: Numbers) -> list[dict]:
    """The PI, YaRN and ABF claims on the extension table; none without one."""
    if n.extension.empty:
        return []
    s = n.factor()
    parent = n.ppl("rope", "none", 1)
    target = parent.scaled(RECOVERED)
    return [
        _claim(
            PI,
            f"zero-shot PI is poor at s·T = {s:g}x (worse than the parent at T)",
            [(parent, n.extended("pi", "zero_shot"))],
        ),
        _claim(
            PI,
            f"a short fine-tune fixes PI (better than zero-shot, within {RECOVERED - 1:.0%} of the parent at T)",
            [(n.extended("pi", "extended"), n.extended("pi", "zero_shot")), (n.extended("pi", "extended"), target)],
        ),
        _claim(
            YARN,
            "fine-tuned YaRN is the best extension",
            [(n.extended("yarn", "extended"), n.extended(m, "extended")) for m in ("pi", "abf", "none")],
        ),
        _claim(
            ABF,
            "ABF needs training (zero-shot worse than fine-tuned, and worse than the parent at T)",
            [
                (n.extended("abf", "extended"), n.extended("abf", "zero_shot")),
                (parent, n.extended("abf", "zero_shot")),
            ],
        ),
    ]


# Training-free methods claimed to hold RoPE's perplexity at T far past it: (method, paper, name).
_HELD = [
    ("self_extend", SELF_EXTEND, "Self-Extend"),
    ("lm_infinite", LM_INFINITE, "LM-Infinite"),
    ("dca", DCA, "Dual Chunk Attention"),
    ("streaming_llm", STREAMING, "StreamingLLM"),
]


def _held(n: Numbers, longest: float, method: str, paper: str, name: str) -> tuple:
    """(paper, claim, pairs, flat pairs): ``method`` at the longest factor below plain RoPE there,
    and no worse than RoPE at T."""
    cell = n.ppl("rope", method, longest)
    claim = f"{name}, without training, holds RoPE's perplexity at T to {longest:g}x, where plain RoPE climbs"
    return paper, claim, [(cell, n.ppl("rope", "none", longest))], [(cell, n.ppl("rope", "none", 1))]


def method_claims(n: Numbers, longest: float = 8.0) -> list[dict]:
    """The newer methods' claims (module docstring), each only where the report has a run of
    the method: (paper, claim, pairs where the first is the method's cell, flat pairs)."""
    flat = [_held(n, longest, method, paper, name) for method, paper, name in _HELD]
    rerope = (
        REROPE,
        "ReRoPE, without training, scores lower at 2x and 4x T than RoPE at T (longer context, lower loss)",
        [(n.ppl("rope", "rerope", f), n.ppl("rope", "none", 1)) for f in (2, 4)],
        [],
    )
    found = [*_option_comparisons(n, longest), *flat, rerope, *_extension_comparisons(n)]
    return [_claim(paper, claim, pairs, flat) for paper, claim, pairs, flat in found if pairs[0][0].values]


def _option_comparisons(n: Numbers, longest: float) -> list[tuple]:
    """(paper, claim, pairs, flat pairs) of the methods trained as an encoding or an option."""
    rope_t, rope_far = n.option("rope", 1), n.option("rope", longest)
    past = (2, 4, longest)
    at = ", ".join(f"{f:g}x" for f in past)
    found = [
        (
            FIRE,
            f"FIRE beats ALiBi and the T5 bias far past T ({longest:g}x)",
            [(n.option("fire", longest), n.option(other, longest)) for other in ("alibi", "t5")],
            [],
        ),
        (
            KERPLE,
            f"KERPLE's log kernel beats ALiBi far past T ({longest:g}x)",
            [(n.option("kerple", longest), n.option("alibi", longest))],
            [],
        ),
        (XPOS, f"xPos beats RoPE past T (at {at})", [(n.option("xpos", f), n.option("rope", f)) for f in past], []),
    ]
    for p in sorted(n.labelled("pos.rotary_fraction") - {OPTION_DEFAULTS["pos.rotary_fraction"]}):
        part = {"pos.rotary_fraction": p}
        found.append(
            (
                PROPE,
                f"RoPE rotating a fraction {p} of its pairs is no worse at T and better at {longest:g}x",
                [(n.option("rope", longest, part), rope_far)],
                [(n.option("rope", 1, part), rope_t)],
            )
        )
    for paper, key, value, what in (
        (RANDOMIZED, "pos.randomized", "True", "randomized positions improve"),
        (LOGN, "model.attn_scale", "logn", "log-n scaling improves"),
        (SSMAX, "model.attn_scale", "ssmax", "Scalable-Softmax improves"),
    ):
        found.append(
            (
                paper,
                f"{what} RoPE far past T ({longest:g}x)",
                [(n.option("rope", longest, {key: value}), rope_far)],
                [],
            )
        )
    for k in sorted(n.labelled("model.nope_every") - {OPTION_DEFAULTS["model.nope_every"]}):
        cell = n.option("rope", longest, {"model.nope_every": k})
        found.append(
            (HYBRID, f"NoPE every {k} layers extrapolates better than RoPE in every layer", [(cell, rope_far)], [])
        )
    return found


def _extension_comparisons(n: Numbers) -> list[tuple]:
    """(paper, claim, pairs, flat pairs) of Resonance RoPE and PoSE; none without an extension table."""
    if n.extension.empty:
        return []
    pair = (n.extended("resonance_yarn", "extended"), n.extended("yarn", "extended"))
    found = [(RESONANCE, "Resonance improves YaRN (both fine-tuned, at s·T)", [pair], [])]
    for method in sorted(set(n.extension["method"])):
        pose, full = n.extended(method, "extended", pose=True), n.extended(method, "extended")
        near = full.scaled(RECOVERED)
        claim = f"{method} with PoSE at T comes within {RECOVERED - 1:.0%} of fine-tuning at s·T, beating zero-shot"
        found.append((POSE, claim, [(pose, near), (pose, n.extended(method, "zero_shot"))], []))
    return found
