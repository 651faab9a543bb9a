"""posx.config.compose: a key the schema lacks cannot be added from the command line."""

from __future__ import annotations

import pytest

from posx.config.compose import compose
from posx.core.errors import PosxError

from conftest import run_posx


@pytest.mark.parametrize("override", ["+foo=1", "++train.bogus=2", "+eval.x=3"])
def test_adding_a_key_is_refused_like_an_unknown_key(override, tmp_path):
    with pytest.raises(PosxError, match="fixed schema"):
        compose([override])
    for command in (["train", override], ["eval-extrapolate", "--latest", override]):
        out = run_posx(*command, cwd=tmp_path, check=False)
        assert out.returncode == 2 and "fixed schema" in out.stderr and "Traceback" not in out.stderr
    assert list(tmp_path.iterdir()) == []  # refused before anything was written
