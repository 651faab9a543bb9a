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

# positional encodings posx can train (posx.positions.ENCODINGS; configs/pos/<name>.yaml each)
ENCODINGS = ("absolute", "rope", "sinusoidal", "alibi", "t5", "nope")
ABSOLUTE_BEYOND = ("none", "clamp", "interpolate")  # learned absolute past its table
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
    num_buckets: int = 32  # t5: relative-distance buckets (half exact, half log-spaced)
    max_distance: int = 128  # t5: distances from here on share the last bucket
    per_layer: bool = False  # t5: one bias table per layer (T5 itself shares one)


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
    checkpoint_every: int = 100  # resumable checkpoint every N steps (0: only at the end and on SIGTERM/SIGUSR2)


@dataclass
class YarnConfig:
    beta_fast: float = 32.0  # rotations above which a pair keeps its frequency
    beta_slow: float = 1.0  # rotations below which a pair is fully interpolated
    truncate: bool = True  # floor/ceil the ramp bounds, as the YaRN authors do
    attention_factor: Optional[float] = None  # yarn only; None: 0.1 * ln(s) + 1


@dataclass
class DynamicNTKConfig:
    factor: Optional[float] = None  # s in b * (s*l/T - (s-1))^(d/(d-2)); None: the row's scale


@dataclass
class Llama3Config:
    low_freq_factor: float = 1.0  # wavelengths above T / low_freq_factor are divided by s
    high_freq_factor: float = 4.0  # wavelengths below T / high_freq_factor are kept


@dataclass
class LongRopeConfig:
    short_factor: Optional[List[float]] = None  # per-pair divisors at lengths <= T; None: all 1
    long_factor: Optional[List[float]] = None  # per-pair divisors past T; None: all 1
    attention_factor: Optional[float] = None  # None: sqrt(1 + ln(s) / ln(T))


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
    yarn: YarnConfig = field(default_factory=YarnConfig)  # also the ramp of dynamic_yarn, ntk_by_parts
    dynamic_ntk: DynamicNTKConfig = field(default_factory=DynamicNTKConfig)
    llama3: Llama3Config = field(default_factory=Llama3Config)
    longrope: LongRopeConfig = field(default_factory=LongRopeConfig)
    absolute_beyond: str = "none"  # learned absolute past its table: none | clamp | interpolate
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


@dataclass
class ExtendConfig:
    steps: int = 200  # optimizer steps of continued training at factor x T
    lr: float = 3e-4  # peak learning rate (a tenth of train.lr: a fine-tune, not a retrain)
    warmup_steps: int = 20  # linear warmup steps (the PI and YaRN fine-tunes use 20)
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio at the last step
    batch_size: Optional[int] = None  # sequences per step; None: train.batch_size * T / (factor * T)
    eval_every: Optional[int] = None  # validation at factor x T every N steps; None: train.eval_every


@dataclass
class ExtendRootConfig(Config):
    """``posx extend``: the training config plus what to extend and how."""

    parent: Optional[str] = None  # the run to extend (path or name under results/runs); set by RUN
    method: str = "yarn"  # a posx.rope method, or interpolate (learned absolute only)
    factor: float = 4.0  # new context = factor x the parent's T
    new_base: float = 500000.0  # abf: the new RoPE base
    extend: ExtendConfig = field(default_factory=ExtendConfig)


