"""Real Qwen3 weights from a local Hugging Face directory: config.json and *.safetensors shards.

The directory is named on the server side only (the `CB_LIVE_WEIGHTS_DIR` environment variable or a
function argument), never by a browser. config.json is parsed here, without transformers, because
transformers v5 moved `rope_theta` into `rope_parameters` and we only need a dozen numbers.
"""
from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from engine.live.errors import LiveError
from engine.presets import ModelSpec

WEIGHTS_DIR_ENV = "CB_LIVE_WEIGHTS_DIR"
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def weights_dir_from_env() -> str | None:
    value = os.environ.get(WEIGHTS_DIR_ENV, "").strip()
    return value or None


def count_params(spec: ModelSpec) -> int:
    """Exact parameter count of the Qwen3 layout for these shapes (embedding and untied lm_head included)."""
    h, i, d = spec.hidden_size, spec.intermediate_size, spec.head_dim
    attention = h * d * (2 * spec.num_q_heads + 2 * spec.num_kv_heads) + 2 * d
    per_layer = attention + 3 * h * i + 2 * h
    head = 0 if spec.tie_word_embeddings else spec.vocab_size * h
    return spec.num_layers * per_layer + spec.vocab_size * h + head + h


def spec_from_hf_config(config: dict, name: str = "checkpoint") -> ModelSpec:
    """A ModelSpec from a Qwen3 config.json's fields; refuses other architectures."""
    model_type = config.get("model_type", "qwen3")
    if model_type != "qwen3":
        raise LiveError(f"config.json says model_type {model_type!r}; live mode runs Qwen3 checkpoints only")
    if config.get("attention_bias", False):
        raise LiveError("config.json has attention_bias true; the live Qwen3 model has no attention biases")
    try:
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        rope = config.get("rope_theta")
        if rope is None:
            rope = (config.get("rope_parameters") or {}).get("rope_theta", 1_000_000.0)
        dtype = config.get("dtype") or config.get("torch_dtype") or "bfloat16"
        spec = ModelSpec(
            name=name,
            num_layers=int(config["num_hidden_layers"]),
            num_q_heads=heads,
            num_kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            hidden_size=hidden,
            intermediate_size=int(config["intermediate_size"]),
            vocab_size=int(config["vocab_size"]),
            num_params=0.0,
            max_model_len=int(config.get("max_position_embeddings", 40_960)),
            dtype_bytes=_DTYPE_BYTES.get(str(dtype), 2),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            rope_theta=float(rope),
            rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
        )
    except KeyError as exc:
        raise LiveError(f"config.json lacks {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise LiveError(f"config.json has a malformed field ({exc})") from None
    return replace(spec, num_params=float(count_params(spec)))


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
