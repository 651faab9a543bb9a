"""The papers' claims about retrieval and length generalisation, checked on a study's task tables.

The input is one row per (encoding, method, seed, task, factor) with ``exact``, the share of the
cell's samples whose every answer token was right (``exact_shares`` builds it from ``tasks.csv``
rows, pooling the depth ranges). ``encoding`` is the study's name of the model it trained
(``scripts/study/retrieval.py``): ``rope``, ``nope``, ``alibi``, ``fire``, ``xpos`` and
``rope-randomized`` (RoPE with randomized positions); ``method`` is the RoPE method it was
evaluated with (``none`` for the encoding as trained).

A number compared is one value per seed (``posx.report.stats.Sample``); "past T" is, per seed,
the mean exact share at 2x, 4x and 8x. Every comparison is called by the one rule of
``posx.report.stats``: the difference of means with its 95% interval (paired by seed where the
seeds coincide, Welch otherwise), *supported*, *contradicted* or *inconclusive* (with the
difference it could have detected), or *not checked* (one seed, or a run the claim needs is
missing). "a beats b" is the test b < a; "a is at least as good as b" is the non-inferiority
test (1 − NO_WORSE)·b < a; Zoology's "solves" is the test SOLVED < a at 1x. An encoding that did
not learn the task at T (mean exact share at 1x below ``LEARNED``: comparing chance with chance
says nothing) makes the comparison *inconclusive* without a test, and says so.

``check`` gives one row per comparison (``claims.COMPARISON_COLUMNS`` with ``citation`` and
``task``); ``claims.corrected`` adds Holm's correction and each claim's verdict per task, which
combine as every claim's do (``stats.combine``); ``per_task`` adds each claim's ``all tasks``
row, its tasks' verdicts combined the same way. The claims (each with its paper's citation; also
in docs/tasks.md): attention solves MQAR at this width (Zoology), NoPE generalises at least as
well as RoPE and ALiBi, randomized positions beat RoPE past T, and FIRE is no lower than RoPE,
ALiBi or xPos past T.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from posx.report.stats import INCONCLUSIVE, NO_WORSE, NOT_CHECKED, Sample, Test, combine, compare
from scripts.study.claims import COMPARISON_COLUMNS, listed

LEARNED = 0.5  # exact share at 1x below which an encoding is taken not to have learned the task
SOLVED = 0.9  # Arora et al.: "solves" MQAR
PAST = (2.0, 4.0, 8.0)  # the factors "past T" averages
RECALL_TASKS = ("mqar", "niah_multikey")  # the associative-recall tasks of the Arora claim
ALL_TASKS = "all tasks"

ARORA = ("Arora et al. 2023 (Zoology)", "arXiv 2312.04927")
KAZEMNEJAD = ("Kazemnejad et al. 2023 (NoPE)", "NeurIPS 2023, arXiv 2305.19466")
RUOSS = ("Ruoss et al. 2023 (randomized positions)", "ACL 2023, arXiv 2305.16843")
LI = ("Li et al. 2023 (FIRE)", "ICLR 2024, arXiv 2310.04418")
COLUMNS = ["paper", "citation", "claim", "task", *COMPARISON_COLUMNS[2:]]
CLAIM_KEYS = ["paper", "claim", "task"]
SHARE_COLUMNS = ["encoding", "method", "seed", "task", "factor", "exact", "trials"]
UNTESTED = Test("", math.nan, math.nan, math.nan, math.nan, math.nan, NOT_CHECKED, math.nan)


def exact_shares(rows: pd.DataFrame) -> pd.DataFrame:
    """``tasks.csv`` rows (with ``encoding`` and ``seed`` columns added) pooled over depth ranges:
    one row per (encoding, method, seed, task, factor), ``exact`` = right answers / trials."""
    ok = rows[rows["status"] == "ok"]
    if ok.empty:
        return pd.DataFrame(columns=SHARE_COLUMNS)
    hits = ok.assign(hits=ok["accuracy"] * ok["trials"])
    out = hits.groupby(SHARE_COLUMNS[:5]).agg(hits=("hits", "sum"), trials=("trials", "sum")).reset_index()
    out["exact"] = out["hits"] / out["trials"]
    return out[SHARE_COLUMNS]


def cell(shares: pd.DataFrame, encoding: str, task: str, factors, method: str = "none") -> Sample:
    """Per seed, the mean exact share over ``factors`` (a seed missing any of them is left out)."""
    mine = shares[(shares["encoding"] == encoding) & (shares["method"] == method) & (shares["task"] == task)]
    values, seeds = [], []
    for seed, rows in mine.groupby("seed"):
        found = [rows[np.isclose(rows["factor"], f)]["exact"] for f in factors]
        if all(len(f) == 1 for f in found):
            values.append(float(np.mean([f.iloc[0] for f in found])))
            seeds.append(int(seed))
    where = "past T (" + ", ".join(f"{f:g}x" for f in factors) + ")" if len(factors) > 1 else f"at {factors[0]:g}x"
    return Sample(f"{encoding} {where}", tuple(values), tuple(seeds))


def _unlearned(shares: pd.DataFrame, task: str, encodings) -> list[str]:
    """The encodings whose mean exact share on ``task`` at 1x is below LEARNED (or missing)."""
    found = [(e, cell(shares, e, task, (1.0,))) for e in encodings]
    return [f"{e} {c.mean:.0%} at 1x" if c.values else f"{e} not run at 1x" for e, c in found
            if not c.values or c.mean < LEARNED]  # fmt: skip


def _row(paper: tuple, claim: str, task: str, text: str, low: Sample, high: Sample, test: Test) -> dict:
    values = [text, low.label, high.label, len(low.values), len(high.values), test.diff, test.lo, test.hi]
    values += [test.test, test.df, test.p, test.outcome, test.detectable]
    values += [listed(low.seeds), listed(low.values), listed(high.seeds), listed(high.values)]
    return dict(zip(COLUMNS, [*paper, claim, task, *values]))


def beats(shares: pd.DataFrame, task: str, a: str, b: str, strict: bool, paper: tuple, claim: str) -> dict:
    """ "a beats b past T" (``strict``: the test b < a) or "a is no lower than b past T" (the
    non-inferiority test (1 − NO_WORSE)·b < a)."""
    ca, cb = cell(shares, a, task, PAST), cell(shares, b, task, PAST)
    low = cb if strict else cb.scaled(1 - NO_WORSE)
    text = f"{ca.text()} {'>' if strict else '≥'} {low.text()}"
    weak = _unlearned(shares, task, (a, b)) if ca.values and cb.values else []
    if weak:
        text += f": not learned at T ({', '.join(weak)} < {LEARNED:.0%})"
        return _row(paper, claim, task, text, low, ca, replace(UNTESTED, outcome=INCONCLUSIVE))
    return _row(paper, claim, task, text, low, ca, compare(low, ca))


def at_least(shares: pd.DataFrame, task: str, encoding: str, paper: tuple, claim: str) -> dict:
    """ "the encoding's exact share at 1x is above SOLVED": the test SOLVED < exact, by seed."""
    c = cell(shares, encoding, task, (1.0,))
    bar = Sample(f"{SOLVED:g}", tuple(SOLVED for _ in c.values), c.seeds)
    return _row(paper, claim, task, f"{c.text()} ≥ {SOLVED:g}", bar, c, compare(bar, c))


def per_task(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per claim and task of ``claims.corrected`` rows, then each claim's ``all tasks`` row
    (its tasks' verdicts combined) where it has several tasks."""
    table = rows.drop_duplicates(CLAIM_KEYS)[[*CLAIM_KEYS, "verdict", "holm_verdict"]]
    out = []
    for (paper, claim), g in table.groupby(["paper", "claim"], sort=False):
        out.append(g)
        if len(g) > 1:
            both = {c: combine(list(g[c])) for c in ("verdict", "holm_verdict")}
            out.append(pd.DataFrame([{"paper": paper, "claim": claim, "task": ALL_TASKS, **both}]))
    return pd.concat(out, ignore_index=True)


