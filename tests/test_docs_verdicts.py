"""The verdicts the README and the reference-study page state are those of the committed
claims.csv files: the second edition's table row by row, and each study's counts."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
KEYS = ["paper", "claim", "block", "protocol"]


def per_claim(name: str) -> pd.DataFrame:
    rows = pd.read_csv(REPO / "results" / "reference" / name / "claims.csv")
    return rows.drop_duplicates(KEYS)[[*KEYS, "verdict", "holm_verdict"]]


def flat(path: str) -> str:
    return " ".join((REPO / path).read_text().split())


def test_the_readme_table_is_the_second_editions_verdicts():
    text = (REPO / "README.md").read_text()
    rows = re.findall(
        r"^\| (.+?) \| (.+?) \| (supported|inconclusive|contradicted|not checked) \| (\S+) \|$", text, re.M
    )
    claims = per_claim("cpu-methods")
    mine = claims[(claims["block"] == "gpt2") & (claims["protocol"] == "nonoverlapping")]
    assert rows == list(zip(mine["paper"], mine["claim"], mine["verdict"], mine["holm_verdict"]))


def test_the_stated_counts_are_the_committed_ones():
    for name, total in (("cpu-methods", 37), ("cpu-tiny", 22)):
        counts = per_claim(name)["verdict"].value_counts()
        assert len(per_claim(name)) == total
        said = f"{counts['supported']}, {counts['inconclusive']} and {counts['contradicted']}"
        if name == "cpu-methods":
            said = (f"{counts['supported']} are supported, {counts['inconclusive']} inconclusive and "
                    f"{counts['contradicted']} contradicted")  # fmt: skip
            assert said.replace(" are", "") in flat("README.md").replace(" are", "")
        assert said in flat("docs/reference-study.md")
    holm = (per_claim("cpu-methods")["holm_verdict"] == "supported").sum()
    assert f"({holm} supported after Holm's correction" in flat("README.md")
