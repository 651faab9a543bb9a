"""The papers' claims in a study's notes: the comparisons behind them, their verdicts under the
one rule of ``posx.report.stats``, the reasons computed from those numbers, and where the rule
changed a call from the earlier one.

A reason is written from the claim's own rows of ``claims.csv`` at write time: for each
comparison that is not supported, the difference of means, its 95% interval and what the
interval says (the means' direction, the difference the study could have detected at its
seeds). Nothing in a reason is typed in by hand, so it cannot drift from the numbers beside it;
``reason_facts`` gives the facts a reason states, for the check that they agree with claims.csv.
"""

from __future__ import annotations

import math
import re

import pandas as pd

from posx.report.stats import ALPHA, CONTRADICTED, INCONCLUSIVE, NO_WORSE, NOT_CHECKED, POWER, SUPPORTED
from scripts.study import task_claims
from scripts.study.claims import RECOVERED, Numbers, check, corrected, parse_label, per_claim

CLAIM_KEYS = ["paper", "claim", "block", "protocol"]
SHOWN = {"holm_verdict": "Holm-corrected"}  # a column's heading in STUDY.md
# the earlier rule's words, as the new outcomes: a comparison's call under each
EARLIER = {
    **{"reproduced": SUPPORTED, "reversed": CONTRADICTED, "not reproduced": INCONCLUSIVE, "not checked": NOT_CHECKED},
    **{"holds": SUPPORTED, "does not hold": CONTRADICTED, "not called": INCONCLUSIVE, "not run": NOT_CHECKED},
}
RULE = (
    "Each comparison is a difference of means d = a − b over seeds with its 95% confidence interval from "
    "scipy.stats: a paired t-test by seed where both cells have the same seeds (one model under two methods, "
    "or arms trained on the same seeds), Welch's t-test otherwise (`posx/report/stats.py`). It is *supported* "
    "when the interval lies on the paper's side of zero, *contradicted* when it lies on the other side, "
    "*inconclusive* when it holds zero (then it states the smallest difference it could have detected with "
    f"{POWER:.0%} power at its seeds), *not checked* when a cell is missing or has one seed. "
    f'"Within {RECOVERED - 1:.0%}" and "no worse than" are non-inferiority tests: a against {RECOVERED:g} × b, '
    f'or {1 + NO_WORSE:g} × b for "no worse", so such a claim is contradicted only when its interval lies wholly '
    "outside the tolerance. "
    "A claim is contradicted if any comparison is, else inconclusive if any is, else not checked if any is, "
    f"else supported. The Holm column corrects the p-values across all of the study's comparisons (α = {ALPHA:g})."
)


def is_bpe(label: str) -> bool:
    """Whether a group label is of runs trained on BPE tokens (the study's BPE arm)."""
    return parse_label(label).get("data.tokenizer") == "bpe"


def claims_table(seeds: pd.DataFrame, ext: pd.DataFrame | None, groups: dict) -> pd.DataFrame:
    """Every comparison of the papers' claims on the byte-level runs (the gpt2 block's claims, then
    the llama block's RoPE claims, per protocol), Holm-corrected across all of them."""
    byte = seeds[[not is_bpe(str(g)) for g in seeds["group"]]]
    gpt2 = byte[byte["group"] != groups.get("llama")]
    frames = []
    for protocol in sorted(seeds["protocol"].unique(), key=lambda p: p != "nonoverlapping"):
        numbers = Numbers(gpt2, ext if protocol == "nonoverlapping" else None, None, protocol)
        frames.append(check(numbers).assign(block="gpt2", protocol=protocol))
        if "llama" in groups:
            llama = check(Numbers(byte, None, {"rope": groups["llama"]}, protocol))
            llama = llama[llama["claim"].str.startswith(("rotary", "zero-shot YaRN"))]
            frames.append(llama.assign(block="llama", protocol=protocol))
    rows = pd.concat(frames, ignore_index=True)
    first = ["paper", "claim", "block", "protocol"]
    return corrected(rows[[*first, *[c for c in rows.columns if c not in first]]], CLAIM_KEYS)