def register_configs(cs: ConfigStore | None = None) -> None:
    """Register the schemas ``posx_schema`` (configs/config.yaml) and ``posx_extend_schema``
    (configs/extend.yaml)."""
    cs = cs or ConfigStore.instance()
    cs.store(name="posx_schema", node=Config)
    cs.store(name="posx_extend_schema", node=ExtendRootConfig)


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
    if cfg.pos.name == "sinusoidal" and cfg.model.d_model % 2:
        raise PosxError(f"sinusoidal positions need an even model.d_model, got {cfg.model.d_model}")
    if cfg.pos.num_buckets < 2:
        raise PosxError(f"pos.num_buckets={cfg.pos.num_buckets} must be at least 2")
    if cfg.pos.max_distance <= cfg.pos.num_buckets // 2:
        raise PosxError(f"pos.max_distance={cfg.pos.max_distance} must exceed pos.num_buckets / 2 "
                        f"({cfg.pos.num_buckets // 2}), where the log-spaced buckets start")
    if not 0.0 <= cfg.model.dropout < 1.0:
        raise PosxError(f"model.dropout={cfg.model.dropout} must be in [0, 1)")
    if cfg.pos.base <= 1.0:
        raise PosxError(f"pos.base={cfg.pos.base} must be greater than 1")
    if cfg.pos.max_positions is not None:
        _positive(cfg.pos.max_positions, "pos.max_positions")
    for key in ("context_length", "steps", "batch_size", "lr", "eval_every", "eval_batches"):
        _positive(cfg.train[key], f"train.{key}")
    if cfg.train.checkpoint_every < 0:
        raise PosxError(f"train.checkpoint_every={cfg.train.checkpoint_every} must be 0 (only at the end) or more")
    if cfg.name is not None and (not str(cfg.name).strip() or "/" in str(cfg.name) or str(cfg.name) in (".", "..")):
        raise PosxError(f"name={cfg.name!r} must be a plain directory name (no '/', not '.' or '..')")
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
    if cfg.eval.absolute_beyond not in ABSOLUTE_BEYOND:
        raise PosxError(f"eval.absolute_beyond={cfg.eval.absolute_beyond} is unknown; "
                        f"choose one of {', '.join(ABSOLUTE_BEYOND)}")
    if cfg.eval.dynamic_ntk.factor is not None and cfg.eval.dynamic_ntk.factor < 1:
        raise PosxError(f"eval.dynamic_ntk.factor={cfg.eval.dynamic_ntk.factor} must be at least 1 "
                        "(or null for the row's scale)")
    if not 0 < cfg.eval.llama3.low_freq_factor < cfg.eval.llama3.high_freq_factor:
        raise PosxError("eval.llama3 needs 0 < low_freq_factor < high_freq_factor, got "
                        f"{cfg.eval.llama3.low_freq_factor} and {cfg.eval.llama3.high_freq_factor}")
    if not 0 < cfg.eval.yarn.beta_slow < cfg.eval.yarn.beta_fast:
        raise PosxError("eval.yarn needs 0 < beta_slow < beta_fast, got "
                        f"{cfg.eval.yarn.beta_slow} and {cfg.eval.yarn.beta_fast}")
    for key in ("yarn", "longrope"):
        value = cfg.eval[key].attention_factor
        if value is not None and value <= 0:
            raise PosxError(f"eval.{key}.attention_factor={value} must be positive (or null)")
    for key in ("short_factor", "long_factor"):
        values = cfg.eval.longrope[key]
        if values is not None and not all(v > 0 for v in values):
            raise PosxError(f"eval.longrope.{key} must hold positive numbers, got {list(values)}")
    _check_scoring(cfg.eval)


def check_extend_config(cfg: DictConfig | ExtendRootConfig) -> None:
    """``check_config`` plus the keys of ``posx extend``."""
    import math

    from posx.rope import METHODS

    check_config(cfg)
    if not cfg.parent:
        raise PosxError("name the run to extend: posx extend RUN method=<method> factor=<factor>")
    methods = (*METHODS, "interpolate")
    if cfg.method not in methods:
        raise PosxError(f"method={cfg.method} is unknown; choose one of {', '.join(methods)}")
    if not (math.isfinite(cfg.factor) and cfg.factor >= 1):
        raise PosxError(f"factor={cfg.factor} must be a finite number of at least 1 "
                        "(the new context is factor x T)")
    if cfg.new_base <= 1:
        raise PosxError(f"new_base={cfg.new_base} must be greater than 1 (ABF uses 500000)")
    for key in ("steps", "lr"):
        _positive(cfg.extend[key], f"extend.{key}")
    if cfg.extend.warmup_steps < 0:
        raise PosxError(f"extend.warmup_steps={cfg.extend.warmup_steps} must be 0 or more")
    if not 0 < cfg.extend.min_lr_ratio <= 1:
        raise PosxError(f"extend.min_lr_ratio={cfg.extend.min_lr_ratio} must be in (0, 1]")
    for key in ("batch_size", "eval_every"):
        if cfg.extend[key] is not None:
            _positive(cfg.extend[key], f"extend.{key}")


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
    "YarnConfig", "DynamicNTKConfig", "Llama3Config", "LongRopeConfig", "PasskeyConfig", "ExtendConfig",
    "ExtendRootConfig", "ENCODINGS", "ABSOLUTE_BEYOND", "register_configs", "check_extend_config", "config_dir",
    "check_config", "to_yaml",
]
