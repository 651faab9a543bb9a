"""Which overrides a command other than training reads (``eval-extrapolate``, ``data prepare``, the
train.* keys ``extend`` sets), so one it would ignore is refused. No heavy imports (scripts use it)."""

from __future__ import annotations

from posx.core.errors import PosxError

EVAL_RUN = ("eval", "device", "threads", "logger", "results_dir", "data.cache_dir")
EVAL_CHECKPOINT = ("eval", "device", "threads", "results_dir", "data")
PREPARE = ("data", "results_dir", "experiment")
EVAL_ANY = ("eval", "device", "threads", "logger", "results_dir", "data")  # either of the two above
# The train.* keys ``posx extend`` sets itself (an override would be ignored), each with its setter.
SET_BY_EXTEND = {
    "train.context_length": "factor",
    "train.steps": "extend.steps",
    "train.lr": "extend.lr",
    "train.warmup_steps": "extend.warmup_steps",
    "train.min_lr_ratio": "extend.min_lr_ratio",
}


def key_of(override: str) -> str:
    """``a.b=1`` -> ``a.b``; also ``+a.b=1``, ``++a.b=1``, ``~a.b``."""
    return override.split("=", 1)[0].lstrip("+~").strip()


def under(key: str, prefixes: tuple[str, ...]) -> bool:
    """``key`` is one of ``prefixes`` or a key inside one (``eval.factors`` under ``eval``)."""
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def only(overrides: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [o for o in overrides if under(key_of(o), prefixes)]


def shown(prefixes: tuple[str, ...]) -> str:
    """``eval.*, device, ...``: the keys as a line names them."""
    return ", ".join(f"{p}.*" if p in ("eval", "data", "logger") else p for p in prefixes)


def refuse_others(
    overrides: list[str], prefixes: tuple[str, ...], what: str, why: str = "", reads: str | None = None
) -> None:
    """Refuse overrides of keys outside ``prefixes``, naming what does apply to ``what`` (``reads``,
    else the prefixes); ``why`` (a clause) says why the others do not."""
    others = list(dict.fromkeys(key_of(o) for o in overrides if not under(key_of(o), prefixes)))
    if others:
        one = len(others) == 1
        raise PosxError(
            f"{', '.join(others)} {'does' if one else 'do'} not apply to {what}{why}; it reads only "
            f"{reads or shown(prefixes)}, so leave {'it' if one else 'them'} out"
        )


def refuse_flags(args: list[str], command: str, takes: str) -> None:
    """A flag given to ``command``, which takes ``takes``: one line, before it reads as an override."""
    flags = [a for a in args if a.startswith("-")]
    if flags:
        raise PosxError(f"{command} does not take {flags[0]}: it takes {takes} (--help lists them)")


def refuse_words(overrides: list[str], command: str, takes: str) -> None:
    """A word that is no override (a second run, a typo): one line, not Hydra's grammar error."""
    words = [o for o in overrides if "=" not in o and not o.startswith(("~", "-"))]
    if words:
        raise PosxError(f"'{words[0]}' is not a key=value override; {command} takes {takes}")
