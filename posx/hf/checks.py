"""Checks of a transformers checkpoint directory around its loading, each failure one
``PosxError`` line that names the file and what to change.

* Before transformers reads ``config.json``: the sizes posx and the model divide by are whole
  numbers of at least 1, and the heads divide what they split (``check_config_sizes``).
* What transformers' own config validation refuses (``huggingface_hub``'s strict dataclasses,
  told by their type names as ``posx.core.library_errors`` tells library errors, so that
  package is never imported here) becomes one line too (``config_refusal``).
* After ``from_pretrained(..., output_loading_info=True)``: every weight the config describes
  came from the safetensors with the shape the config gives it, and no tensor of the
  safetensors was left over (``check_loading``). A model whose weights were partly left at
  their random initialisation would otherwise be evaluated as if trained.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from posx.core.errors import PosxError
from posx.core.fieldcheck import is_integer
from posx.core.library_errors import type_names

# Sizes config.json may give (absent or null: the model's default); each must be at least 1.
SIZES = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
)
REFUSED = "huggingface_hub.errors.StrictDataclassError"  # transformers' config validation (v5)
SHOWN = 3  # weight names a line lists


def _read(model_dir: Path) -> dict:
    """config.json as a dict; {} where it is not readable JSON (transformers then says why)."""
    try:
        data = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _whole(value: Any) -> bool:
    return is_integer(value) and value >= 1


def check_config_sizes(model_dir: Path) -> None:
    """config.json's sizes: positive whole numbers; heads that divide hidden_size (where the
    head size is not given) and that the key/value heads divide."""
    data, where = _read(model_dir), f"{model_dir}/config.json"
    for key in SIZES:
        if data.get(key) is not None and not _whole(data[key]):
            raise PosxError(f"{where} sets {key}={data[key]!r}; it must be a whole number of at least 1")
    for nest in ("rope_parameters", "rope_scaling"):  # transformers 5 and 4 spellings
        nested = data.get(nest)
        original = nested.get("original_max_position_embeddings") if isinstance(nested, dict) else None
        if original is not None and not _whole(original):
            raise PosxError(
                f"{where} sets {nest}.original_max_position_embeddings={original!r}; it must be the context "
                "the model trained with (at least 1)"
            )
    hidden, heads, kv = data.get("hidden_size"), data.get("num_attention_heads"), data.get("num_key_value_heads")
    if hidden and heads and data.get("head_dim") is None and hidden % heads:
        raise PosxError(
            f"{where}: hidden_size={hidden} is not a multiple of num_attention_heads={heads}; "
            "set num_attention_heads (or head_dim) to the model's"
        )
    if heads and kv and heads % kv:
        raise PosxError(
            f"{where}: num_attention_heads={heads} is not a multiple of num_key_value_heads={kv}; "
            "set num_key_value_heads to the model's"
        )


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
