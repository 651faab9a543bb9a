"""ALiBi (Press et al., ICLR 2022) written outside posx, as a user writes an encoding.

Train with it:  posx train pos=custom pos.impl=examples.alibi_encoding:ALiBi
(the folder holding ``examples/`` must be on PYTHONPATH). ``pos.params={max_bias:8}`` sets its
one parameter. With the defaults its numbers equal posx's own ``pos=alibi`` (tested).
"""

from dataclasses import dataclass

import torch

from posx.model.positional import PositionalEncoding
from posx.schema.fields import positive


@dataclass
class Params:
    max_bias: float = positive(8.0, 64.0)  # head h of n has slope 2^(-max_bias * h / n)


class ALiBi(PositionalEncoding):
    """No embedding; head h adds -m_h * (i - j) to the logit of query i and key j <= i."""

    Params = Params  # what pos.params is checked against

    def __init__(self, spec, params: Params):
        super().__init__()
        n = spec.model.n_head
        slopes = [2.0 ** (-params.max_bias * h / n) for h in range(1, n + 1)]
        self.register_buffer("slopes", torch.tensor(slopes), persistent=False)  # (H,)

    def distance_bias(self, layer: int, length: int) -> torch.Tensor:
        """(H, L): the bias at distance 0 .. L-1; posx builds the causal mask from it."""
        distance = torch.arange(length, device=self.slopes.device, dtype=torch.float32)
        return -self.slopes.unsqueeze(1) * distance