def check(shares: pd.DataFrame, suffix: str = "", said: str = "") -> pd.DataFrame:
    """Every comparison of every claim (module docstring), per task it concerns (COLUMNS); a
    claim with no task run has a ``not checked`` comparison. ``suffix``: the arms checked are
    ``<encoding><suffix>`` (``scripts.study.task_arms``: the arms with the short convolution), and
    every claim's text ends with ``said``."""
    tasks = sorted(set(shares["task"])) or ["—"]
    e = {name: name + suffix for name in ("rope", "nope", "alibi", "fire", "xpos", "rope-randomized")}
    recall = [t for t in tasks if t in RECALL_TASKS] or [RECALL_TASKS[0]]
    arora = f"attention (RoPE) solves associative recall at this width: exact ≥ {SOLVED:.0%} at 1x" + said
    nope = "NoPE generalises at least as well as RoPE and ALiBi (exact past T no lower)" + said
    ruoss = "randomized positions extend length generalisation (randomized RoPE beats RoPE past T)" + said
    fire = "FIRE generalises best of the relative encodings (exact past T no lower than RoPE, ALiBi, xPos)" + said
    rows = [at_least(shares, t, e["rope"], ARORA, arora) for t in recall]
    for t in tasks:
        rows += [beats(shares, t, e["nope"], e[other], False, KAZEMNEJAD, nope) for other in ("rope", "alibi")]
    rows += [beats(shares, t, e["rope-randomized"], e["rope"], True, RUOSS, ruoss) for t in tasks]
    for t in tasks:
        rows += [beats(shares, t, e["fire"], e[other], False, LI, fire) for other in ("rope", "alibi", "xpos")]
    return pd.DataFrame(rows, columns=COLUMNS)
