"""Partial position interpolation, a RoPE rescaling written outside posx.

Each frequency is divided by s^strength, s = length / T: strength 1 is position interpolation
(Chen et al. 2023, posx's own ``pi``), 0 is plain RoPE, and values between interpolate part way.
Evaluate with it:
    posx eval-extrapolate RUN 'eval.methods=[none,pi,examples.partial_pi:partial_pi]'
    posx eval-extrapolate RUN 'eval.methods=[examples.partial_pi:partial_pi]' \\
        'eval.params={partial_pi:{strength:0.5}}'
(the folder holding ``examples/`` must be on PYTHONPATH). With strength 1 its numbers equal
``pi``'s (tested).
"""

from dataclasses import dataclass

from posx.rope import rope_method
from posx.schema.fields import within


@dataclass
class Params:
    strength: float = within(1.0, 0.0, 1.0)  # the power of s that divides each frequency


@rope_method(Params)
def partial_pi(inv_freq, original_context, length, params):
    """theta_i / s^strength, s = max(1, length / T); no attention factor (1.0)."""
    s = max(1.0, length / original_context)
    return inv_freq / s**params.strength, 1.0