def counts(claims: pd.DataFrame, column: str = "verdict") -> str:
    """ "n supported, n inconclusive, ..." of one row per claim."""
    return _count(per_claim(claims, CLAIM_KEYS), column)


def reason_facts(row) -> dict:
    """The facts a reason states about one comparison: d, its interval, the means' direction, the
    detectable difference (NaN when called), and the outcome."""
    way = "the paper's way" if row.diff < 0 else "the other way" if row.diff > 0 else "level"
    return {"diff": row.diff, "lo": row.ci_low, "hi": row.ci_high, "way": way, "detectable": row.detectable}


def reason(rows: pd.DataFrame) -> str:
    """Why a claim is not supported, from its own comparisons: each one not supported, what its
    interval says."""
    said = []
    for row in rows.itertuples():
        if row.outcome == SUPPORTED:
            continue
        if row.outcome == NOT_CHECKED:
            said.append(f"{row.comparison.split(' (n=')[0]} …: not checked (a cell is missing or has one seed)")
            continue
        f = reason_facts(row)
        text = f"{row.low} against {row.high}: d = {f['diff']:+.3f} [{f['lo']:+.3f}, {f['hi']:+.3f}] ({row.test}), "
        if row.outcome == CONTRADICTED:
            text += "the interval lies on the other side of the paper's"
        else:
            text += (
                f"the means go {f['way']} but the interval holds zero, and with n = {row.n_low}/{row.n_high} seeds "
                f"the study could detect |d| ≥ {f['detectable']:.3f} at {POWER:.0%} power"
            )
        said.append(text)
    return "; ".join(said) + "."


def claims_lines(claims: pd.DataFrame, table: bool = True) -> list[str]:
    """The papers' claims: the rule, the verdicts (``table``: one row per claim), the reason under
    each claim not supported, the numbers behind each comparison."""
    lines = ["## The papers' claims", "", RULE, "", f"Verdicts: {counts(claims)}; Holm-corrected: "]
    lines[-1] += f"{counts(claims, 'holm_verdict')}."
    lines.append("")
    if table:
        lines += [per_claim(claims, CLAIM_KEYS).rename(columns=SHOWN).to_markdown(index=False), ""]
    unmet = claims[claims["verdict"] != SUPPORTED]
    if not unmet.empty:
        lines += ["### Where a claim is not supported, and why, from its numbers", ""]
        for key, rows in unmet.groupby(CLAIM_KEYS, sort=False):
            lines.append(f"- **{key[1]}** ({key[2]}, {key[3]}): {reason(rows)}")
        lines.append("")
    lines += ["### The numbers behind each verdict", ""]
    for r in claims.itertuples():
        test = (
            ""
            if r.outcome == NOT_CHECKED
            else (f": d = {r.diff:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}], {r.test}, df {r.df:.1f}, p = {r.p:.2g}, ")
        )
        said = f"{r.outcome}, Holm {r.holm_outcome}" if test else r.outcome
        said += f" (detectable: {r.detectable:.3f})" if math.isfinite(r.detectable) else ""
        lines.append(f"- {r.claim} ({r.block}, {r.protocol}): {r.comparison}{test or ': '}{said}")
    return [*lines, ""]


def changed_lines(claims: pd.DataFrame, previous: pd.DataFrame | None, keys: list[str] = CLAIM_KEYS) -> list[str]:
    """The comparisons whose call the earlier rule (a difference beyond 2·sqrt(std_a² + std_b²))
    made differently, from ``previous``: the earlier calls (``earlier_calls``)."""
    if previous is None:
        return []
    mine = claims.assign(index=claims.groupby(keys, sort=False).cumcount())
    both = mine.merge(previous, on=[*keys, "index"], how="inner")
    differ = both[both["earlier"].map(EARLIER) != both["outcome"]]
    lines = [
        "## Where this rule and the earlier one disagree",
        "",
        "The earlier rule called a difference only beyond 2·sqrt(std_a² + std_b²), the spread of one run of each "
        f"arm, not of their means; it and this one disagree on {len(differ)} of {len(both)} comparisons "
        "(the earlier call in its own words):",
        "",
    ]
    for r in differ.itertuples():
        where = ", ".join(str(getattr(r, k)) for k in keys[2:])
        lines.append(f"- {r.claim} ({where}): {r.comparison}: was {r.earlier}, now {r.outcome}")
    return [*lines, ""]


