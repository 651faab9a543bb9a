"""Known failures of the libraries posx runs on, each turned into one line that says what to change
(``advice``, asked by ``posx.cli.exits.user_errors``; the table ``KNOWN``, listed in
docs/reliability.md). Types are named ``module.QualName`` and compared with the MRO of the
exception and of those it was raised from, so no optional library is imported to recognise them."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

MEMORY = (
    "lower train.batch_size (or set train.micro_batch_size) when training, eval.batch_tokens when "
    "evaluating, or train a smaller model (model.d_model, model.n_layer)"
)
TORCHRUN = (
    "check torchrun's environment (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK), that every "
    "rank reaches MASTER_ADDR:MASTER_PORT, and device= (NCCL needs one GPU per rank; on CPUs gloo is used)"
)
JOB_LINES = ("error:", "internal error:", "stopped:")  # how a job's own one line starts
WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")
OS_ERRORS = ("builtins.OSError",)


def first_line(exc: BaseException) -> str:
    """The exception's message up to its first line break (a library's report can run on)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def file_in_traceback(exc: BaseException, suffixes: tuple[str, ...]) -> str | None:
    """The innermost frame's local that is a path ending in ``suffixes``: the file a failing call
    read (libraries in Rust or C++ do not say)."""
    tb, frames = exc.__traceback__, []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for value in frame.f_locals.values():
            if isinstance(value, (str, os.PathLike)) and os.fspath(value).endswith(suffixes):
                return os.fspath(value)
    return None


def _saying(lead: str, fix: str) -> Callable[[BaseException], str]:
    """The advice ``<lead> (<the exception's first line>); <fix>``."""

    def line(exc: BaseException) -> str:
        return f"{lead} ({first_line(exc)}); {fix}"

    return line


_oom = _saying("out of memory", MEMORY)
_tokenizers = _saying(
    "the tokenizers library failed on its input",
    "check data.tokenizer (a valid tokenizer.json, or byte / bpe) and the corpus in data.path or data.name",
)
_datasets = _saying(
    "the datasets library could not load the data",
    "check data.name, data.config_name, data.data_files, data.split and data.text_column (without a network "
    "only local files and datasets already in the cache load)",
)
_wandb = _saying(
    "wandb could not start",
    "log in with `wandb login` (or set WANDB_API_KEY), or use logger.mode=offline, or logger=none",
)
_protobuf = _saying(
    "TensorBoard cannot start with the installed protobuf",
    "install a protobuf TensorBoard supports (pip install -U tensorboard protobuf), or use logger=none",
)
_distributed = _saying("distributed start-up failed", TORCHRUN)


def _weights(exc: BaseException) -> str:
    if "os error 28" in str(exc) or "No space left" in str(exc):
        return _disk_full(exc)
    where = file_in_traceback(exc, WEIGHTS)
    name = f"the weights file {where}" if where else "a weights file"
    return (
        f"{name} is damaged or not in the format it claims ({first_line(exc)}); restore it, re-train "
        "(or re-export) the run, or point posx at another copy"
    )


def _sweep_job(exc: BaseException) -> str:
    """A failed submitit job: the posx line it printed to its error stream, and where its logs are."""
    text = str(exc)
    said = [line.strip() for line in text.splitlines() if line.strip().startswith(JOB_LINES)]
    logs = re.search(r"with path (\S+)/[^/\s]+_result\.pkl", text)
    where = f" (its logs: {logs.group(1)})" if logs else ""
    if said:
        return f"a sweep job failed{where}: {said[-1].removeprefix('error:').strip()}"
    return f"a sweep job failed{where}: {first_line(exc)}; its log says why"


def _missing(exc: BaseException) -> str:
    name = getattr(exc, "name", None) or first_line(exc)
    return f"a package posx needs here is missing or broken ({first_line(exc)}); reinstall it: pip install {name}"


def _where(exc: BaseException) -> str:
    path = getattr(exc, "filename", None)
    return f" {path}" if path else ""


