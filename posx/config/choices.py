"""The choice fields of the config schema, as Enums: composition itself refuses a value
outside them, with the key and the accepted values.

Each Enum lists the names of a registry owned elsewhere (the registries stay the source of
truth of behaviour; ``tests/test_config_choices.py`` fails when an Enum and its registry
differ). A member *is* its string (``Encoding.rope == "rope"``, same hash, ``str()`` and
f-strings give ``rope``, JSON writes ``"rope"``), so registries keyed by name, comparisons and
run directories written before keep working; ``posx.config.compose.to_yaml`` writes plain strings.

Not Enums, on purpose: ``device`` (``cuda:N`` is open-ended), ``data.tokenizer`` (also a path
to a tokenizer.json; checked in ``posx.data.tokenizer``) and ``train.compile`` (Hydra and YAML
read ``true``/``false`` as booleans, which an Enum field refuses; checked in ``posx.core.device``).

This module imports nothing of posx.
"""

from __future__ import annotations

from enum import Enum


class Choice(str, Enum):
    """A str-valued Enum whose ``str()`` and ``format()`` are its value."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


def _choice(name: str, values: str, doc: str) -> type[Choice]:
    made = Choice(name, [(v, v) for v in values.split()], module=__name__)
    made.__doc__ = doc
    return made


Encoding = _choice("Encoding", "absolute rope sinusoidal alibi t5 nope", "pos.name: posx.model.encodings.ENCODINGS")
Block = _choice("Block", "gpt2 llama", "model.block: posx.model.blocks.BLOCKS")
Attention = _choice("Attention", "sdpa flex", "model.attention: posx.model.attention.ATTENTION")
Method = _choice("Method", "none pi ntk dynamic_ntk yarn dynamic_yarn ntk_by_parts abf llama3 longrope",
                 "eval.methods: posx.rope.METHODS")
ExtendMethod = _choice("ExtendMethod", " ".join(Method) + " interpolate",
                       "posx extend's method: posx.rope.METHODS, or interpolate (learned absolute)")
Beyond = _choice("Beyond", "none clamp interpolate", "eval.absolute_beyond: posx.model.encodings.BEYOND")
Protocol = _choice("Protocol", "nonoverlapping sliding", "eval.protocol: posx.eval.scoring.PROTOCOLS")
Variant = _choice("Variant", "prompt copy", "eval.passkey.variants: posx.eval.passkey.VARIANTS")
Source = _choice("Source", "stdlib text datasets", "data.source: posx.data.sources.SOURCES")
Logger = _choice("Logger", "none tensorboard wandb", "logger.name: posx.core.trackers.LOGGERS")
LoggerMode = _choice("LoggerMode", "offline online disabled", "logger.mode: wandb's modes")

# Each Enum with the registry it mirrors: (module, attribute); its keys (a dict's) or items.
REGISTRIES = {
    Encoding: ("posx.model.encodings", "ENCODINGS"),
    Block: ("posx.model.blocks", "BLOCKS"),
    Attention: ("posx.model.attention", "ATTENTION"),
    Method: ("posx.rope", "METHODS"),
    Beyond: ("posx.model.encodings", "BEYOND"),
    Protocol: ("posx.eval.scoring", "PROTOCOLS"),
    Variant: ("posx.eval.passkey", "VARIANTS"),
    Source: ("posx.data.sources", "SOURCES"),
    Logger: ("posx.core.trackers", "LOGGERS"),
}
