"""The retrieval comparison's claims re-derived from its committed tables alone: no run redone.

    python scripts/retrieval_notes.py                      # results/reference/cpu-retrieval
    python scripts/retrieval_notes.py --out results/reference/<name>

Reads the folder's ``exact.csv`` (one exact share per encoding, method, seed, task and factor),
checks the claims again (``posx.report.task_claims``, Holm-corrected), and rewrites
``claims.csv`` and the claims of ``STUDY.md`` (its header, figure and exact shares stay as the
study wrote them; a line says the claims were re-derived, at which commit). Where the folder
still holds a claims.csv of the earlier rule, its calls are kept in ``earlier_calls.csv`` and
STUDY.md lists each comparison the two rules call differently. The folder is swapped in whole.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import pandas as pd
import study_notes as notes  # scripts/: git, shown, publish, the earlier rule's calls
import study_verdicts  # scripts/: the claims' lines

from posx.report import task_claims
from posx.report.claims import corrected

REPO = notes.REPO


def rewritten(out: Path, claims: pd.DataFrame, earlier: pd.DataFrame | None) -> str:
    """STUDY.md with its "## Claims" section (up to "## Exact answers") rewritten."""
    text = (out / "STUDY.md").read_text()
    head, rest = text.split("\n## Claims", 1)
    tail = rest.split("\n## Exact answers", 1)[1] if "\n## Exact answers" in rest else ""
    lines = [line for line in head.rstrip("\n").splitlines() if not line.startswith("- notes: ")]
    again = f"python scripts/retrieval_notes.py --out {notes.shown(out)}"
    code = notes.git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!results")  # the outputs aside
    dirty = " (with uncommitted changes)" if code else ""
    lines.append(f"- notes: claims re-derived from the committed exact.csv with `{again}` at commit "
                 f"`{notes.git('rev-parse', 'HEAD')}`{dirty}; no run was redone")  # fmt: skip
    changed = study_verdicts.changed_lines(claims, earlier, task_claims.CLAIM_KEYS)
    body = [*study_verdicts.retrieval_lines(claims), *changed]
    return "\n".join([*lines, "", *body]) + ("\n## Exact answers" + tail if tail else "")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "results" / "reference" / "cpu-retrieval")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    if not ((out / "exact.csv").is_file() and (out / "STUDY.md").is_file()):
        parser.error(f"{out} has no exact.csv and STUDY.md; give the folder of a committed retrieval comparison")
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    try:
        shutil.copytree(out, staging, dirs_exist_ok=True)
        earlier = notes.earlier(staging, task_claims.CLAIM_KEYS)
        claims = corrected(task_claims.check(pd.read_csv(staging / "exact.csv")), task_claims.CLAIM_KEYS)
        claims.to_csv(staging / "claims.csv", index=False)
        (staging / "STUDY.md").write_text(rewritten(out, claims, earlier))
        notes.publish(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    print(f"wrote {out} (claims.csv, STUDY.md)")


if __name__ == "__main__":
    main()
