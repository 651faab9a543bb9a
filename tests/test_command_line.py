"""posx's reading of the Hydra command line (posx.configure.command_line), and public Hydra only."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException

from posx.configure import command_line
from posx.core.errors import PosxError

REPO = Path(__file__).resolve().parents[1]


def test_the_flags_hydra_takes_are_read_with_their_short_forms():
    parsed = command_line.parse(["-m", "pos=rope,absolute", "seed=0,1", "-cn", "extend", "--info"])
    flags = parsed.flags
    assert flags.multirun and flags.config_name == "extend" and flags.info == "all"
    assert parsed.lines == ["pos=rope,absolute", "seed=0,1"]
    assert command_line.modes(flags) == ["-m/--multirun", "--info"]
    assert command_line.modes(command_line.parse(["--cfg", "job", "seed=1"]).flags) == ["--cfg"]
    assert command_line.parse(["--experimental-rerun", "x.pickle"]).flags.experimental_rerun == "x.pickle"


def test_the_overrides_are_read_once_by_hydras_grammar():
    parsed = command_line.parse(["-m", "+a.b=1", "seed=0,1", "hydra.run.dir=x"])
    assert [o.key_or_group for o in parsed.overrides] == ["a.b", "seed", "hydra.run.dir"]
    assert [o.is_sweep_override() for o in parsed.overrides] == [False, True, False]
    with pytest.raises(OverrideParseException):
        command_line.parse(["eval.factors=[1,2"])
    with pytest.raises(PosxError, match="posx does not put a run in hydra.run.dir"):
        command_line.refuse_run_dir(parsed.overrides)


def test_a_malformed_command_line_is_one_line():
    with pytest.raises(PosxError, match=r"^argument --cfg/-c: invalid choice: 'everything' .*--help lists"):
        command_line.parse(["--cfg", "everything"])
    with pytest.raises(PosxError, match="unrecognized arguments: --bogus"):
        command_line.parse(["--bogus"])


def test_probes_use_every_value_of_every_sweep_once_beside_the_first_of_the_others():
    assert command_line.probes(command_line.parse(["a=1,2", "b=3,4,5", "c=x"]).overrides) == [
        ["a=1", "b=3", "c=x"],
        ["a=2", "b=3", "c=x"],
        ["a=1", "b=4", "c=x"],
        ["a=1", "b=5", "c=x"],
    ]
    assert command_line.probes(command_line.parse(["pos=rope"]).overrides) == [["pos=rope"]]


def test_argv_is_restored_after_hydra_reads_it():
    before = list(sys.argv)
    with command_line.argv(["-m", "seed=1"]):
        assert sys.argv[1:] == ["-m", "seed=1"]
    assert sys.argv == before


def test_posx_uses_only_public_hydra():
    private = "hydra." + "_internal"
    found = [
        str(p.relative_to(REPO))
        for folder in ("posx", "scripts", "tests")
        for p in (REPO / folder).rglob("*.py")
        if private in p.read_text(encoding="utf-8")
    ]
    assert not found


@pytest.mark.parametrize(
    "override, reason",
    [
        ("data.path=a[b]", "mismatched input '['"),
        ("eval.factors=[1,2", "eval.factors=[1,2"),
        ("train.steps=1}", "extraneous input '}'"),
        ("data.path=a'b", "an unclosed quote?"),
    ],
)
def test_an_override_the_grammar_cannot_read_is_named_with_its_reason_and_a_fix_that_parses(override, reason):
    parser = OverridesParser.create()
    with pytest.raises(OverrideParseException) as caught:
        parser.parse_overrides([override])
    line = command_line.unreadable(caught.value)
    assert line.startswith(f"cannot read the override {override}: ") and reason in line
    assert "\n" not in line and "See https://" not in line
    # the two fixes the line shows are overrides Hydra reads, to the values they promise
    k = re.escape(override.split("=")[0])
    fixes = re.findall(rf"\(({k}=\[1,2\])\)|\(({k}='a\[b\],c') or ({k}=\"it's\")\)", line)
    shown = [f for group in fixes for f in group if f]
    assert len(shown) == 3, line
    values = [o.value() for o in parser.parse_overrides(shown)]
    assert values == [[1, 2], "a[b],c", "it's"]
