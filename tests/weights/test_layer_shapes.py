"""Per-layer head shapes and KV sharing (gemma4, mimo_v2_flash) on synthetic checkpoints."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from qkenergy.base.errors import QKEnergyError
from qkenergy.math.rope import inverse_frequencies
from qkenergy.weights.architecture import architecture
from qkenergy.weights.reading import layer_tensors, read_layer
from qkenergy.weights.rope_settings import layer_ropes
from tests.weights.test_layouts import DictSource

_TYPES = ["sliding_attention", "full_attention"] * 2
# Gemma 4 as its checkpoints on the Hub write it: the full layers' sizes in global_* keys.
_GEMMA4: dict[str, Any] = dict(
    model_type="gemma4_text",
    hidden_size=8,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=2,
    num_hidden_layers=4,
    layer_types=_TYPES,
    global_head_dim=4,
    num_global_key_value_heads=1,
    attention_k_eq_v=True,
    num_kv_shared_layers=2,
)
# ... and as transformers 5 saves it: per_layer_config, zero-padded layer keys, no global_* keys.
_SAVED: dict[str, Any] = {
    **{k: v for k, v in _GEMMA4.items() if not k.startswith(("global", "num_global"))},
    "per_layer_config": {
        "1": {"head_dim": 4, "num_key_value_heads": 1},
        "3": {"head_dim": 4, "num_key_value_heads": 1},
    },
}


@pytest.mark.parametrize("config", [_GEMMA4, _SAVED], ids=["global-keys", "per_layer_config"])
def test_full_layers_have_their_own_head_shape(config: dict[str, Any]) -> None:
    arch = architecture(config)
    assert arch.layer_shapes == ((1, 1, 4), (3, 1, 4))
    assert [arch.layer_head_dim(i) for i in range(4)] == [2, 4, 2, 4]
    assert [arch.layer_kv_heads(i) for i in range(4)] == [2, 1, 2, 1]
    assert arch.layer_kv_head(0).tolist() == [0, 0, 1, 1] and arch.layer_kv_head(1).tolist() == [0] * 4
    assert arch.head_dims == (2, 4)
    assert arch.key_layers == ((2, 0), (3, 1))  # the last two reuse the last earlier layer of their type


def test_without_k_eq_v_the_full_layers_keep_the_key_heads() -> None:
    arch = architecture(dict(_GEMMA4, attention_k_eq_v=False, num_kv_shared_layers=0))
    assert arch.layer_shapes == ((1, 2, 4), (3, 2, 4)) and arch.key_layers == ()


def test_mimo_sliding_layers_have_twice_the_key_heads() -> None:
    config = dict(
        model_type="mimo_v2_flash",
        hidden_size=8,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=2,
        num_hidden_layers=3,
        layer_types=["full_attention", "sliding_attention", "sliding_attention"],
    )
    arch = architecture(config)
    assert arch.layer_shapes == ((1, 2, 2), (2, 2, 2))
    assert arch.layer_kv_head(2).tolist() == [0, 0, 1, 1] and arch.layer_kv_head(0).tolist() == [0] * 4


def _gemma4_arrays(rng: np.random.Generator) -> dict[str, np.ndarray]:
    arrays = {}
    for i in range(4):
        n, kv = (4, 1) if i % 2 else (2, 2)
        arrays[f"model.layers.{i}.self_attn.q_proj.weight"] = rng.standard_normal((4 * n, 8))
        arrays[f"model.layers.{i}.self_attn.q_norm.weight"] = rng.uniform(0.5, 1.5, n)
        arrays[f"model.layers.{i}.input_layernorm.weight"] = rng.uniform(0.5, 1.5, 8)
        if i < 2:  # layers 2 and 3 have no key projection of their own
            arrays[f"model.layers.{i}.self_attn.k_proj.weight"] = rng.standard_normal((kv * n, 8))
            arrays[f"model.layers.{i}.self_attn.k_norm.weight"] = rng.uniform(0.5, 1.5, n)
    return arrays


def test_a_kv_shared_layer_reads_the_source_layers_keys_and_norms() -> None:
    arch = architecture(_GEMMA4)
    arrays = _gemma4_arrays(np.random.default_rng(0))
    source = DictSource(arrays)
    w = read_layer(source, arch, 3, fold_norm=True)
    assert w.w_query.shape == (4, 4, 8) and w.w_key.shape == (1, 4, 8) and w.kv_head.tolist() == [0] * 4
    p = "model.layers."
    g_q = arrays[f"{p}3.self_attn.q_norm.weight"]
    want_q = arrays[f"{p}3.self_attn.q_proj.weight"].reshape(4, 4, 8) * g_q[:, None]
    np.testing.assert_allclose(w.w_query, want_q * arrays[f"{p}3.input_layernorm.weight"], rtol=1e-6)
    # keys: layer 1's projection, key norm and input norm (its keys come from its own input)
    g_k = arrays[f"{p}1.self_attn.k_norm.weight"]
    want_k = arrays[f"{p}1.self_attn.k_proj.weight"].reshape(1, 4, 8) * g_k[:, None]
    np.testing.assert_allclose(w.w_key, want_k * arrays[f"{p}1.input_layernorm.weight"], rtol=1e-6)
    np.testing.assert_allclose(w.key_norm_gain, arrays[f"{p}1.input_layernorm.weight"], rtol=1e-6)
    assert layer_tensors(source, arch, 3, prefix="model.") == [
        f"{p}3.self_attn.q_proj.weight",
        f"{p}1.self_attn.k_proj.weight",
    ]
    assert read_layer(source, arch, 0).w_key.shape == (2, 2, 8)


def test_a_layer_of_the_wrong_shape_is_named() -> None:
    arrays = _gemma4_arrays(np.random.default_rng(1))
    arrays["model.layers.1.self_attn.q_proj.weight"] = np.zeros((8, 8))  # the sliding layers' size
    with pytest.raises(QKEnergyError, match=r"q_proj.weight' has shape \[8, 8\], expected \[16, 8\]"):
        read_layer(DictSource(arrays), architecture(_GEMMA4), 1)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"per_layer_config": {"9": {"head_dim": 4}}}, "key '9' must be a layer index below 4"),
        ({"per_layer_config": {"1": {"num_attention_heads": 2}}}, "per-layer query-head counts"),
        ({"per_layer_config": [1]}, "must map layer indices"),
        ({"per_layer_config": {"1": {"num_key_value_heads": 3}}}, "layer 1 has 3 key heads"),
        ({"num_kv_shared_layers": 4}, "needs fewer shared layers"),
        ({"layer_types": ["sliding_attention"] * 3 + ["full_attention"]}, "earlier 'full_attention' layer"),
        ({"layer_types": ["sliding_attention", {}, "sliding_attention", "full_attention"]}, "one layer type"),
    ],
)
def test_bad_per_layer_settings_are_one_line_errors(change: dict[str, Any], message: str) -> None:
    with pytest.raises(QKEnergyError, match=message) as info:
        architecture(dict(_SAVED, **change), "/ckpt/config.json")
    assert "/ckpt/config.json" in str(info.value) and "\n" not in str(info.value)


def test_proportional_rope_of_the_full_layers() -> None:
    """transformers' proportional RoPE: pairs over the whole head, a quarter of them turning."""
    config = dict(
        _GEMMA4,
        global_head_dim=16,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6},
        },
    )
    ropes = layer_ropes(config, architecture(config))
    assert [r.kind for r in ropes] == ["default", "proportional"] * 2
    assert ropes[0].rotary_dim == 2 and ropes[1].rotary_dim == 16
    w = inverse_frequencies(ropes[1])
    # int(0.25 * 16 // 2) = 2 pairs turn at theta^(-2k/16); the other 6 pairs keep angle 0
    np.testing.assert_allclose(w, [1.0, 1e6 ** (-2 / 16), 0, 0, 0, 0, 0, 0], rtol=1e-12)


