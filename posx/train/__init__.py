"""Training: the loop from an explicit start state, and context extension of a trained run."""
