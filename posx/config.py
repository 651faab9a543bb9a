"""Typed configuration schema (Hydra structured configs) and checks of its values.

The dataclasses below are the schema: Hydra merges the YAML files of ``configs/`` onto
them, so a typo'd key or a wrong type fails at composition with Hydra's own message.
``check_config`` then rejects values that are well typed but meaningless (a negative step
count, an unknown method) with a one-line ``PosxError`` before any work starts.

Configs hold names, never import paths: a run directory is loadable without Hydra.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from posx.errors import PosxError

ENCODINGS = ("absolute", "rope")  # positional encodings posx can train
DEVICES = ("auto", "cpu", "cuda")


@dataclass
class ModelConfig:
    name: str = "tiny"  # preset name, recorded in the run
    n_layer: int = 4  # transformer blocks
    n_head: int = 4  # attention heads per block
    d_model: int = 128  # residual stream width; head_dim = d_model / n_head
    mlp_ratio: int = 4  # MLP hidden width = mlp_ratio * d_model
    dropout: float = 0.0  # dropout on attention and residual branches (training only)


@dataclass
class PosConfig:
    name: str = "rope"  # positional encoding: one of ENCODINGS
    base: float = 10000.0  # RoPE base b of theta_i = b^(-2i/d)
    max_positions: Optional[int] = None  # absolute: rows of the learned table (None: train.context_length)


@dataclass
class DataConfig:
    source: str = "stdlib"  # stdlib (the interpreter's own .py files) | text (data.path)
    path: Optional[str] = None  # text: a UTF-8 file, a directory or a glob
    val_fraction: float = 0.05  # share of files (or bytes) held out for validation
    cache_dir: str = "${results_dir}/cache"  # where the byte cache lives


@dataclass
class TrainConfig:
    context_length: int = 128  # T: the length the model trains at
    steps: int = 800  # optimizer steps
    batch_size: int = 32  # sequences per step
    lr: float = 3e-3  # peak learning rate (AdamW)
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_steps: int = 50  # linear warmup steps
    weight_decay: float = 0.1  # on matrices only
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0  # max global gradient norm (0 disables)
    eval_every: int = 100  # validation loss every N steps (and at the end)
    eval_batches: int = 8  # batches per validation estimate


@dataclass
class YarnConfig:
    beta_fast: float = 32.0  # rotations above which a pair keeps its frequency
    beta_slow: float = 1.0  # rotations below which a pair is fully interpolated
    truncate: bool = True  # floor/ceil the ramp bounds, as the YaRN authors do


@dataclass
class PasskeyConfig:
    enabled: bool = True  # passkey retrieval in eval-extrapolate (writes passkey.csv)
    variants: List[str] = field(default_factory=lambda: ["prompt", "copy"])  # see posx/passkey.py
    trials: int = 16  # sequences per (length, variant), the same ones for every method
    digits: int = 5  # length of the random key
    depth_buckets: int = 4  # trials are spread evenly over this many depth ranges
    seed: int = 0  # seeds keys, depths and filler offsets


@dataclass
class EvalConfig:
    factors: List[float] = field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0])  # lengths as multiples of T
    methods: List[str] = field(default_factory=lambda: ["none", "pi", "ntk", "yarn", "abf"])
    tokens: int = 16384  # scored tokens at every length (rounded up to a multiple of each length)
    batch_tokens: int = 16384  # tokens per forward pass (memory knob)
    scale: Optional[float] = None  # fixed RoPE scale s; None: s = L / T for each length
    abf_base: float = 500000.0  # ABF's new base
    yarn: YarnConfig = field(default_factory=YarnConfig)
    after_train: bool = False  # evaluate at the end of `posx train`
    protocol: str = "nonoverlapping"  # nonoverlapping | sliding (see posx/scoring.py)
    stride: Optional[int] = None  # sliding: tokens scored per window; None: T/2
    bucket_width: Optional[int] = None  # positions.csv bucket width in tokens; None: T/8
    passkey: PasskeyConfig = field(default_factory=PasskeyConfig)


@dataclass
class Config:
    seed: int = 0  # seeds weights, batches and evaluation windows
    device: str = "auto"  # auto (CUDA when present) | cpu | cuda
    name: Optional[str] = None  # run name; None: <pos>-T<context>-s<seed>-<time>
    results_dir: str = "results"  # runs/, sweeps/, cache/ live here
    model: ModelConfig = field(default_factory=ModelConfig)
    pos: PosConfig = field(default_factory=PosConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


def register_configs(cs: ConfigStore | None = None) -> None:
    """Register the schema under the name ``posx_schema`` (used by configs/config.yaml)."""
    (cs or ConfigStore.instance()).store(name="posx_schema", node=Config)


def config_dir() -> Path:
    """The Hydra config folder: inside the package when installed, else the repo's configs/."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "configs", here.parent / "configs"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise PosxError(f"posx configs not found next to {here}; reinstall posx (pip install .)")