def test_cycle_and_first_patterns() -> None:
    """recurrent_gemma's block_types repeat over the layers; zamba's shared block is read once."""
    from qkenergy.weights.architecture import pattern_layers
    from qkenergy.weights.layout import LayerPattern

    cycle = (LayerPattern("block_types", kind="cycle", members=("attention",)),)
    assert pattern_layers(cycle, {"block_types": ["recurrent", "recurrent", "attention"]}, 7, "c") == (2, 5)
    with pytest.raises(QKEnergyError, match="must list the types of one period"):
        pattern_layers(cycle, {"block_types": []}, 7, "c")
    first = (LayerPattern("layers_block_type", kind="first", members=("hybrid",)),)
    types = ["mamba", "hybrid", "mamba", "hybrid"]
    assert pattern_layers(first, {"layers_block_type": types}, 4, "c") == (1,)
    assert pattern_layers(first, {"layers_block_type": ["mamba"] * 4}, 4, "c") == ()


def test_a_null_tower_section_is_an_absent_tower() -> None:
    """gemma4 built without a vision encoder writes "vision_config": null: the text stack alone."""
    from qkenergy.weights.architecture import architectures

    text = {k: v for k, v in _GEMMA4.items() if k != "model_type"}
    archs = architectures(dict(model_type="gemma4", text_config=text, vision_config=None))
    assert [a.stack for a in archs] == ["text"] and archs[0].key_layers == ((2, 0), (3, 1))
    with pytest.raises(QKEnergyError, match="has no 'vision_config' section"):
        architectures(dict(model_type="gemma4", text_config=text))  # absent, not null: an error as before


