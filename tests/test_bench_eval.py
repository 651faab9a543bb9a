"""benchmarks/bench_eval.py: its variants ask for what their names say."""

from __future__ import annotations

from benchmarks.bench_eval import PERPLEXITY_ONLY, VARIANTS  # repository root on pythonpath
from posx.configure.compose import compose


def test_the_passkey_off_variants_score_no_passkey_and_no_task():
    for name, overrides in VARIANTS.items():
        ev = compose(["device=cpu", *overrides]).eval
        if "passkey off" in name:
            assert not ev.passkey.enabled and list(ev.tasks) == [], name
    assert PERPLEXITY_ONLY in VARIANTS
    default = compose(["device=cpu", *VARIANTS["default (perplexity + passkey)"]]).eval
    assert default.passkey.enabled and list(default.tasks) == ["passkey"]