def earlier_calls(old: pd.DataFrame, keys: list[str] = CLAIM_KEYS) -> pd.DataFrame:
    """Each comparison's call in an earlier claims.csv (one row per claim, its ``numbers`` the
    comparisons "…: verdict" joined by "; "), numbered within its claim."""
    rows = []
    for r in old.to_dict("records"):
        if r.get("task") == task_claims.ALL_TASKS:
            continue  # the earlier retrieval table's combined row: no comparison of its own
        for i, part in enumerate(str(r["numbers"]).split("; ")):
            call = part.rsplit(": ", 1)[-1].split(" (")[0]
            rows.append({**{k: r[k] for k in keys}, "index": i, "earlier": call})
    return pd.DataFrame(rows, columns=[*keys, "index", "earlier"])


def trust_line(claims: pd.DataFrame) -> str:
    """How much to trust the study: the detectable differences of its inconclusive comparisons."""
    found = claims[claims["outcome"] == INCONCLUSIVE]
    if found.empty:
        return "- how much to trust this: every comparison with two scored cells was called."
    rel = found["detectable"].astype(float)
    seeds = sorted(set(zip(found["n_low"], found["n_high"])))
    seen = ", ".join(f"{a}/{b}" for a, b in seeds)
    return (
        f"- how much to trust this: at the seeds it had ({seen} per arm), an inconclusive comparison could "
        f"detect a difference of means of {rel.min():.3f} to {rel.max():.3f} (perplexity, median "
        f"{rel.median():.3f}) at {POWER:.0%} power; smaller true differences read as inconclusive."
        if math.isfinite(rel.min())
        else "- how much to trust this: no inconclusive comparison had a spread to size."
    )


def retrieval_lines(claims: pd.DataFrame) -> list[str]:
    """The retrieval comparison's "## Claims": the rule, one row per claim and task (and its
    ``all tasks`` row), the numbers behind each comparison, and where the rule changed a call."""
    table = task_claims.per_task(claims)
    lines = [
        "## Claims",
        "",
        "Past T is, per seed, the mean exact share at 2x, 4x and 8x. Each comparison is a difference of means "
        "with its 95% interval from scipy.stats, paired by seed where both arms have the same seeds, Welch's "
        "t otherwise (`posx/report/stats.py`): *supported* when the interval lies on the paper's side of zero, "
        "*contradicted* when it lies on the other, *inconclusive* when it holds zero (the smallest difference "
        f'detectable with {POWER:.0%} power stated), *not checked* when a run is missing or has one seed. "At '
        f'least as well" / "no lower" is a non-inferiority test against {1 - NO_WORSE:g} × the other arm; an '
        f"encoding below {task_claims.LEARNED:.0%} exact at 1x did not learn the task, and its comparisons are "
        f"inconclusive without a test. Holm's correction runs across all of the comparisons (α = {ALPHA:g}).",
        "",
        f"Verdicts per claim and task: {_count(table[table['task'] != task_claims.ALL_TASKS], 'verdict')}; "
        f"Holm-corrected: {_count(table[table['task'] != task_claims.ALL_TASKS], 'holm_verdict')}.",
        "",
        table.rename(columns=SHOWN).to_markdown(index=False),
        "",
        'The numbers behind each verdict (d = first − second of the test "first < second"):',
        "",
    ]
    for r in claims.itertuples():
        said = (
            r.outcome
            if r.outcome == NOT_CHECKED or not r.test
            else (
                f"d = {r.diff:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}], {r.test}, df {r.df:.1f}, p = {r.p:.2g}: "
                f"{r.outcome}, Holm {r.holm_outcome}"
                + (f" (detectable: {r.detectable:.3f})" if math.isfinite(r.detectable) else "")
            )
        )
        lines.append(f"- {r.claim} ({r.task}): {r.comparison}: {said}")
    return [*lines, ""]


