"""The retrieval comparison's claims re-derived from its committed tables alone: no run redone.

    python -m scripts.study.retrieval_notes                      # results/reference/cpu-retrieval
    python -m scripts.study.retrieval_notes --out results/reference/<name>

Reads the folder's ``exact.csv`` (one exact share per arm, method, seed, task and factor),
checks the claims again (``scripts.study.task_arms.check_claims``, Holm-corrected), and rewrites
``claims.csv``, the figure and everything of ``STUDY.md`` below its header (which keeps what the
study wrote of its command, commit, machine and time; a line says the rest was re-derived, at
which commit). Each task's chance level comes from ``--recipe``, the retrieval recipe the runs
trained with, at its T. Where the folder still holds a claims.csv of the earlier rule, its calls
are kept in ``earlier_calls.csv`` and STUDY.md lists each comparison the two rules call
differently. The folder is swapped in whole.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from posx.configure.compose import compose
from posx.report.figures.output import save
from scripts.study import REPO, notes, task_arms, task_claims, task_comparison
from scripts.study import retrieval as study  # STUDY.md's body
from scripts.study.args import OneLineParser  # one line and exit 2 for a bad argument
from scripts.study.claims import corrected


def header(out: Path, names: set[str]) -> list[str]:
    """STUDY.md's header as the study wrote it (up to its claims), with the line of this
    re-derivation, and which arms the grid has (``names``: its ``encoding`` column)."""
    text = (out / "STUDY.md").read_text()
    head = text.split("\n## ", 1)[0]
    own = ("- notes: ", "- arms: ")  # the lines this script writes: made again, never repeated
    lines = [line for line in head.rstrip("\n").splitlines() if not line.startswith(own)]
    again = f"python -m scripts.study.retrieval_notes --out {notes.shown(out)}"
    code = notes.git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!results")  # the outputs aside
    dirty = " (with uncommitted changes)" if code else ""
    lines.append(f"- notes: claims, tables and figure re-derived from the committed exact.csv with `{again}` at "
                 f"commit `{notes.git('rev-parse', 'HEAD')}`{dirty}; no run was redone")  # fmt: skip
    if not any(a in task_arms.ENCODINGS for a in names):
        lines.append(
            "- arms: every run of this grid had the recipe's short convolution "
            f"(`model.short_conv={task_arms.CONV_KERNEL}`), so its arms are named `<encoding>-conv`; "
            "it has no arm without the convolution"
        )
    return [*lines, ""]


def chance(recipe: str, shares: pd.DataFrame) -> pd.DataFrame:
    """Each task's chance level at the study's factors, from the recipe's task options and T."""
    cfg = compose([f"experiment={recipe}"])
    tasks = sorted(set(shares["task"]))
    factors = sorted(set(shares["factor"]))
    options = OmegaConf.to_container(cfg.eval.task_options, resolve=True)  # as a run's config.yaml holds them
    return task_comparison.chance_levels(options, cfg.train.context_length, tasks, factors)


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(prog="python -m scripts.study.retrieval_notes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "results" / "reference" / "cpu-retrieval")
    parser.add_argument("--recipe", default="retrieval", help="the experiment config the runs trained with")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    if not ((out / "exact.csv").is_file() and (out / "STUDY.md").is_file()):
        parser.error(f"{out} has no exact.csv and STUDY.md; give the folder of a committed retrieval comparison")
    with notes.staged(out) as staging:
        shutil.copytree(out, staging, dirs_exist_ok=True)
        earlier = notes.earlier(staging, task_claims.CLAIM_KEYS)
        shares = pd.read_csv(staging / "exact.csv")
        claims = corrected(task_arms.check_claims(shares), task_claims.CLAIM_KEYS)
        claims.to_csv(staging / "claims.csv", index=False)
        levels = chance(args.recipe, shares)
        arms = [a for a in task_arms.ARMS if a in set(shares["encoding"])]
        order = study.DEFAULTS["tasks"]  # the study's panel order, then any other task
        tasks = sorted(set(shares["task"]), key=lambda t: (order.index(t) if t in order else len(order), t))
        save(task_comparison.figure(shares, task_arms.LABELS, task_arms.FAMILIES, tasks, levels),
             staging / "exact_vs_length.png")  # fmt: skip
        (staging / "STUDY.md").write_text(
            study.study_md(header(out, set(shares["encoding"])), shares, claims, arms, levels, earlier)
        )
    print(f"wrote {out} (claims.csv, exact_vs_length.png, STUDY.md)")


if __name__ == "__main__":
    main()
