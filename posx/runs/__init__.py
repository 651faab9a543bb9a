"""Run directories: typed records, saving and loading, checkpoints, lineage of extended runs."""