def _disk_full(exc: BaseException) -> str:
    return (
        f"no space left on the disk writing{_where(exc)}; free space there, or write elsewhere with "
        "results_dir= (and data.cache_dir= for token stores)"
    )


def _permission(exc: BaseException) -> str:
    return (
        f"permission denied on{_where(exc)}; fix its permissions, or use a directory you can write "
        "with results_dir= (or --out / --results-dir)"
    )


def _exists(exc: BaseException) -> str:
    return f"{exc.filename} exists and is not a directory; move it or choose another path"  # type: ignore[attr-defined]


def _os(exc: BaseException) -> str:
    reason = getattr(exc, "strerror", None) or first_line(exc)
    return f"cannot use{_where(exc)}: {reason}; check the path, its permissions and free space"


def _errno(*codes: int) -> Callable[[BaseException], bool]:
    return lambda exc: getattr(exc, "errno", None) in codes


def _says(*phrases: str) -> Callable[[BaseException], bool]:
    return lambda exc: any(p in str(exc) for p in phrases)


@dataclass(frozen=True)
class Known:
    """One known failure: the library, its exception types, the advice, and (builtin types) ``when``."""

    library: str
    types: tuple[str, ...]
    advice: Callable[[BaseException], str]
    when: Callable[[BaseException], bool] | None = None


KNOWN = (
    Known("torch", ("torch.OutOfMemoryError",), _oom),
    Known("torch (CPU allocator)", ("builtins.RuntimeError",), _oom, _says("can't allocate memory", "out of memory")),
    Known("python", ("builtins.MemoryError",), _oom),
    Known("safetensors", ("safetensors._safetensors_rust.SafetensorError",), _weights),
    Known("torch.load", ("_pickle.UnpicklingError", "pickle.UnpicklingError"), _weights),
    Known("torch.load", ("builtins.RuntimeError",), _weights, _says("PytorchStreamReader", "invalid load key")),
    Known("tokenizers", ("pyo3_runtime.PanicException",), _tokenizers),
    Known("datasets", ("datasets.exceptions.DatasetsError",), _datasets),
    Known("pyarrow (datasets)", ("pyarrow.lib.ArrowException",), _datasets),
    Known("wandb", ("wandb.errors.errors.Error",), _wandb),
    Known("tensorboard", ("builtins.TypeError",), _protobuf, _says("Descriptors cannot be created directly")),
    Known("torch.distributed", ("torch.distributed.DistError",), _distributed),
    Known("torch.distributed", ("builtins.RuntimeError",), _distributed, _says("NCCL", "ProcessGroup", "Gloo")),
    Known("torch.distributed", ("builtins.ValueError",), _distributed, _says("rendezvous", "MASTER_ADDR")),
    Known("submitit", ("submitit.core.utils.UncompletedJobError",), _sweep_job),
    Known("python", ("builtins.ImportError",), _missing),
    Known("operating system", OS_ERRORS, _disk_full, _errno(errno.ENOSPC, errno.EDQUOT)),
    Known("operating system", OS_ERRORS, _permission, _errno(errno.EACCES, errno.EPERM, errno.EROFS)),
    Known("operating system", ("builtins.FileExistsError",), _exists, lambda exc: bool(getattr(exc, "filename", ""))),
    Known("operating system", OS_ERRORS, _os),
)


def type_names(exc: BaseException) -> set[str]:
    """``module.QualName`` of every class the exception is an instance of."""
    return {f"{cls.__module__}.{cls.__qualname__}" for cls in type(exc).__mro__}


def chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, then each it was explicitly raised from (``raise ... from``)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__


def advice(exc: BaseException) -> str | None:
    """The first matching entry of ``KNOWN``'s line for ``exc`` or one it was raised from, else None."""
    for entry in KNOWN:
        for found in chain(exc):
            if type_names(found) & set(entry.types) and (entry.when is None or entry.when(found)):
                return entry.advice(found)
    return None
