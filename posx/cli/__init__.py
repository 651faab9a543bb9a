"""The command line: the Typer app (``typer_app``), the commands, the Hydra jobs, the exit boundary."""

from posx.cli.typer_app import app, main

__all__ = ["app", "main"]
