"""The studies: the reference study, the retrieval comparison and the judging of a method of your
own, the papers' claims they check, and the notes they write. Run from the repository root, e.g.
``python -m scripts.study.reference --plan`` (docs/scripts.md lists them all). They drive the
real CLI (``python -m posx``) and read its tables; the library (``posx``) imports nothing from here."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the checkout the studies run in: results/, configs/, its git history
