"""``posx export RUN --out DIR``: a llama-block RoPE run as a transformers LlamaForCausalLM directory
(config.json in transformers 5's and 4's spelling, model.safetensors, the run's tokenizer,
posx_export.json). posx rotates (even, odd) pairs, transformers dimension i with i + head_dim/2, so
every head's q and k rows are permuted, even rows first (the inverse of transformers'
``convert_llama_weights_to_hf.py``): the logits are unchanged. Each rope record maps onto a rope
type (docs/transformers.md, "Export") whose own frequencies must match the run's, else an error.
"""

from __future__ import annotations

import importlib
import json
import typing
from operator import attrgetter
from pathlib import Path
from types import ModuleType

import torch
from safetensors.torch import save_file

from posx import rope
from posx.core import files
from posx.core.errors import PosxError
from posx.data import tokenizer
from posx.model.blocks import RMS_EPS
from posx.model.rescale import trained_frequencies
from posx.runs.records import RunMeta
from posx.runs.rundir import load_run

INSTALL_HINT = "pip install 'posx[hf]' (transformers)"
FREQ_RTOL = 1e-5  # float32 rounding of transformers' own computation of the same frequencies


def require_transformers() -> ModuleType:
    """transformers, imported on first use: optional (posx[hf]), and seconds to import."""
    try:
        return importlib.import_module("transformers")
    except ImportError:
        raise PosxError(f"exporting and evaluating transformers models needs transformers; {INSTALL_HINT}") from None


def _trained(meta: RunMeta, where: str = "the run") -> tuple[torch.Tensor, float]:
    return trained_frequencies(meta.rope, meta.model.head_dim, meta.model.pos.base, meta.train_context, where)


def _default(theta: float) -> dict:
    return {"rope_type": "default", "rope_theta": float(theta)}


