"""The papers' claims about retrieval and length generalisation, checked on a study's task tables.

The input is one row per (encoding, method, seed, task, factor) with ``exact``, the share of the
cell's samples whose every answer token was right (``exact_shares`` builds it from ``tasks.csv``
rows, pooling the depth ranges). ``encoding`` is the study's name of the model it trained
(``scripts/retrieval_study.py``): ``rope``, ``nope``, ``alibi``, ``fire``, ``xpos`` and
``rope-randomized`` (RoPE with randomized positions); ``method`` is the RoPE method it was
evaluated with (``none`` for the encoding as trained).

A number compared is a mean ± sample std over seeds (``posx.report.claims.Cell``); "past T" is,
per seed, the mean exact share at 2x, 4x and 8x. The rule is ``posx.report.claims``': a
difference is called only when it exceeds two standard deviations of the difference, so with
one seed nothing is called. Each comparison gives one of

* ``holds``: the paper's direction by more than 2σ ("a beats b"), or, for "a is at least as
  good as b", a not below b by more than 2σ (the numbers say whether it is above by more than 2σ
  or level within the noise);
* ``does not hold``: the opposite direction by more than 2σ;
* ``not called``: within 2σ, one seed, or an encoding that did not learn the task at T (mean
  exact share at 1x below ``LEARNED``: comparing chance with chance says nothing);
* ``not run``: a cell the claim needs is missing.

A claim is ``not run`` when any comparison is, else ``does not hold`` when any is, else
``holds`` when all do, else ``not called``. Each claim is checked per task; its ``all tasks``
row combines the tasks' verdicts the same way. The claims (``check``, each with its paper's
citation; also in docs/tasks.md): attention solves MQAR at this width (Zoology), NoPE
generalises at least as well as RoPE and ALiBi, randomized positions beat RoPE past T, and FIRE
is no lower than RoPE, ALiBi or xPos past T.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from posx.report.claims import Cell, verdict

HOLDS, FAILS, UNCALLED, NOT_RUN = "holds", "does not hold", "not called", "not run"
LEARNED = 0.5  # exact share at 1x below which an encoding is taken not to have learned the task
SOLVED = 0.9  # Arora et al.: "solves" MQAR
PAST = (2.0, 4.0, 8.0)  # the factors "past T" averages
RECALL_TASKS = ("mqar", "niah_multikey")  # the associative-recall tasks of the Arora claim
ALL_TASKS = "all tasks"

ARORA = ("Arora et al. 2023 (Zoology)", "arXiv 2312.04927")
KAZEMNEJAD = ("Kazemnejad et al. 2023 (NoPE)", "NeurIPS 2023, arXiv 2305.19466")
RUOSS = ("Ruoss et al. 2023 (randomized positions)", "ACL 2023, arXiv 2305.16843")
LI = ("Li et al. 2023 (FIRE)", "ICLR 2024, arXiv 2310.04418")
COLUMNS = ["paper", "citation", "claim", "task", "verdict", "numbers"]
SHARE_COLUMNS = ["encoding", "method", "seed", "task", "factor", "exact", "trials"]


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


def per_seed(shares: pd.DataFrame, encoding: str, task: str, factors, method: str = "none") -> list[float]:
    """Per seed, the mean exact share over ``factors``; a seed missing any of them is left out."""
    mine = shares[(shares["encoding"] == encoding) & (shares["method"] == method) & (shares["task"] == task)]
    values = []
    for _seed, rows in mine.groupby("seed"):
        found = [rows[np.isclose(rows["factor"], f)]["exact"] for f in factors]
        if all(len(f) == 1 for f in found):
            values.append(float(np.mean([f.iloc[0] for f in found])))
    return values


def cell(shares: pd.DataFrame, encoding: str, task: str, factors, method: str = "none") -> Cell | None:
    """Mean ± std over seeds (std NaN for one seed) of ``per_seed``; None when no seed has it."""
    values = per_seed(shares, encoding, task, factors, method)
    where = "past T (" + ", ".join(f"{f:g}x" for f in factors) + ")" if len(factors) > 1 else f"at {factors[0]:g}x"
    if not values:
        return None
    std = float(np.std(values, ddof=1)) if len(values) > 1 else math.nan
    return Cell(f"{encoding} {where}", float(np.mean(values)), std)


def _unlearned(shares: pd.DataFrame, task: str, encodings) -> list[str]:
    """The encodings whose mean exact share on ``task`` at 1x is below LEARNED (or missing)."""
    found = [(e, cell(shares, e, task, (1.0,))) for e in encodings]
    return [f"{e} {c.mean:.0%} at 1x" if c else f"{e} not run at 1x" for e, c in found if not c or c.mean < LEARNED]


def compare(shares: pd.DataFrame, task: str, a: str, b: str, strict: bool) -> tuple[str, str]:
    """(verdict, numbers) of "a beats b past T" (``strict``) or "a is no lower than b past T"."""
    ca, cb = cell(shares, a, task, PAST), cell(shares, b, task, PAST)
    sign = ">" if strict else "≥"
    if ca is None or cb is None:
        return NOT_RUN, f"{a} {sign} {b}: {' and '.join(e for e, c in ((a, ca), (b, cb)) if c is None)} not run"
    text = f"{ca.text()} {sign} {cb.text()}"
    weak = _unlearned(shares, task, (a, b))
    if weak:
        return UNCALLED, f"{text}: not called, not learned at T ({', '.join(weak)} < {LEARNED:.0%})"
    called = verdict(cb, ca)  # "reproduced": b below a by more than 2 sigma
    if not all(math.isfinite(v) for v in (ca.std, cb.std)):
        result = UNCALLED  # one seed: no spread to call against
    elif strict:
        result = {"reproduced": HOLDS, "reversed": FAILS}.get(called, UNCALLED)
    else:
        result = FAILS if called == "reversed" else HOLDS
        if result == HOLDS:  # say which: higher beyond the noise, or level within it
            return result, f"{text}: holds ({'higher by more than' if called == 'reproduced' else 'within'} 2σ)"
    return result, f"{text}: {result}"


def at_least(shares: pd.DataFrame, task: str, encoding: str, threshold: float) -> tuple[str, str]:
    """(verdict, numbers) of "the encoding's exact share at 1x is at least ``threshold``"."""
    c = cell(shares, encoding, task, (1.0,))
    if c is None:
        return NOT_RUN, f"{encoding} on {task} not run"
    if not math.isfinite(c.std):
        result = UNCALLED
    elif c.mean - threshold > 2 * c.std or (c.mean >= threshold and c.std == 0):
        result = HOLDS
    elif threshold - c.mean > 2 * c.std:
        result = FAILS
    else:
        result = UNCALLED
    return result, f"{c.text()} ≥ {threshold:g}: {result}"


def combine(verdicts: list[str]) -> str:
    """One verdict of several: not run, else does not hold, else holds if all hold, else not called."""
    if not verdicts or NOT_RUN in verdicts:
        return NOT_RUN
    if FAILS in verdicts:
        return FAILS
    return HOLDS if all(v == HOLDS for v in verdicts) else UNCALLED


def _row(paper: tuple, claim: str, task: str, found: list[tuple[str, str]]) -> dict:
    numbers = "; ".join(text for _v, text in found)
    return dict(zip(COLUMNS, [*paper, claim, task, combine([v for v, _t in found]), numbers]))


def _per_task(paper: tuple, claim: str, tasks: list[str], check) -> list[dict]:
    """One row per task (``check(task)``: its comparisons), then the ``all tasks`` row."""
    rows = [_row(paper, claim, task, check(task)) for task in tasks]
    if len(rows) > 1:
        verdicts = [r["verdict"] for r in rows]
        rows.append(dict(zip(COLUMNS, [*paper, claim, ALL_TASKS, combine(verdicts), "the rows above"])))
    return rows


def check(shares: pd.DataFrame) -> pd.DataFrame:
    """Every claim (module docstring), one row per task it concerns; a claim with no task run has
    one ``not run`` row."""
    tasks = sorted(set(shares["task"])) or ["—"]
    recall = [t for t in tasks if t in RECALL_TASKS] or [RECALL_TASKS[0]]
    rows = [
        *_per_task(
            ARORA,
            f"attention (RoPE) solves associative recall at this width: exact ≥ {SOLVED:.0%} at 1x",
            recall,
            lambda t: [at_least(shares, t, "rope", SOLVED)],
        ),
        *_per_task(
            KAZEMNEJAD,
            "NoPE generalises at least as well as RoPE and ALiBi (exact past T no lower)",
            tasks,
            lambda t: [compare(shares, t, "nope", other, strict=False) for other in ("rope", "alibi")],
        ),
        *_per_task(
            RUOSS,
            "randomized positions extend length generalisation (randomized RoPE beats RoPE past T)",
            tasks,
            lambda t: [compare(shares, t, "rope-randomized", "rope", strict=True)],
        ),
        *_per_task(
            LI,
            "FIRE generalises best of the relative encodings (exact past T no lower than RoPE, ALiBi, xPos)",
            tasks,
            lambda t: [compare(shares, t, "fire", other, strict=False) for other in ("rope", "alibi", "xpos")],
        ),
    ]
    return pd.DataFrame(rows, columns=COLUMNS)
