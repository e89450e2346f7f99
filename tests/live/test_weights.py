"""Real weights: config.json parsed without transformers, safetensors loaded under Hugging Face names."""
import json
import math

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from engine.live.errors import LiveError  # noqa: E402
from engine.presets import count_params  # noqa: E402
from engine.live.qwen3 import Qwen3ForCausalLM  # noqa: E402
from engine.live.weights import (  # noqa: E402
    WEIGHTS_DIR_ENV, load_weights, read_spec, spec_from_hf_config,
)

# A tiny Qwen3 config.json in transformers v5's shape (rope_theta inside rope_parameters).
CONFIG = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 160,
    "num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300,
    "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_parameters": {"rope_theta": 10000.0,
    "rope_type": "default"}, "tie_word_embeddings": False, "attention_bias": False, "dtype": "bfloat16",
}


def hf_state_dict(config: dict, seed: int = 0) -> dict:
    """Tensors named as in a Hugging Face Qwen3 checkpoint, built from the config by hand."""
    gen = torch.Generator().manual_seed(seed)
    h, i, d = config["hidden_size"], config["intermediate_size"], config["head_dim"]
    hq, hkv, v = config["num_attention_heads"], config["num_key_value_heads"], config["vocab_size"]

    def t(*shape):
        return torch.randn(*shape, generator=gen) * 0.2

    sd = {"model.embed_tokens.weight": t(v, h), "model.norm.weight": t(h)}
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        sd.update({
            p + "input_layernorm.weight": t(h), p + "post_attention_layernorm.weight": t(h),
            p + "self_attn.q_proj.weight": t(hq * d, h), p + "self_attn.k_proj.weight": t(hkv * d, h),
            p + "self_attn.v_proj.weight": t(hkv * d, h), p + "self_attn.o_proj.weight": t(h, hq * d),
            p + "self_attn.q_norm.weight": t(d), p + "self_attn.k_norm.weight": t(d),
            p + "mlp.gate_proj.weight": t(i, h), p + "mlp.up_proj.weight": t(i, h), p + "mlp.down_proj.weight": t(h, i),
        })
    if not config["tie_word_embeddings"]:
        sd["lm_head.weight"] = t(v, h)
    return sd


def write_checkpoint(path, config, state, shards=2):
    """config.json plus the tensors split across `shards` files, as Hugging Face shards large models."""
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    names = sorted(state)
    for s in range(shards):
        part = {n: state[n].contiguous() for n in names[s::shards]}
        safetensors_torch.save_file(part, str(path / f"model-{s + 1:05d}-of-{shards:05d}.safetensors"))


def test_config_json_gives_the_model_shapes():
    spec = spec_from_hf_config(CONFIG, name="tiny-ckpt")
    assert (spec.num_layers, spec.num_q_heads, spec.num_kv_heads, spec.head_dim) == (3, 8, 2, 16)
    assert (spec.hidden_size, spec.intermediate_size, spec.vocab_size) == (64, 160, 300)
    assert spec.rope_theta == 10000.0 and spec.max_model_len == 2048 and not spec.tie_word_embeddings
    assert spec.num_params == count_params(spec) == sum(t.numel() for t in hf_state_dict(CONFIG).values())


def test_rope_theta_at_top_level_is_read_too_and_defaults_to_hugging_faces_ten_thousand():
    assert spec_from_hf_config({**CONFIG, "rope_parameters": None, "rope_theta": 5e5}).rope_theta == 5e5
    assert spec_from_hf_config({**CONFIG, "rope_parameters": {"rope_theta": 1e6}}).rope_theta == 1e6
    assert spec_from_hf_config({k: v for k, v in CONFIG.items() if k != "rope_parameters"}).rope_theta == 1e4


def test_the_model_rotates_by_the_checkpoints_rope_theta():
    # Position 3, lowest non-trivial frequency pair i = 1 of head_dim 16: angle 3 / theta^(2/16).
    for theta in (1e4, 1e6):
        model = Qwen3ForCausalLM(spec_from_hf_config({**CONFIG, "rope_parameters": {"rope_theta": theta}}),
                                 dtype=torch.float32)
        assert model.rope[3, 1].item() == pytest.approx(math.cos(3 / theta ** (2 / 16)), rel=1e-6)


@pytest.mark.parametrize("scaling", [
    {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}},
    {"rope_scaling": {"type": "linear", "factor": 2.0}},
    {"rope_parameters": {"rope_theta": 1e6, "rope_type": "dynamic", "factor": 2.0}},
])
def test_scaled_rotary_embeddings_are_refused_in_one_line(scaling):
    with pytest.raises(LiveError, match="unscaled rotary") as err:
        spec_from_hf_config({**CONFIG, **scaling})
    assert "\n" not in str(err.value)


