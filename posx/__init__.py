"""posx: a command-line experiment runner for context-length extrapolation."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("posx")  # the one place it is written is pyproject.toml
except PackageNotFoundError:  # a checkout on sys.path that was never installed
    __version__ = "0+unknown"
