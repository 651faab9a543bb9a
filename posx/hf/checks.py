"""Checks around loading a transformers checkpoint, each failure one ``PosxError`` line naming the
file and the fix: config.json's sizes (``check_config_sizes``), transformers' own refusal of it
(``config_refusal``, told by type name), and after loading that every weight came from the
safetensors with the config's shape, none left over (``check_loading``): a model partly at its
random initialisation would otherwise be evaluated as if trained.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Optional

from posx.core.errors import PosxError
from posx.core.library_errors import type_names
from posx.core.validate import validate
from posx.schema.fields import positive

ORIGINAL = "original_max_position_embeddings"
REFUSED = "huggingface_hub.errors.StrictDataclassError"  # transformers' config validation (v5)
SHOWN = 3  # weight names a line lists


def _read(model_dir: Path) -> dict:
    """config.json as a dict; {} where it is not readable JSON (transformers then says why)."""
    try:
        data = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass
class _Original:  # rope_parameters (transformers 5) or rope_scaling (4): the context the model trained with
    original_max_position_embeddings: Optional[int] = positive(None)


@dataclass
class Sizes:
    """The sizes of config.json posx and the model divide by; absent or null: the model's default."""

    vocab_size: Optional[int] = positive(None)
    hidden_size: Optional[int] = positive(None)
    intermediate_size: Optional[int] = positive(None)
    num_hidden_layers: Optional[int] = positive(None)
    num_attention_heads: Optional[int] = positive(None)
    num_key_value_heads: Optional[int] = positive(None)
    head_dim: Optional[int] = positive(None)
    max_position_embeddings: Optional[int] = positive(None)
    rope_parameters: Optional[_Original] = None
    rope_scaling: Optional[_Original] = None

    def check(self, at: str = "") -> Optional[str]:
        hidden, heads, kv = self.hidden_size, self.num_attention_heads, self.num_key_value_heads
        if hidden and heads and self.head_dim is None and hidden % heads:
            return (
                f"hidden_size={hidden} is not a multiple of num_attention_heads={heads}; "
                "set num_attention_heads (or head_dim) to the model's"
            )
        if heads and kv and heads % kv:
            return f"num_attention_heads={heads} is not a multiple of num_key_value_heads={kv}; set it to the model's"
        return None


def check_config_sizes(model_dir: Path) -> None:
    """config.json's ``Sizes``: positive whole numbers, and heads that divide what they split."""
    data = _read(model_dir)
    sizes = {f.name: data[f.name] for f in fields(Sizes) if data.get(f.name) is not None}
    for nest in ("rope_parameters", "rope_scaling"):
        nested = sizes.pop(nest, None)
        if isinstance(nested, dict) and nested.get(ORIGINAL) is not None:
            sizes[nest] = {ORIGINAL: nested[ORIGINAL]}
    validate(sizes, Sizes, f"{model_dir}/config.json")


def config_refusal(exc: BaseException, model_dir: Path) -> PosxError | None:
    """transformers' validation refusing config.json, as one line; None for any other error."""
    if REFUSED not in type_names(exc):
        return None
    reason = " ".join(str(exc.__cause__ or exc).split()).rstrip(".")
    return PosxError(f"{model_dir}/config.json holds values transformers refuses ({reason}); fix them to the model's")


def _tensors(n: int) -> str:
    return f"{n} tensor" if n == 1 else f"{n} tensors"


def _names(keys: list[str]) -> str:
    more = f", and {len(keys) - SHOWN} more" if len(keys) > SHOWN else ""
    return ", ".join(keys[:SHOWN]) + more


def check_loading(info: dict, model_dir: Path) -> None:
    """from_pretrained's loading info: no weight missing, mismatched or left over."""
    mismatched = sorted(info.get("mismatched_keys") or [])
    if mismatched:
        key, stored, wanted = mismatched[0]
        raise PosxError(
            f"{model_dir}'s weights do not match its config.json: {key} is {tuple(stored)} in the weights "
            f"but {tuple(wanted)} by config.json ({_tensors(len(mismatched))} in all); restore the "
            "config.json saved with these weights"
        )
    missing = sorted(info.get("missing_keys") or [])
    if missing:
        raise PosxError(
            f"{model_dir}'s weights lack {_tensors(len(missing))} its config.json describes ({_names(missing)}); "
            "restore the config.json saved with these weights (num_hidden_layers, tie_word_embeddings, ...)"
        )
    unexpected = sorted(info.get("unexpected_keys") or [])
    if unexpected:
        raise PosxError(
            f"{model_dir}'s weights hold {_tensors(len(unexpected))} its config.json has no place for "
            f"({_names(unexpected)}); restore the config.json saved with these weights"
        )
