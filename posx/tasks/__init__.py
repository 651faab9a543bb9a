"""Synthetic long-context tasks: generators (one module per family), their registry and scoring."""
