"""``python -m posx``: the same CLI as the ``posx`` command."""

from posx.cli import main

main()