def rope_parameters(meta: RunMeta) -> dict:
    """transformers' ``rope_parameters`` for the frequencies recorded in ``meta.rope``."""
    record = meta.rope
    method = record.method
    defaults = rope.method_params(method) if method in rope.METHODS else {}
    params = {**defaults, **record.params}  # the published defaults where the record is silent
    base, d = meta.model.pos.base, meta.model.head_dim
    s = float(record.factor)
    T0 = record.original_context if record.original_context is not None else meta.train_context
    length = int(params.get("length") or T0)
    if method == "none":
        return _default(base)
    if method == "pi":
        return {"rope_type": "linear", "rope_theta": base, "factor": s}
    if method == "ntk":
        return _default(base * s ** (d / (d - 2)))
    if method == "abf":
        return _default(float(params["new_base"]))
    if method == "dynamic_ntk":  # frozen at the length it trained at (posx.extend)
        scale = s * max(length, T0) / T0 - (s - 1)
        return _default(base * scale ** (d / (d - 2)))
    if method in ("yarn", "dynamic_yarn", "ntk_by_parts", "llama3"):
        # dynamic_yarn: frozen at the length it trained at; ntk_by_parts: YaRN with attention factor 1
        factor = max(1.0, length / T0) if method == "dynamic_yarn" else s
        rope_type = "llama3" if method == "llama3" else "yarn"
        out = {"rope_type": rope_type, "rope_theta": base, "factor": factor, "original_max_position_embeddings": T0}
        return {**out, **_declared(method, params), **({"attention_factor": 1.0} if method == "ntk_by_parts" else {})}
    if method == "longrope":  # the per-pair factors it trained with (None: all 1) as both short and long
        ext = params.get("long_factor") if length > T0 else params.get("short_factor")
        ext = [1.0] * (d // 2) if ext is None else [float(x) for x in ext]
        out = {"rope_type": "longrope", "rope_theta": base, "factor": s, "original_max_position_embeddings": T0}
        return {**out, "short_factor": ext, "long_factor": ext, "attention_factor": float(_trained(meta)[1])}
    raise PosxError(
        f"the run's RoPE method {method!r} has no transformers rope type; "
        "export plain or pi/ntk/abf/dynamic_ntk/yarn/dynamic_yarn/ntk_by_parts/llama3/longrope runs"
    )


def _declared(method: str, params: dict) -> dict:
    """The parameters ``method`` takes but ``length``, of their declared type, under posx's names (which
    transformers shares for yarn and llama3); a null one (the method's formula) is left out."""
    hints = typing.get_type_hints(rope.params_of(method))
    return {
        name: _typed(hints[name], params[name])
        for name in rope.method_params(method)
        if name != "length" and params.get(name) is not None
    }


def _typed(hint, value):
    """``value`` as the type a parameter declares (Optional[float]: float)."""
    kind = next((a for a in typing.get_args(hint) if a is not type(None)), hint)
    return kind(value)


def llama_config(meta: RunMeta, hidden: int):
    """The ``transformers.LlamaConfig`` of a llama-block run."""
    m = meta.model.model
    config = require_transformers().LlamaConfig(
        vocab_size=meta.model.vocab_size,
        hidden_size=m.d_model,
        intermediate_size=hidden,
        num_hidden_layers=m.n_layer,
        num_attention_heads=m.n_head,
        num_key_value_heads=m.n_head,
        head_dim=meta.model.head_dim,
        hidden_act="silu",
        max_position_embeddings=meta.train_context,
        rms_norm_eps=RMS_EPS,
        tie_word_embeddings=m.tie_embeddings,
        rope_parameters=rope_parameters(meta),
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    config.architectures = ["LlamaForCausalLM"]
    config.dtype = "float32"
    return config


def check_expressible(config, meta: RunMeta, where: str) -> None:
    """transformers' frequencies for ``config`` must be the run's; else a one-line error."""
    inv_freq, attention = _trained(meta, where)
    rotary = require_transformers().models.llama.modeling_llama.LlamaRotaryEmbedding(config)
    theirs = rotary.inv_freq.double()
    off = ((theirs - inv_freq.double()).abs() / inv_freq.double()).max().item()
    if theirs.shape != inv_freq.shape or off > FREQ_RTOL or abs(rotary.attention_scaling - attention) > 1e-6:
        raise PosxError(
            f"transformers cannot express the RoPE frequencies {where} trained with "
            f"({meta.rope.method}): its {config.rope_parameters['rope_type']} rope type gives "
            f"frequencies off by {off:.1e} and attention factor {rotary.attention_scaling:.6g} "
            f"against {attention:.6g}; this run cannot be exported"
        )


def hf_state_dict(model, meta: RunMeta) -> dict[str, torch.Tensor]:
    """posx GPT (llama block) weights under LlamaForCausalLM's names, q/k rows permuted."""
    m = meta.model.model
    sd = {k: v.detach().cpu().float() for k, v in model.state_dict().items()}
    hd = meta.model.head_dim  # perm: q/k row order from posx's (even, odd) pairs to transformers' halves, per head
    one = torch.cat([torch.arange(0, hd, 2), torch.arange(1, hd, 2)])  # (hd,)
    perm = (torch.arange(m.n_head)[:, None] * hd + one).flatten()  # (H * hd,)
    out = {"model.embed_tokens.weight": sd["tok_emb.weight"], "model.norm.weight": sd["ln_f.weight"]}
    if not m.tie_embeddings:
        out["lm_head.weight"] = sd["lm_head.weight"]
    for i in range(m.n_layer):
        p, h = f"blocks.{i}.", f"model.layers.{i}."
        q, k, v = sd[p + "attn.qkv.weight"].split(m.d_model, dim=0)  # (C, C) each
        out.update(
            {
                h + "input_layernorm.weight": sd[p + "ln1.weight"],
                h + "self_attn.q_proj.weight": q[perm],
                h + "self_attn.k_proj.weight": k[perm],
                h + "self_attn.v_proj.weight": v,
                h + "self_attn.o_proj.weight": sd[p + "attn.proj.weight"],
                h + "post_attention_layernorm.weight": sd[p + "ln2.weight"],
                h + "mlp.gate_proj.weight": sd[p + "mlp.gate.weight"],
                h + "mlp.up_proj.weight": sd[p + "mlp.up.weight"],
                h + "mlp.down_proj.weight": sd[p + "mlp.down.weight"],
            }
        )
    return {k: v.contiguous() for k, v in out.items()}


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in for every byte (openai/gpt-2, src/encoder.py)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = iter(range(256, 512))  # the other bytes, in order, past the byte range
    return {b: chr(b) if b in keep else chr(next(moved)) for b in range(256)}


def byte_tokenizer():
    """posx's byte vocabulary (token id = byte value) as a ``transformers.PreTrainedTokenizerFast``."""
    transformers = require_transformers()
    tokenizers = importlib.import_module("tokenizers")  # a dependency of transformers
    chars = _bytes_to_unicode()
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab={chars[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok)


def run_tokenizer(run_dir: Path, meta: RunMeta):
    """The tokenizer a run's ids mean, as a ``transformers.PreTrainedTokenizerFast``: posx's bytes for
    a byte run (or one recording none), else the run's ``tokenizer.json`` if its sha256 is model.json's."""
    recorded = meta.data.get("tokenizer") or {}  # a mapping: RunMeta checks it on load
    if recorded.get("kind", tokenizer.BYTE) == tokenizer.BYTE:
        return byte_tokenizer()
    path = run_dir / "tokenizer.json"
    if not path.is_file():
        raise PosxError(
            f"{run_dir} trained with a {tokenizer.kind_label(recorded['kind'])} tokenizer and has no tokenizer.json; "
            "put back the one written with the run to export it"
        )
    transformers = require_transformers()
    own = tokenizer.from_json(path.read_text(encoding="utf-8"), "file", str(path))
    if own.sha256 != recorded.get("sha256"):
        raise PosxError(
            f"{path} is not the tokenizer {run_dir} trained with (its sha256 is {own.sha256[:12]}, model.json "
            f"records {str(recorded.get('sha256'))[:12]}); put back the one written with the run to export it"
        )
    eos = None if own.eod is None else own.hf.id_to_token(own.eod)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=own.hf, eos_token=eos)


def config_json(config) -> dict:
    """config.to_dict() plus the transformers 4 spelling of the same RoPE (rope_theta, rope_scaling)."""
    data = config.to_dict()
    params = dict(config.rope_parameters)
    data["rope_theta"] = params.pop("rope_theta")
    data["rope_scaling"] = None if params["rope_type"] == "default" else params
    return data


# Model options LlamaForCausalLM has no equivalent of, with the value that means "off".
PLAIN = {"pos.rotary_fraction": 1.0, "model.attn_scale": "none", "model.nope_every": 0, "model.short_conv": 0}


def check_plain(spec, run_dir: Path) -> None:
    """A run with partial rotation, a logit scale, NoPE layers or a short convolution is refused in one line."""
    for key, plain in PLAIN.items():
        if (value := attrgetter(key)(spec)) != plain:
            raise PosxError(
                f"{run_dir} trains with {key}={value}, which transformers' Llama cannot hold "
                f"(only {key}={plain}); this run cannot be exported"
            )


def export_run(run_dir: Path, out: Path) -> Path:
    """Write the transformers directory of ``run_dir`` to ``out`` (new or empty), atomically."""
    require_transformers()
    model, meta = load_run(run_dir)
    m, pos = meta.model.model, meta.model.pos
    if m.block != "llama" or pos.name != "rope":
        raise PosxError(
            f"{run_dir} is a {m.block}-block {pos.name} run; posx exports llama-block RoPE runs only "
            "(train one with model=llama_tiny or model.block=llama pos=rope)"
        )
    check_plain(meta.model, run_dir)
    tok = run_tokenizer(run_dir, meta)
    files.new_dir(out, "--out")
    hidden = model.blocks[0].mlp.gate.out_features
    config = llama_config(meta, hidden)
    check_expressible(config, meta, str(run_dir))
    with files.staged_dir(out, out.parent, out.name) as (tmp, _):  # the directory appears whole
        (tmp / "config.json").write_text(json.dumps(config_json(config), indent=2, sort_keys=True) + "\n")
        weights = hf_state_dict(model, meta)
        files.safetensors_write(lambda: save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"}))
        tok.save_pretrained(str(tmp))
        lineage = meta.extended_from.to_dict() if meta.extended_from else None
        source = {
            "format": "posx-export/1",
            "run": str(run_dir),
            "step": meta.step,
            "rope": meta.rope.to_dict(),
            "train_context": meta.train_context,
            "extended_from": lineage,
        }
        (tmp / "posx_export.json").write_text(json.dumps(source, indent=2) + "\n")
    return out