def test_default_rope_scaling_entries_are_accepted():
    spec = spec_from_hf_config({**CONFIG, "rope_scaling": {"rope_type": "default"}, "rope_theta": 2e4,
                                "rope_parameters": None})
    assert spec.rope_theta == 2e4


@pytest.mark.parametrize("window", [
    {"use_sliding_window": True, "sliding_window": 512, "max_window_layers": 1},
    {"use_sliding_window": True, "sliding_window": 512, "layer_types": ["full_attention", "sliding_attention",
                                                                        "full_attention"]},
])
def test_sliding_window_layers_are_refused_in_one_line(window):
    with pytest.raises(LiveError, match="sliding-window attention .*full attention only"):
        spec_from_hf_config({**CONFIG, **window})


@pytest.mark.parametrize("window", [
    {"use_sliding_window": False, "sliding_window": 512, "max_window_layers": 0},  # Qwen2.5's shipped shape
    {"use_sliding_window": True, "sliding_window": None},
    {"use_sliding_window": True, "sliding_window": 512, "max_window_layers": 3},  # no layer from 3 on
    {"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 0},  # covers all 2,048 positions
])
def test_windows_that_never_slide_are_full_attention(window):
    assert spec_from_hf_config({**CONFIG, **window}).num_layers == 3


@pytest.mark.parametrize("field, value", [
    ("num_hidden_layers", 0), ("num_hidden_layers", -2), ("num_attention_heads", 0), ("hidden_size", 64.5),
    ("intermediate_size", "160"), ("vocab_size", True), ("num_key_value_heads", 3), ("head_dim", 15),
    ("max_position_embeddings", 0), ("rms_norm_eps", -1e-6), ("tie_word_embeddings", "false"),
    ("rope_parameters", {"rope_theta": 0}), ("hidden_act", "gelu"),
])
def test_a_malformed_config_is_refused_in_one_line_naming_the_field(field, value):
    with pytest.raises(LiveError) as err:
        spec_from_hf_config({**CONFIG, field: value})
    message = str(err.value)
    assert "\n" not in message
    assert field in message or (field == "rope_parameters" and "rope_theta" in message)


def test_a_missing_shape_is_named():
    with pytest.raises(LiveError, match="lacks 'num_hidden_layers'"):
        spec_from_hf_config({k: v for k, v in CONFIG.items() if k != "num_hidden_layers"})


def test_qwen3_8b_config_counts_its_published_parameters():
    qwen3_8b = {"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
                "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                "tie_word_embeddings": False}
    assert count_params(spec_from_hf_config(qwen3_8b)) == pytest.approx(8.19e9, rel=2e-3)


@pytest.mark.parametrize("tied", [False, True])
def test_safetensors_directory_round_trips_every_weight_exactly(tmp_path, tied):
    config = {**CONFIG, "tie_word_embeddings": tied}
    state = hf_state_dict(config, seed=1)
    write_checkpoint(tmp_path / "ckpt", config, state)
    spec = read_spec(tmp_path / "ckpt")
    model = Qwen3ForCausalLM(spec, dtype=torch.float32)
    assert load_weights(model, tmp_path / "ckpt") == len(state)
    loaded = model.hf_parameters()  # fused q/k/v and gate/up come back as their Hugging Face blocks
    assert set(loaded) == set(state)
    for name, tensor in state.items():
        assert torch.equal(loaded[name], tensor), name


def test_a_missing_tensor_is_named(tmp_path):
    state = hf_state_dict(CONFIG)
    del state["model.layers.1.mlp.up_proj.weight"]
    write_checkpoint(tmp_path, CONFIG, state, shards=1)
    model = Qwen3ForCausalLM(read_spec(tmp_path), dtype=torch.float32)
    with pytest.raises(LiveError, match="model.layers.1.mlp.up_proj.weight"):
        load_weights(model, tmp_path)


def test_other_architectures_are_refused():
    with pytest.raises(LiveError, match="Qwen3 checkpoints only"):
        spec_from_hf_config({**CONFIG, "model_type": "llama"})


def test_live_run_loads_the_directory_named_by_the_server_environment(tmp_path, monkeypatch):
    from engine.live.executor import run_live
    from tests.live.helpers import tight_config

    state = hf_state_dict(CONFIG, seed=2)
    write_checkpoint(tmp_path, CONFIG, state)
    monkeypatch.setenv(WEIGHTS_DIR_ENV, str(tmp_path))
    trace = run_live(tight_config(), device="cpu")
    assert trace.live.weights == str(tmp_path)
    assert trace.live.model_preset == tmp_path.name  # shapes come from its config.json