def test_shared_blocks_read_their_first_layer_and_each_applications_adapter() -> None:
    """zamba2: block k mod 2 at the k-th hybrid layer, W_Q + B_k A_k from the block's first layer."""
    config = dict(
        model_type="zamba2",
        hidden_size=4,
        attention_hidden_size=8,
        num_attention_heads=2,
        num_key_value_heads=2,
        attention_head_dim=4,
        num_hidden_layers=4,
        layers_block_type=["mamba", "hybrid", "hybrid", "hybrid"],
        num_mem_blocks=2,
        use_shared_attention_adapter=True,
    )
    arch = architecture(config)
    assert arch.block_layers == ((1, 1, 0, True), (2, 2, 1, True), (3, 1, 2, True))
    assert [arch.tensor_layer(i) for i in (1, 2, 3)] == [1, 2, 1] and arch.adapter(3) == 2
    rng = np.random.default_rng(2)
    block = "model.layers.{i}.shared_transformer.self_attn."
    arrays = {}
    for first in (1, 2):
        for p in ("q_proj", "k_proj"):
            arrays[block.format(i=first) + f"{p}.weight"] = rng.standard_normal((8, 8))
    for k, first in ((0, 1), (1, 2), (2, 1)):
        for side in ("q", "k"):
            name = block.format(i=first) + f"linear_{side}_adapter_list.{k}"
            arrays[f"{name}.0.weight"] = rng.standard_normal((3, 8))
            arrays[f"{name}.1.weight"] = rng.standard_normal((8, 3))
    w = read_layer(DictSource(arrays), arch, 3)  # block 0 (layer 1's tensors), adapter 2
    name = block.format(i=1) + "linear_q_adapter_list.2"
    want = (
        arrays[block.format(i=1) + "q_proj.weight"] + arrays[f"{name}.1.weight"] @ arrays[f"{name}.0.weight"]
    )
    np.testing.assert_allclose(w.w_query, want.reshape(2, 4, 8), rtol=1e-6)
    assert architecture(dict(config, use_shared_attention_adapter=False)).adapter(3) is None


def test_a_towers_rope_settings_come_from_its_own_section() -> None:
    """Multimodal gemma4: the text stack's rotary settings and context live in text_config."""
    from qkenergy.analysis.rope_offsets import plan_offsets
    from qkenergy.weights.architecture import architectures

    text = {k: v for k, v in _GEMMA4.items() if k != "model_type"}
    text.update(
        max_position_embeddings=64,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.5, "rope_theta": 1e6},
        },
    )
    config = dict(model_type="gemma4", text_config=text, vision_config=None)
    (arch,) = architectures(config)
    plan = plan_offsets("log", config, arch, "config.json")
    assert plan is not None
    ropes, offsets = plan
    assert [r.kind for r in ropes] == ["default", "proportional"] * 2 and ropes[1].theta == 1e6
    assert offsets[-1] == 63  # the text tower's context, 64 positions
