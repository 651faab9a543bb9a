"""The words of a report: ``writeup`` (``summary.md``: its groups, damaged runs and one table per
method and protocol; the table printed in the terminal) and ``mdtable`` (Markdown tables
written straight from a DataFrame)."""
