"""The second edition's own sections of STUDY.md (``python -m scripts.study.notes --grid methods``): the verdicts
at a glance beside the first edition's, every encoding in bits per byte, the BPE arm's orderings
against the byte-level ones, and the retrieval side from the committed retrieval comparison.

A number is a mean ± sample std over seeds of one kind of run (the run name without ``-s<seed>``);
two are compared by the one rule of ``posx.report.stats`` (a difference of means with its 95%
interval, paired by seed where the seeds coincide): one is named lower only when the interval
excludes zero.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from posx.report.stats import CONTRADICTED, NOT_CHECKED, SUPPORTED, compare
from posx.report.tables.mdtable import md_table
from posx.report.tables.writeup import EXTENSION_CELLS, mean_std
from scripts.study.claims import Cell, parse_label
from scripts.study.task_arms import CONV
from scripts.study.verdicts import CLAIM_KEYS, SHOWN, per_claim

FACTORS = [1.0, 2.0, 4.0, 8.0]
TASK_ENCODINGS = ["rope", "alibi", "nope", "fire", "rope-randomized", "rope-hybrid"]  # the task arm
BPE_PAIRS = {"byte": ("rope", "alibi"), "BPE": ("bpe-rope", "bpe-alibi")}


def kinds(sweep: pd.DataFrame) -> pd.DataFrame:
    """The rows of runs trained from scratch (``<kind>-s<seed>``), with their kind and seed."""
    parts = sweep["job"].str.extract(r"^(?P<kind>.+)-s(?P<seed>\d+)$")
    return sweep.assign(kind=parts["kind"], seed=parts["seed"]).dropna(subset=["kind"])


def cells(sweep: pd.DataFrame, value: str) -> pd.DataFrame:
    """Mean, std and seeds of ``value`` per kind, method, absolute_beyond, protocol and factor."""
    keys = ["kind", "method", "absolute_beyond", "protocol", "factor"]
    return seed_values(sweep, value).groupby(keys)["value"].agg(["mean", "std", "count"]).reset_index()


def seed_values(sweep: pd.DataFrame, value: str) -> pd.DataFrame:
    """``value`` per kind, method, absolute_beyond, protocol, factor and seed (status ok)."""
    rows = kinds(sweep)
    rows = rows[rows["status"] == "ok"].fillna({"absolute_beyond": "none"})
    return rows[["kind", "method", "absolute_beyond", "protocol", "factor", "seed", value]].rename(
        columns={value: "value"}
    )


def cell(table: pd.DataFrame, kind: str, factor: float, method: str = "none", beyond: str = "none") -> Cell:
    """One kind's seeds at one factor (non-overlapping windows; ``table``: ``seed_values``); empty
    when not scored."""
    rows = table[
        (table["kind"] == kind)
        & (table["method"] == method)
        & (table["absolute_beyond"] == beyond)
        & (table["protocol"] == "nonoverlapping")
        & (table["factor"] == factor)
    ]
    return Cell(f"{kind} at {factor:g}x", tuple(map(float, rows["value"])), tuple(map(int, rows["seed"])))


def shown(c: Cell) -> str:
    return "—" if not c.values else f"{c.mean:.3f}" + (f" ± {c.std:.3f}" if len(c.values) > 1 else "")


def glance_lines(claims: pd.DataFrame, first_csv: Path, caption: str) -> list[str]:
    """The verdict of every claim, with the first edition's (its claims.csv) where it checked the same
    one, then the headline figure with ``caption``."""
    first = per_claim(pd.read_csv(first_csv), CLAIM_KEYS) if first_csv.is_file() else None
    table = per_claim(claims, CLAIM_KEYS)
    if first is not None:
        before = first.set_index(["claim", "block", "protocol"])["verdict"]
        keys = zip(table["claim"], table["block"], table["protocol"])
        table["first edition"] = [before.get(k, NOT_CHECKED) for k in keys]
    counts = lambda frame: ", ".join(f"{n} {v}" for v, n in frame["verdict"].value_counts().items())  # noqa: E731
    lines = ["## Verdicts at a glance", "", f"This edition: {counts(table)} (of {len(table)} checks)."]
    if first is not None:
        lines[-1] += f" The first edition, under the same rule: {counts(first)} (of {len(first)} checks)."
    figure = "![Perplexity against evaluation length, every kind of run](headline.png)"
    return [*lines, "", table.rename(columns=SHOWN).to_markdown(index=False), "", figure, "", caption, ""]


def bpb_lines(sweep: pd.DataFrame) -> list[str]:
    """Every kind trained from scratch with each method it was evaluated with, in bits per byte and perplexity."""
    bpb, ppl = seed_values(sweep, "bpb"), seed_values(sweep, "ppl")
    rows = []
    for kind, method, beyond in dict.fromkeys(zip(bpb["kind"], bpb["method"], bpb["absolute_beyond"])):
        row = {"run": kind, "method": beyond if kind.endswith("absolute") else method}
        for f in FACTORS:
            row[f"{f:g}x bpb"] = shown(cell(bpb, kind, f, method, beyond))
            row[f"{f:g}x ppl"] = shown(cell(ppl, kind, f, method, beyond))
        rows.append(row)
    return [
        "## Every run in bits per byte",
        "",
        "Non-overlapping windows, each kind of run with each method it was evaluated with (learned absolute: "
        "past its table as named), zero-shot; mean ± std over seeds. Bits per byte compare across tokenizers; "
        "perplexity per token does not (the `bpe-` rows).",
        "",
        pd.DataFrame(rows).to_markdown(index=False),
        "",
    ]


def ordering(a: Cell, b: Cell, names: tuple[str, str]) -> str:
    """Which of two cells is lower (``posx.report.stats.compare``), or "inconclusive" when the
    interval of their difference holds zero; — when one is not scored."""
    if not (a.values and b.values):
        return "—"
    called = compare(a, b).outcome
    if called == NOT_CHECKED:
        return "not called (one seed)"
    return names[0] if called == SUPPORTED else names[1] if called == CONTRADICTED else "inconclusive"


def bpe_lines(sweep: pd.DataFrame) -> list[str]:
    """RoPE against ALiBi at each length, byte tokens and BPE tokens, in bits per byte."""
    bpb = seed_values(sweep, "bpb")
    if not (bpb["kind"] == BPE_PAIRS["BPE"][0]).any():
        return []
    rows = []
    for f in FACTORS:
        row, calls = {"length": f"{f:g}x T"}, []
        for tokens, (rope, alibi) in BPE_PAIRS.items():
            a, b = cell(bpb, alibi, f), cell(bpb, rope, f)
            row[f"ALiBi, {tokens}"], row[f"RoPE, {tokens}"] = shown(a), shown(b)
            calls.append(ordering(a, b, ("ALiBi", "RoPE")))
        row["lower, byte"], row["lower, BPE"] = calls
        row["ordering survives"] = "yes" if calls[0] == calls[1] else "no"
        rows.append(row)
    return [
        "## A tokenizer change: the BPE arm",
        "",
        "RoPE and ALiBi trained on the same corpus with a byte-level BPE of 1,024 tokens (`data.tokenizer=bpe "
        "data.vocab_size=1024`) at the same T in tokens, so a BPE window holds more text; bits per byte, mean "
        "± std over seeds; the lower is named only where the 95% interval of the difference of means excludes zero.",
        "",
        pd.DataFrame(rows).to_markdown(index=False),
        "",
    ]


def task_lines(retrieval: Path, staging: Path, runs: Path) -> list[str]:
    """The retrieval side, from the committed retrieval comparison: its exact shares and verdicts for
    the task arm's encodings, and the NIAH heatmap of their passkey runs where those runs are here."""
    if not (retrieval / "exact.csv").is_file():
        return []
    exact = pd.read_csv(retrieval / "exact.csv")
    arms = TASK_ENCODINGS + [f"{e}{CONV}" for e in TASK_ENCODINGS]  # either family, named as the comparison names it
    exact = exact[exact["encoding"].isin(arms) & (exact["method"] == "none")]
    table = exact.groupby(["encoding", "task", "factor"])["exact"].agg(["mean", "std"]).reset_index()
    table["cell"] = [f"{m:.0%} ± {s:.0%}" for m, s in zip(table["mean"], table["std"])]
    wide = table.pivot(index=["encoding", "task"], columns="factor", values="cell").reset_index()
    wide.columns = [c if isinstance(c, str) else f"{c:g}x" for c in wide.columns]
    claims = per_claim(pd.read_csv(retrieval / "claims.csv"), ["paper", "claim", "task"])
    lines = [
        "## Retrieval: the task arm",
        "",
        f"From the retrieval comparison (`{retrieval.name}`: the retrieval recipe, one task per run, "
        f"{exact.groupby(['encoding', 'task'])['seed'].nunique().max()} seeds; its STUDY.md has the command), for the "
        "encodings this arm compares (an arm named `-conv` has the short convolution before attention). "
        "Exact-answer share, mean ± std over seeds.",
        "",
        wide.to_markdown(index=False),
        "",
        claims.rename(columns=SHOWN).to_markdown(index=False),
        "",
    ]
    passkey = [runs / f"{e}-passkey-s{s}" for e in TASK_ENCODINGS for s in range(3)]
    drawn = all(p.is_dir() for p in passkey) and draw_heatmap(passkey, staging / "tasks")
    if drawn or (staging / "tasks" / "niah_heatmap.png").is_file():  # drawn now, or the committed one kept
        lines += ["![NIAH heatmap](tasks/niah_heatmap.png)", "", HEATMAP_CAPTION, ""]
    else:
        where = f"{runs.parent.parent.name}/{runs.parent.name}/runs"
        lines += [f"(The NIAH heatmap needs the passkey runs under `{where}`, which are not committed, and no "
                  "committed copy is here: not drawn.)", ""]  # fmt: skip
    return lines


