"""The docs' lists of what posx has, held to the code: a new command or config option that the
docs do not name fails here."""

from __future__ import annotations

from pathlib import Path

import typer

from posx import cli

REPO = Path(__file__).resolve().parents[1]


def test_the_first_run_table_lists_every_option_of_every_config_group():
    """docs/first-run.md's table of config groups names each group of ``posx train`` (every one but
    ``posx extend``'s own) with its options: the files in configs/<group>/, no more and no fewer."""
    rows = [line for line in (REPO / "docs" / "first-run.md").read_text().splitlines() if line.startswith("| `")]
    groups = {}
    for row in rows:
        cells = row.split("|")[1:-1]
        group = cells[0].strip().strip("`")
        groups[group] = {part.split("`")[1] for part in cells[1].split(",") if "`" in part}
    assert set(groups) == {p.name for p in (REPO / "configs").iterdir() if p.is_dir()} - {"extend"}
    for group, options in groups.items():
        assert options == {p.stem for p in (REPO / "configs" / group).glob("*.yaml")}, group


def test_the_readme_commands_table_names_every_command_and_no_other():
    """README.md's table of commands: one row or more per command of the CLI (``data`` by its
    subcommands), and no command the CLI does not have."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Commands")[1].split("\n\n")[1]
    named = set()
    for row in table.splitlines()[2:]:
        words = row.split("`")[1].split()  # the first cell: `posx train [OVERRIDES...]`
        if words[0] == "posx" and not words[1].startswith("-"):
            named.add(" ".join(words[1:3]) if words[1] == "data" else words[1])
    commands = typer.main.get_command(cli.app).commands
    expected = {f"data {sub}" for sub in commands["data"].commands} | (set(commands) - {"data"})
    assert named == expected
