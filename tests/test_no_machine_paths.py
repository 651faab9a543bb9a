"""No committed file names an absolute path of the machine it was made on.

A report, study notes or a doc page that records where its runs lived on one machine is wrong on
every other machine; such paths are written relative to the folder they describe. The test reads
every file git tracks and fails on a home, scratch or work directory of the usual forms.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# a path that starts with one of these directories (not inside a longer word or a relative path)
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:(?:work|tmp|root|Users)/|home/[^/\s\"'`]+/)")

# Run directories written by older posx, kept byte for byte so that tests load them as written:
# a run records the absolute root of its corpus and its parent's path.
KEPT_AS_WRITTEN = ("tests/fixtures/",)

# Scratch locations a measurement command is told to use (its default and its usage line), not
# paths recorded from a machine.
EXAMPLES = ("/tmp/posx-measure", "/tmp/bm/results")


def tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no list of committed files")
    return [name for name in out.decode().split("\0") if name]


def machine_paths(text: str) -> list[str]:
    """The absolute machine paths in text, each with a little context."""
    for example in EXAMPLES:
        text = text.replace(example, "")
    return [text[max(0, m.start() - 30) : m.end() + 30] for m in MACHINE_PATH.finditer(text)]


def test_the_pattern_finds_machine_paths_and_leaves_relative_ones():
    work, home, users = ("/" + d for d in ("work", "home", "Users"))  # spelt apart: this file is checked too
    found = machine_paths(f"runs: `{work}/main/results/x` and {home}/alice/data and {users}/bob/x")
    assert len(found) == 3
    assert machine_paths("results/study/cpu-tiny, ./tmp/x, data/home/x/y, http://host/tmp/, /tmp") == []


def test_no_committed_file_holds_an_absolute_path_of_this_machine():
    offending = {}
    for name in tracked_files():
        path = REPO / name
        if name.startswith(KEPT_AS_WRITTEN) or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:  # binary (images, weights)
            continue
        found = machine_paths(data.decode("utf-8", errors="replace"))
        if found:
            offending[name] = found[:3]
    assert not offending, (
        f"absolute paths of a machine in committed files (write them relative to the folder they describe): {offending}"
    )
