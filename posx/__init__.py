"""posx: a command-line experiment runner for context-length extrapolation."""

__version__ = "0.1.0"