def _count(table: pd.DataFrame, column: str) -> str:
    return ", ".join(f"{n} {v}" for v, n in table[column].value_counts().items())


REASONS_HEADING = "### Where a claim is not supported, and why, from its numbers"
_PART = re.compile(
    r"(?P<low>.+?) against (?P<high>.+?): d = (?P<d>[+-][\d.]+) \[(?P<lo>[+-][\d.]+), (?P<hi>[+-][\d.]+)\] "
    r"\((?P<test>[^)]+)\), (?P<said>.+)"
)


def contradictions(study: str, claims: pd.DataFrame) -> list[str]:
    """Every statement of STUDY.md's reasons that claims.csv does not bear out (empty: all agree):
    each claim not supported has a reason, each comparison a reason names is in claims.csv with the
    stated d, interval, test, direction, seeds and detectable difference, and its outcome matches."""
    if REASONS_HEADING not in study:
        return ["STUDY.md has no reasons computed from the numbers"]
    section = study.split(REASONS_HEADING, 1)[1].split("\n#", 1)[0]
    bullets = re.findall(r"^- \*\*(.+?)\*\* \((\S+), (\S+)\): (.+)$", section, flags=re.M)
    problems = []
    table = per_claim(claims, CLAIM_KEYS)
    unmet = table[table["verdict"] != SUPPORTED]
    if {(c, b, p) for c, b, p, _ in bullets} != set(zip(unmet["claim"], unmet["block"], unmet["protocol"])):
        problems.append("the claims with a reason are not the claims that are not supported")
    for claim, block, protocol, text in bullets:
        mine = claims[(claims["claim"] == claim) & (claims["block"] == block) & (claims["protocol"] == protocol)]
        for part in text.rstrip(".").split("; "):
            found = _PART.match(part)
            if found is None:
                continue  # a "not checked" part names no numbers
            problems += [f"{claim} ({block}, {protocol}): {p}" for p in _disagree(found, mine)]
    return problems


def _disagree(found: re.Match, mine: pd.DataFrame) -> list[str]:
    """What one reason's part says that its comparison's row does not."""
    row = mine[(mine["low"] == found["low"]) & (mine["high"] == found["high"])]
    if len(row) != 1:
        return [f"{found['low']} against {found['high']}: no such comparison"]
    r = row.iloc[0]
    said, wrong = found["said"], []
    numbers = {"d": r["diff"], "lo": r["ci_low"], "hi": r["ci_high"]}
    wrong += [f"{k} stated {found[k]}, is {v:+.3f}" for k, v in numbers.items() if abs(float(found[k]) - v) > 5e-4]
    wrong += [f"test stated {found['test']}, is {r['test']}"] if found["test"] != r["test"] else []
    outcome = CONTRADICTED if "other side" in said else INCONCLUSIVE if "holds zero" in said else "?"
    wrong += [f"says {outcome}, is {r['outcome']}"] if outcome != r["outcome"] else []
    way = "the paper's way" if r["diff"] < 0 else "the other way"
    wrong += [f"says the means go otherwise than {way}"] if "the means go" in said and way not in said else []
    seeds = re.search(r"n = (\d+)/(\d+)", said)
    wrong += (
        [f"seeds stated {seeds.group(0)}"]
        if seeds and (int(seeds[1]), int(seeds[2])) != (r["n_low"], r["n_high"])
        else []
    )
    detect = re.search(r"\|d\| ≥ ([\d.]+)", said)
    wrong += [f"detectable stated {detect[1]}"] if detect and abs(float(detect[1]) - r["detectable"]) > 5e-4 else []
    return wrong
