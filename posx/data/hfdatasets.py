"""The ``datasets`` source: a Hugging Face split read as rows of text, each failure one line.
``datasets`` is an optional extra (``posx[datasets]``), imported only when this source is used."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any, NamedTuple

from posx.core.errors import PosxError

LOCAL_BUILDERS = ("json", "csv", "parquet", "text", "arrow", "pandas")
CACHE = "hf-datasets"  # datasets' own cache, under posx's cache directory


class Rows(NamedTuple):
    """A loaded split, checked: one text column, every row a string."""

    dataset: Any  # a datasets.Dataset holding only the text column
    what: str  # names the dataset in messages: dataset 'name' (config_name)
    files: Any  # data.data_files as handed to load_dataset (a list with ~ expanded)


def load_rows(
    name: str | None, config_name: str | None, data_files: Any, split: str, text_column: str, cache_dir: str | Path
) -> Rows:
    """The ``text_column`` of a dataset's ``split``, loaded and checked; a PosxError line otherwise."""
    if not name:
        raise PosxError(
            "data.source 'datasets' needs data.name: a hub dataset (e.g. wikitext) or a local "
            "builder (json, csv, parquet, text) with data.data_files"
        )
    datasets = _import_datasets()
    datasets.disable_progress_bars()  # no progress bars, retry chatter or error log: posx's one line says why
    datasets.utils.logging.set_verbosity(datasets.utils.logging.CRITICAL)
    for logger in ("huggingface_hub", "fsspec"):
        logging.getLogger(logger).setLevel(logging.ERROR)
    local = name in LOCAL_BUILDERS
    if local:
        _check_local_files(name, data_files)
    files = [os.path.expanduser(f) for f in data_files] if isinstance(data_files, (list, tuple)) else data_files
    what = f"dataset '{name}'" + (f" ({config_name})" if config_name else "")
    ds = _load(datasets, name, config_name, files, split, cache_dir, what, local)
    if text_column not in ds.column_names:
        raise PosxError(
            f"{what} has no column '{text_column}' (it has: {', '.join(ds.column_names)}); "
            "set data.text_column to the text column"
        )
    if len(ds) == 0:
        raise PosxError(f"{what} split '{split}' has no rows; point data.data_files at non-empty files")
    ds = ds.select_columns([text_column])
    found = _first_non_text(datasets, ds, text_column)
    if found is not None:
        raise PosxError(
            f"{what}: row {found[0]} of column '{text_column}' is {found[1]}, not text; posx reads every row's text "
            "as a string: filter those rows out of the data, or set data.text_column to the text column"
        )
    return Rows(ds, what, files)


def _import_datasets():
    """The ``datasets`` package, or a one-line PosxError saying how to install it (an optional extra)."""
    try:
        import datasets
    except ImportError:
        raise PosxError("data.source 'datasets' needs the datasets package: pip install 'posx[datasets]'") from None
    return datasets


def _reason(exc: BaseException) -> str:
    """The exception and its cause (datasets wraps parse errors), on one line of at most 300 characters."""
    said = f"{exc.__class__.__name__}: {exc}"
    if exc.__cause__ is not None:
        said += f" ({exc.__cause__.__class__.__name__}: {exc.__cause__})"
    return " ".join(said.split())[:300]


def _local_files(data_files: Any) -> list[str]:
    """Every file name or pattern in data.data_files (a string, a list, or a dict of them by split)."""
    if data_files is None:
        return []
    if isinstance(data_files, str):
        return [data_files]
    if isinstance(data_files, dict):
        return [f for v in data_files.values() for f in _local_files(v)]
    return [str(f) for f in data_files]


def _check_local_files(name: str, data_files: Any) -> None:
    """A local builder's data.data_files: given, and every name that is not a glob an existing path."""
    if not data_files:
        raise PosxError(f"data.name={name} reads local files: set data.data_files to a file, a glob or a list")
    for pattern in _local_files(data_files):
        if not any(c in pattern for c in "*?[") and not Path(os.path.expanduser(pattern)).exists():
            raise PosxError(f"data.data_files '{pattern}' does not exist; point it at local {name} files")


def _load(datasets, name: str, config_name: str | None, files: Any, split: str, cache_dir, what: str, local: bool):
    """``datasets.load_dataset`` of one split, its failures as one PosxError line each."""
    try:
        return datasets.load_dataset(
            name, config_name, data_files=files, split=split, cache_dir=str(Path(cache_dir) / CACHE)
        )
    except (ConnectionError, OSError) as exc:
        if local:
            raise PosxError(f"cannot read {what}: {' '.join(str(exc).split())[:200]}") from None
        raise PosxError(
            f"cannot load {what} from the Hugging Face hub: not reachable and not cached here "
            f"({exc.__class__.__name__}); download it where the hub is reachable, or point posx at "
            "local files: data.name=json data.data_files=corpus.jsonl (or parquet, text)"
        ) from None
    except StopIteration:
        raise PosxError(f"{what} is empty: data.data_files holds no rows") from None
    except Exception as exc:  # datasets raises many types (ValueError, DatasetNotFoundError, ...)
        raise PosxError(f"cannot load {what} (split {split}): {_reason(exc)}") from None


def _first_non_text(datasets, ds, column: str) -> tuple[int, str] | None:
    """The first row of ``column`` that is not a string, and what it is instead; None when all are."""
    feature = ds.features[column]
    if isinstance(feature, datasets.Value):
        if feature.dtype not in ("string", "large_string"):
            return 0, f"{feature.dtype} (as is the whole column)"
        values = ds.data.column(column)
        if not values.null_count:
            return None
        import pyarrow.compute as pc  # datasets' own dependency, present whenever datasets is

        return pc.index(pc.is_null(values), True).as_py(), f"null ({values.null_count} rows are)"
    rows = (t for batch in ds.iter(batch_size=1024) for t in batch[column])  # mixed values: read them
    return next(
        ((i, "null" if t is None else f"a {type(t).__name__}") for i, t in enumerate(rows) if not isinstance(t, str)),
        None,
    )


def data_key(ds, column: str, cache_dir: str | Path) -> list:
    """What changes when the loaded rows do: the split's Arrow cache files (named after a hash of the
    data files) and their sizes; for a dataset in memory, a SHA-256 of the column's text."""
    root = Path(cache_dir) / CACHE
    files = [f["filename"] for f in ds.cache_files]
    if files:
        return [[os.path.relpath(f, root), os.path.getsize(f)] for f in files]
    digest = hashlib.sha256()
    for batch in ds.iter(batch_size=1024):
        for text in batch[column]:
            digest.update(text.encode("utf-8") + b"\0")
    return [digest.hexdigest()]
