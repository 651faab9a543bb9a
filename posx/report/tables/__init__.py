"""The words of a report: ``writeup`` (``summary.md``, the terminal table) and ``mdtable``."""