def _positive(value: Any, key: str) -> None:
    if value is None or value <= 0:
        raise PosxError(f"{key} must be positive, got {value}; set {key}=<a positive number>")


def check_config(cfg: DictConfig | Config) -> None:
    """Reject well-typed but meaningless values, with a one-line message naming the key."""
    from posx.rope import METHODS  # local: rope imports torch, keep config import light

    if cfg.device not in DEVICES:
        raise PosxError(f"device={cfg.device} is not one of {', '.join(DEVICES)}")
    if cfg.pos.name not in ENCODINGS:
        raise PosxError(f"pos.name={cfg.pos.name} is unknown; choose one of {', '.join(ENCODINGS)}")
    for key in ("n_layer", "n_head", "d_model", "mlp_ratio"):
        _positive(cfg.model[key], f"model.{key}")
    if cfg.model.d_model % cfg.model.n_head:
        raise PosxError(
            f"model.d_model={cfg.model.d_model} is not divisible by model.n_head={cfg.model.n_head}"
        )
    head_dim = cfg.model.d_model // cfg.model.n_head
    if cfg.pos.name == "rope" and head_dim % 2:
        raise PosxError(f"RoPE needs an even head_dim, got d_model/n_head = {head_dim}")
    if not 0.0 <= cfg.model.dropout < 1.0:
        raise PosxError(f"model.dropout={cfg.model.dropout} must be in [0, 1)")
    if cfg.pos.base <= 1.0:
        raise PosxError(f"pos.base={cfg.pos.base} must be greater than 1")
    if cfg.pos.max_positions is not None:
        _positive(cfg.pos.max_positions, "pos.max_positions")
    for key in ("context_length", "steps", "batch_size", "lr", "eval_every", "eval_batches"):
        _positive(cfg.train[key], f"train.{key}")
    if cfg.train.warmup_steps < 0:
        raise PosxError(f"train.warmup_steps={cfg.train.warmup_steps} must be 0 or more")
    if not cfg.eval.factors:
        raise PosxError("eval.factors is empty; give at least one factor, e.g. eval.factors=[1,2,4,8]")
    for factor in cfg.eval.factors:
        if factor < 1:
            raise PosxError(f"eval.factors has {factor}; every factor must be at least 1")
    if not cfg.eval.methods:
        raise PosxError("eval.methods is empty; give at least one, e.g. eval.methods=[none,pi]")
    for method in cfg.eval.methods:
        if method not in METHODS:
            raise PosxError(f"eval.methods has unknown method '{method}'; choose from {', '.join(METHODS)}")
    if cfg.eval.scale is not None and cfg.eval.scale < 1:
        raise PosxError(f"eval.scale={cfg.eval.scale} must be at least 1 (or null for L/T)")
    _positive(cfg.eval.tokens, "eval.tokens")
    _positive(cfg.eval.batch_tokens, "eval.batch_tokens")
    _positive(cfg.eval.abf_base, "eval.abf_base")
    _check_scoring(cfg.eval)


def _check_scoring(ev) -> None:
    """eval.protocol, eval.stride, eval.bucket_width and eval.passkey.*."""
    from posx.passkey import VARIANTS
    from posx.scoring import PROTOCOLS

    if ev.protocol not in PROTOCOLS:
        raise PosxError(f"eval.protocol={ev.protocol} is unknown; choose one of {', '.join(PROTOCOLS)}")
    if ev.stride is not None:
        _positive(ev.stride, "eval.stride")
    if ev.bucket_width is not None:
        _positive(ev.bucket_width, "eval.bucket_width")
    pk = ev.passkey
    for key in ("trials", "digits", "depth_buckets"):
        _positive(pk[key], f"eval.passkey.{key}")
    if pk.enabled and not pk.variants:
        raise PosxError("eval.passkey.variants is empty; give prompt, copy or both, "
                        "or set eval.passkey.enabled=false")
    for variant in pk.variants:
        if variant not in VARIANTS:
            raise PosxError(f"eval.passkey.variants has unknown variant '{variant}'; "
                            f"choose from {', '.join(VARIANTS)}")
    if "copy" in pk.variants and pk.digits < 2:
        raise PosxError(f"eval.passkey.digits={pk.digits}: the copy variant needs at least 2 digits "
                        "(the first is the cue)")
    if pk.trials < pk.depth_buckets:
        raise PosxError(f"eval.passkey.trials={pk.trials} is fewer than eval.passkey.depth_buckets="
                        f"{pk.depth_buckets}; every depth bucket needs a trial")


def to_yaml(cfg: DictConfig) -> str:
    """The resolved config as YAML, without Hydra's own node."""
    container = OmegaConf.to_container(cfg, resolve=True)
    container.pop("hydra", None)
    return OmegaConf.to_yaml(container)


__all__ = [
    "Config", "ModelConfig", "PosConfig", "DataConfig", "TrainConfig", "EvalConfig",
    "YarnConfig", "PasskeyConfig", "ENCODINGS", "register_configs", "config_dir", "check_config", "to_yaml",
]
