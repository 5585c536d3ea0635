"""Hybrid layer patterns, NoPE layers, gated queries and multimodal towers on synthetic checkpoints."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from qkenergy.base.errors import QKEnergyError
from qkenergy.weights.architecture import architecture, architectures, pattern_layers
from qkenergy.weights.layout import LayerPattern
from qkenergy.weights.reading import find_prefix, read_layer
from tests.weights.test_layouts import DictSource

_SIZES: dict[str, Any] = dict(
    hidden_size=8, num_attention_heads=2, num_key_value_heads=1, head_dim=4, num_hidden_layers=4
)


def test_pattern_kinds() -> None:
    types = (LayerPattern("layer_types", members=("full_attention",)),)
    assert pattern_layers(types, {"layer_types": ["linear", "full_attention"] * 2}, 4, "c") == (1, 3)
    chars = (LayerPattern("hybrid_override_pattern", members=("*",)),)
    assert pattern_layers(chars, {"hybrid_override_pattern": "M*-*"}, 4, "c") == (1, 3)
    flags = (LayerPattern("no_rope_layers"),)
    assert pattern_layers(flags, {"no_rope_layers": [1, 1, 1, 0]}, 4, "c") == (0, 1, 2)
    nested = (LayerPattern("cfg.full", kind="indices", base=1),)
    assert pattern_layers(nested, {"cfg": {"full": [4, 2]}}, 4, "c") == (1, 3)
    period = (LayerPattern("period", kind="period", offset_key="offset"),)
    assert pattern_layers(period, {"period": 2, "offset": 1}, 4, "c") == (1, 3)
    assert pattern_layers(types, {}, 4, "c") is None  # no key: every layer
    first = (LayerPattern("absent"), *types)
    assert pattern_layers(first, {"layer_types": ["full_attention"] * 4}, 4, "c") == (0, 1, 2, 3)


@pytest.mark.parametrize(
    ("pattern", "config", "message"),
    [
        (LayerPattern("layer_types"), {"layer_types": ["a"]}, "one entry per layer"),
        (LayerPattern("layer_types"), {"layer_types": 3}, "one entry per layer"),
        (LayerPattern("full", kind="indices", base=1), {"full": [0]}, "layer indices from 1 to 4"),
        (LayerPattern("full", kind="indices"), {"full": [True]}, "layer indices"),
        (LayerPattern("p", kind="period", offset_key="o"), {"p": 0, "o": 1}, "the period positive"),
    ],
)
def test_bad_patterns_are_one_line_errors(
    pattern: LayerPattern, config: dict[str, Any], message: str
) -> None:
    with pytest.raises(QKEnergyError, match=message) as info:
        pattern_layers((pattern,), config, 4, "/ckpt/config.json")
    assert "/ckpt/config.json" in str(info.value) and "\n" not in str(info.value)


def test_hybrid_reads_only_its_attention_layers() -> None:
    config = dict(_SIZES, model_type="jamba", layer_types=["mamba", "attention", "mamba", "attention"])
    arch = architecture(config)
    assert arch.attention_layers == (1, 3) and arch.has_layer(3) and not arch.has_layer(0)
    rng = np.random.default_rng(0)
    arrays = {
        f"model.layers.{i}.self_attn.{p}.weight": rng.standard_normal((8 if p == "q_proj" else 4, 8))
        for i in (1, 3)
        for p in ("q_proj", "k_proj")
    }
    source = DictSource(arrays)
    assert find_prefix(source, arch) == "model."  # from layer 1, the first with attention
    assert read_layer(source, arch, 3).w_query.shape == (2, 4, 8)
    with pytest.raises(QKEnergyError, match="layer 0 of this jamba model has no softmax attention; .* 1, 3"):
        read_layer(source, arch, 0)
    with pytest.raises(QKEnergyError, match="no layer with softmax attention"):
        architecture(dict(config, layer_types=["mamba"] * 4))


def test_nope_layers_and_gated_queries() -> None:
    config = dict(_SIZES, model_type="qwen3_next", layer_types=["linear_attention", "full_attention"] * 2)
    arch = architecture(config)
    assert arch.attention_layers == (1, 3) and arch.layer_positional(1) == "rope"
    smol = architecture(dict(_SIZES, model_type="smollm3", no_rope_layers=[1, 1, 1, 0]))
    assert [smol.layer_positional(i) for i in range(4)] == ["rope", "rope", "rope", "none"]
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2 * 2 * 4, 8))  # 2 heads x (4 query rows + 4 gate rows)
    arrays = {
        "model.layers.1.self_attn.q_proj.weight": q,
        "model.layers.1.self_attn.k_proj.weight": rng.standard_normal((4, 8)),
        "model.layers.1.self_attn.q_norm.weight": np.zeros(4),
        "model.layers.1.self_attn.k_norm.weight": np.zeros(4),
    }
    w = read_layer(DictSource(arrays), arch, 1)
    np.testing.assert_array_equal(w.w_query, q.reshape(2, 8, 8)[:, :4])  # gains 1 + 0: only the query rows
    arrays["model.layers.1.self_attn.q_proj.weight"] = q[:8]
    with pytest.raises(QKEnergyError, match=r"expected \[16, 8\] \(2 heads x 2 x head_dim 4 \(query, gate\)"):
        read_layer(DictSource(arrays), arch, 1)


@pytest.mark.parametrize(
    ("text", "vision"),
    [
        ("language_model.model.", "vision_tower.encoder."),  # as transformers 5.24 saves it
        ("model.language_model.", "model.vision_tower.vision_model.encoder."),  # newer checkpoints
    ],
)
def test_a_tower_reads_its_own_tensors(text: str, vision: str) -> None:
    """gemma3: the text layout's names also end the vision tower's; `within` keeps them apart."""
    tower = dict(hidden_size=8, num_attention_heads=2, num_hidden_layers=1, intermediate_size=8)
    config = dict(
        model_type="gemma3",
        text_config=dict(tower, num_key_value_heads=1, head_dim=4),
        vision_config=dict(tower),
    )
    names = [
        f"{text}layers.0.self_attn.q_proj.weight",
        f"{vision}layers.0.self_attn.q_proj.weight",
        f"{vision}layers.0.self_attn.k_proj.weight",
    ]
    source = DictSource({n: np.zeros((8, 8)) for n in names})
    text_arch, vision_arch = architectures(config)
    assert find_prefix(source, text_arch) == text
    assert find_prefix(source, vision_arch) == vision[: -len("encoder.")]


_QWEN_VL = dict(
    model_type="qwen2_5_vl",
    text_config=dict(_SIZES, num_hidden_layers=1),
    vision_config=dict(hidden_size=8, num_heads=2, depth=2, out_hidden_size=8),
)


@pytest.mark.parametrize(
    ("text", "vision"),
    [
        ("model.language_model.", "model.visual."),  # as transformers 5.24 saves it
        ("model.", "visual."),  # the Qwen2.5-VL checkpoints on the Hub
    ],
)
def test_a_fused_vision_tower_reads_q_and_k_row_blocks(text: str, vision: str) -> None:
    """Qwen's vision encoder: qkv holds q, k, v row blocks (heads x head_dim each), its own stack."""
    rng = np.random.default_rng(2)
    qkv = rng.standard_normal((3 * 8, 8))
    arrays = {
        f"{text}layers.0.self_attn.q_proj.weight": rng.standard_normal((8, 8)),
        f"{text}layers.0.self_attn.k_proj.weight": rng.standard_normal((4, 8)),
        f"{vision}blocks.1.attn.qkv.weight": qkv,
        f"{vision}blocks.1.norm1.weight": np.full(8, 2.0),
    }
    text_arch, vision_arch = architectures(_QWEN_VL)
    assert (text_arch.stack, vision_arch.stack) == ("text", "vision")
    assert (vision_arch.n_layers, vision_arch.n_heads, vision_arch.n_kv_heads, vision_arch.head_dim) == (
        2,
        2,
        2,
        4,
    )
    source = DictSource(arrays)
    assert find_prefix(source, text_arch) == text
    w = read_layer(source, vision_arch, 1, prefix=vision)
    np.testing.assert_array_equal(w.w_query, qkv[:8].reshape(2, 4, 8))
    np.testing.assert_array_equal(w.w_key, qkv[8:16].reshape(2, 4, 8))
    folded = read_layer(source, vision_arch, 1, prefix=vision, fold_norm=True)
    np.testing.assert_allclose(folded.w_key, 2.0 * qkv[8:16].reshape(2, 4, 8))
    arrays[f"{vision}blocks.1.attn.qkv.weight"] = qkv[:16]
    with pytest.raises(QKEnergyError, match=r"qkv.weight' has shape \[16, 8\], expected \[24, 8\]"):
        read_layer(DictSource(arrays), vision_arch, 1, prefix=vision)


def test_llama4_towers_keep_their_own_tensors() -> None:
    """llama4: the text layout's names also end the vision model's; `within` keeps them apart."""
    tower = dict(hidden_size=8, num_attention_heads=2, num_hidden_layers=1)
    config = dict(
        model_type="llama4",
        text_config=dict(tower, num_key_value_heads=1, head_dim=4, no_rope_layers=[1]),
        vision_config=dict(tower, intermediate_size=8),
    )
    names = [
        "language_model.model.layers.0.self_attn.q_proj.weight",
        "vision_model.model.layers.0.self_attn.q_proj.weight",
    ]
    source = DictSource({n: np.zeros((8, 8)) for n in names})
    text_arch, vision_arch = architectures(config)
    assert find_prefix(source, text_arch) == "language_model.model."
    assert find_prefix(source, vision_arch) == "vision_model."
    assert vision_arch.positional == "rope_2d" and text_arch.layer_positional(0) == "rope"