HEATMAP_CAPTION = (
    "Passkey retrieval by needle depth (rows) and evaluation length (columns), exact share over the seeds "
    "of each passkey-trained run; one panel per encoding (and RoPE's zero-shot PI and YaRN). Drawn from the "
    "retrieval comparison's passkey runs when they were present and committed as `tasks/niah_heatmap.png`, so "
    "it shows on a clean clone."
)


def draw_heatmap(runs: list[Path], out: Path) -> bool:
    """``posx report`` over ``runs``; its NIAH heatmap copied into ``out``. Whether it was drawn."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report"
        command = [sys.executable, "-m", "posx", "report", *map(str, runs), "--out", str(report), "--format", "png"]
        done = subprocess.run([*command, "--results-dir", tmp], capture_output=True, text=True)
        if done.returncode != 0 or not (report / "niah_heatmap.png").is_file():
            return False
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(report / "niah_heatmap.png", out / "niah_heatmap.png")
    return True


def extension_lines(ext: pd.DataFrame | None) -> list[str]:
    """The extension table, one row per experiment, each named: a method with ``extend.pose``
    (trained at T on stretched position ids) is "<method> + PoSE", the others fine-tuned at s·T."""
    if ext is None or ext.empty:
        return ["(no extension runs)"]
    pose = [parse_label(str(g)).get("extend.pose") == "True" for g in ext["group"]]
    names = [f"{m} + PoSE (trained at T)" if p else f"{m} (fine-tuned at s·T)" for m, p in zip(ext["method"], pose)]
    shown = pd.DataFrame(
        {
            "extension": names,
            **{key: ext[key] for key in ("parent", "factor", "steps")},
            **{h: [mean_std(m, s) for m, s in zip(ext[mean], ext[std])] for h, mean, std in EXTENSION_CELLS},
            "seeds": ext["n_seeds"],
        }
    )
    return [
        "Perplexity of each `posx extend` experiment, mean ± std over seeds: zero-shot is the parent with the "
        "method's frequencies and no training; PoSE trains at T on position ids stretched to s·T.",
        "",
        md_table(shown),
    ]
