"""Real Qwen3 weights from a local Hugging Face directory: config.json and *.safetensors shards.

The directory is named on the server side only (the `CB_LIVE_WEIGHTS_DIR` environment variable or a
function argument), never by a browser. config.json is parsed here, without transformers, because
transformers v5 moved `rope_theta` into `rope_parameters` and we only need a dozen numbers.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

from engine.live.errors import LiveError
from engine.presets import ModelSpec, count_params  # noqa: F401  (count_params: re-exported)

WEIGHTS_DIR_ENV = "CB_LIVE_WEIGHTS_DIR"
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def weights_dir_from_env() -> str | None:
    value = os.environ.get(WEIGHTS_DIR_ENV, "").strip()
    return value or None


def spec_from_hf_config(config: dict, name: str = "checkpoint") -> ModelSpec:
    """A ModelSpec from a Qwen3 config.json's fields, every one checked before anything is built.

    Refuses, in one line each: other architectures, attention biases, non-SiLU MLPs, rotary scaling (YaRN,
    linear, ...) and sliding-window layers, which the live model does not implement, and any shape that is
    not a positive integer. rope_theta defaults to Hugging Face's 10,000 when the file gives none.
    """
    if not isinstance(config, dict):
        raise LiveError("config.json must hold a JSON object")
    model_type = config.get("model_type", "qwen3")
    if model_type != "qwen3":
        raise LiveError(f"config.json says model_type {model_type!r}; live mode runs Qwen3 checkpoints only")
    if config.get("attention_bias", False):
        raise LiveError("config.json has attention_bias true; the live Qwen3 model has no attention biases")
    if config.get("hidden_act", "silu") != "silu":
        raise LiveError(f"config.json has hidden_act {config['hidden_act']!r}; the live Qwen3 MLP is SiLU-gated")
    heads = _positive_int(config, "num_attention_heads")
    hidden = _positive_int(config, "hidden_size")
    kv_heads = _positive_int(config, "num_key_value_heads", heads)
    if heads % kv_heads:
        raise LiveError(f"config.json: num_attention_heads ({heads}) is not a multiple of "
                        f"num_key_value_heads ({kv_heads})")
    if config.get("head_dim") is None and hidden % heads:
        raise LiveError(f"config.json has no head_dim and hidden_size ({hidden}) is not a multiple of "
                        f"num_attention_heads ({heads})")
    head_dim = _positive_int(config, "head_dim", hidden // heads)
    if head_dim % 2:
        raise LiveError(f"config.json: head_dim must be even for rotary embeddings; got {head_dim}")
    num_layers = _positive_int(config, "num_hidden_layers")
    max_len = _positive_int(config, "max_position_embeddings", 40_960)
    _check_full_attention(config, num_layers, max_len)
    dtype = config.get("dtype") or config.get("torch_dtype") or "bfloat16"
    tie = config.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise LiveError(f"config.json: tie_word_embeddings must be true or false; got {tie!r}")
    spec = ModelSpec(
        name=name,
        num_layers=num_layers,
        num_q_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=hidden,
        intermediate_size=_positive_int(config, "intermediate_size"),
        vocab_size=_positive_int(config, "vocab_size"),
        max_model_len=max_len,
        dtype_bytes=_DTYPE_BYTES.get(str(dtype), 2),
        tie_word_embeddings=tie,
        rope_theta=_rope_theta(config),
        rms_norm_eps=_positive_float(config, "rms_norm_eps", 1e-6),
    )
    return spec


_MISSING = object()


def _positive_int(config: dict, key: str, default=_MISSING) -> int:
    value = config.get(key)
    if value is None:
        if default is _MISSING:
            raise LiveError(f"config.json lacks {key!r}")
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 1:
        raise LiveError(f"config.json: {key} must be a positive integer; got {value!r}")
    return int(value)


def _positive_float(config: dict, key: str, default: float) -> float:
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise LiveError(f"config.json: {key} must be a positive number; got {value!r}")
    return float(value)


def _rope_theta(config: dict) -> float:
    """rope_theta from the top level (transformers v4) or rope_parameters (v5); only unscaled rotary is
    implemented, so any rope_scaling or a rope_type other than "default" is refused."""
    params = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or {}
    for field_name, block in (("rope_parameters", params), ("rope_scaling", scaling)):
        if not isinstance(block, dict):
            raise LiveError(f"config.json: {field_name} must be an object or null; got {block!r}")
        kind = block.get("rope_type", block.get("type", "default"))
        if kind != "default":
            raise LiveError(f"config.json sets {field_name} type {kind!r}; live mode implements unscaled rotary "
                            f"embeddings only (rope_type 'default')")
    theta = config.get("rope_theta")
    if theta is None:
        theta = params.get("rope_theta", 10_000.0)  # Hugging Face's default when the file gives none
    return _positive_float({"rope_theta": theta}, "rope_theta", 10_000.0)


def _check_full_attention(config: dict, num_layers: int, max_len: int) -> None:
    """Refuse sliding-window layers, by Hugging Face's Qwen3 rule: the window is `sliding_window` when
    `use_sliding_window` is true (else there is none), and it applies to the layers `layer_types` marks
    "sliding_attention" (by default, those from `max_window_layers` on). A window that covers every
    position the model serves is full attention, and is accepted."""
    if not config.get("use_sliding_window", False) or config.get("sliding_window") is None:
        return
    window = _positive_int(config, "sliding_window")
    layer_types = config.get("layer_types")
    if layer_types is None:
        first = config.get("max_window_layers", 28)
        if isinstance(first, bool) or not isinstance(first, int) or first < 0:
            raise LiveError(f"config.json: max_window_layers must be a non-negative integer; got {first!r}")
        sliding = list(range(first, num_layers))
    else:
        kinds = ("full_attention", "sliding_attention")
        if (not isinstance(layer_types, list) or len(layer_types) != num_layers
                or any(k not in kinds for k in layer_types)):
            raise LiveError(f"config.json: layer_types must give one of {', '.join(kinds)} per layer ({num_layers})")
        sliding = [i for i, kind in enumerate(layer_types) if kind == "sliding_attention"]
    if sliding and window < max_len:
        raise LiveError(f"config.json turns on sliding-window attention (window {window} on {len(sliding)} of "
                        f"{num_layers} layers, from layer {sliding[0]}); live mode implements full attention only")


def read_spec(weights_dir: str | Path) -> ModelSpec:
    path = Path(weights_dir) / "config.json"
    try:
        config = json.loads(path.read_text())
    except OSError as exc:
        raise LiveError(f"cannot read {path} ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise LiveError(f"{path} is not valid JSON ({exc.msg})") from None
    return spec_from_hf_config(config, name=Path(weights_dir).name or "checkpoint")


def load_weights(model, weights_dir: str | Path) -> int:
    """Copy every tensor of the directory's *.safetensors into the model's parameter of the same name.

    Returns the number of tensors loaded. A missing or misshapen tensor is an error; `lm_head.weight`
    in a tied checkpoint is skipped (it equals the embedding).
    """
    import torch
    from safetensors import safe_open

    files = sorted(Path(weights_dir).glob("*.safetensors"))
    if not files:
        raise LiveError(f"no *.safetensors files in {weights_dir}")
    params = model.hf_parameters()  # fused weights appear as views of their Hugging Face blocks
    loaded: set[str] = set()
    with torch.no_grad():
        for file in files:
            with safe_open(str(file), framework="pt", device="cpu") as shard:
                for name in shard.keys():
                    if name == "lm_head.weight" and name not in params:
                        continue
                    if name not in params:
                        raise LiveError(f"{file.name} holds {name!r}, which a Qwen3 model does not have")
                    tensor = shard.get_tensor(name)
                    param = params[name]
                    if tuple(tensor.shape) != tuple(param.shape):
                        raise LiveError(f"{name} has shape {tuple(tensor.shape)} in {file.name}, "
                                        f"expected {tuple(param.shape)} from config.json")
                    param.copy_(tensor.to(device=param.device, dtype=param.dtype))
                    loaded.add(name)
    missing = sorted(set(params) - loaded)
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise LiveError(f"{weights_dir} lacks {', '.join(missing[:3])}{more}")
    return len(loaded)
