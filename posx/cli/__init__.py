"""The command line in one package: the Typer app (``typer_app``; parsing and help only), what each
command does (``commands``, ``results``, ``reporting``, ``wavelengths``), the Hydra jobs (``jobs``)
and the boundary every command ends through (``exits``)."""

from posx.cli.typer_app import app, main

__all__ = ["app", "main"]
