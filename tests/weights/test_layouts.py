"""Unit tests of the layout schema, the families, architecture resolution and layer reading (qkenergy.weights) on small synthetic, dict-backed checkpoints."""

from __future__ import annotations

import dataclasses
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from qkenergy.base.errors import QKEnergyError
from qkenergy.weights.architecture import Architecture, architecture, architectures
from qkenergy.weights.families import FAMILIES, LAYOUT_COLUMNS, describe_families, supported_model_types
from qkenergy.weights.layout import POSITIONAL, Family, Layout, QKNorm
from qkenergy.weights.reading import find_prefix, read_layer


class DictSource:
    """Stand-in for safetensors_io.TensorSource that records which tensors were read."""

    def __init__(self, arrays: dict[str, np.ndarray], path: str = "/ckpt/model.safetensors"):
        self.arrays = arrays
        self.path = path
        self.reads: list[str] = []

    @property
    def names(self) -> list[str]:
        return list(self.arrays)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.arrays[name].shape)

    def tensor(self, name: str) -> np.ndarray:
        self.reads.append(name)
        return self.arrays[name]


# model_type -> (config.json as that family writes it, expected (layers, H, H_kv, n, N))
CONFIGS: dict[str, tuple[dict[str, Any], tuple[int, int, int, int, int]]] = {
    "bert": (dict(num_attention_heads=4, hidden_size=32, num_hidden_layers=3), (3, 4, 4, 8, 32)),
    "roberta": (dict(num_attention_heads=2, hidden_size=16, num_hidden_layers=2), (2, 2, 2, 8, 16)),
    "distilbert": (dict(n_heads=4, dim=32, n_layers=2), (2, 4, 4, 8, 32)),
    "gpt2": (dict(n_head=4, n_embd=32, n_layer=2), (2, 4, 4, 8, 32)),
    # gpt_neox ignores head_dim (its modeling code uses hidden / heads)
    "gpt_neox": (dict(num_attention_heads=4, hidden_size=32, num_hidden_layers=2), (2, 4, 4, 8, 32)),
    "bloom": (dict(n_head=4, hidden_size=32, n_layer=2), (2, 4, 4, 8, 32)),
    "opt": (dict(num_attention_heads=4, hidden_size=32, num_hidden_layers=2), (2, 4, 4, 8, 32)),
    "llama": (
        dict(num_attention_heads=8, num_key_value_heads=2, hidden_size=32, num_hidden_layers=2),
        (2, 8, 2, 4, 32),
    ),
    "mistral": (
        dict(
            num_attention_heads=4, num_key_value_heads=2, hidden_size=32, num_hidden_layers=2, head_dim=None
        ),
        (2, 4, 2, 8, 32),
    ),
    "qwen2": (
        dict(num_attention_heads=4, num_key_value_heads=4, hidden_size=32, num_hidden_layers=2),
        (2, 4, 4, 8, 32),
    ),
    "gemma": (
        dict(num_attention_heads=4, num_key_value_heads=1, hidden_size=32, head_dim=16, num_hidden_layers=2),
        (2, 4, 1, 16, 32),
    ),
    "phi3": (
        dict(num_attention_heads=4, num_key_value_heads=2, hidden_size=32, num_hidden_layers=2),
        (2, 4, 2, 8, 32),
    ),
}


def make_config(model_type: str, **extra: Any) -> dict[str, Any]:
    return {"model_type": model_type, **CONFIGS[model_type][0], **extra}


def pack(arch: Architecture, wq: np.ndarray, wk: np.ndarray, wv: np.ndarray) -> np.ndarray:
    """Store (H, n, N) / (H_kv, n, N) weights the way the family's checkpoint does."""
    H, Hkv, n, N = arch.n_heads, arch.n_kv_heads, arch.head_dim, arch.hidden_size
    storage = arch.layout.storage
    if storage == "stacked":
        return np.concatenate([wq.reshape(H * n, N), wk.reshape(Hkv * n, N), wv.reshape(Hkv * n, N)])
    if storage == "conv1d":
        return np.concatenate([w.reshape(H * n, N) for w in (wq, wk, wv)]).T.copy()
    if storage == "interleaved":
        return np.stack([wq, wk, wv], axis=1).reshape(3 * H * n, N)
    raise AssertionError(storage)


def make_checkpoint(
    arch: Architecture, prefix: str = "", dtype: Any = np.float32, seed: int = 0
) -> tuple[DictSource, dict[int, tuple[np.ndarray, np.ndarray]], dict[str, np.ndarray]]:
    """A full synthetic checkpoint: tensors, the true (W_Q, W_K) per layer, and all norms."""
    rng = np.random.default_rng(seed)
    H, Hkv, n, N = arch.n_heads, arch.n_kv_heads, arch.head_dim, arch.hidden_size
    lay = arch.layout
    arrays: dict[str, np.ndarray] = {}
    truth = {}
    norms: dict[str, np.ndarray] = {}
    for i in range(arch.n_layers):
        wq = rng.standard_normal((H, n, N)).astype(dtype)
        wk = rng.standard_normal((Hkv, n, N)).astype(dtype)
        wv = rng.standard_normal((Hkv, n, N)).astype(dtype)
        truth[i] = (wq, wk)
        if lay.storage == "separate":
            arrays[prefix + lay.query.format(i=i)] = wq.reshape(H * n, N)
            arrays[prefix + lay.key.format(i=i)] = wk.reshape(Hkv * n, N)
        else:
            arrays[prefix + lay.query.format(i=i)] = pack(arch, wq, wk, wv)
        if lay.norm is not None:
            norms[prefix + lay.norm.format(i=i)] = rng.uniform(0.5, 1.5, N).astype(dtype)
        arrays[prefix + f"layers.{i}.unrelated.weight"] = np.zeros((3, 3), dtype)
    if lay.first_norm is not None:
        norms[prefix + lay.first_norm] = rng.uniform(0.5, 1.5, N).astype(dtype)
    arrays.update(norms)
    return DictSource(arrays), truth, norms


# --- config parsing --------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_config_parsing(model_type: str) -> None:
    arch = architecture(make_config(model_type))
    assert arch.model_type == model_type
    assert (arch.n_layers, arch.n_heads, arch.n_kv_heads, arch.head_dim, arch.hidden_size) == (
        CONFIGS[model_type][1]
    )
    assert arch.layout == FAMILIES[model_type].stacks[0]


def test_config_parsing_covers_known_types() -> None:
    # Every type is proven against transformers in test_universal_proof.py; these are the
    # synthetic checkpoints of the single-stack, plainly stored ones.
    assert set(CONFIGS) <= set(supported_model_types())


def test_bloom_legacy_n_embed_and_gemma_head_dim() -> None:
    arch = architecture({"model_type": "bloom", "n_head": 2, "n_embed": 16, "n_layer": 1})
    assert (arch.hidden_size, arch.head_dim) == (16, 8)
    # gemma-7b: head_dim 256 although hidden / heads = 192
    arch = architecture(
        {
            "model_type": "gemma",
            "num_attention_heads": 16,
            "hidden_size": 3072,
            "head_dim": 256,
            "num_hidden_layers": 28,
            "num_key_value_heads": 16,
        }
    )
    assert arch.head_dim == 256


def test_gqa_kv_head_mapping() -> None:
    arch = architecture(make_config("llama"))
    assert arch.kv_head.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert architecture(make_config("gemma")).kv_head.tolist() == [0, 0, 0, 0]
    assert architecture(make_config("bert")).kv_head.tolist() == [0, 1, 2, 3]
    src, _, _ = make_checkpoint(arch, "model.")
    lw = read_layer(src, arch, 1)
    assert lw.kv_head.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert lw.kv_head.dtype.kind == "i"


def test_missing_kv_heads_means_multi_head() -> None:
    cfg = make_config("llama")
    del cfg["num_key_value_heads"]
    assert architecture(cfg).n_kv_heads == 8


def test_unknown_model_type_lists_supported() -> None:
    with pytest.raises(QKEnergyError) as err:
        architecture({"model_type": "xlnet", "n_head": 8})
    msg = str(err.value)
    assert "'xlnet'" in msg and "config.json" in msg
    # how many types there are and where they are listed, not all of them on one line
    assert f"{len(supported_model_types())} types are supported (qkenergy layouts lists them)" in msg
    assert len(msg) < 400
    with pytest.raises(QKEnergyError, match=r"the nearest: llama, llama4"):
        architecture({"model_type": "llama5", "n_head": 8})
    with pytest.raises(
        QKEnergyError, match=r"no 'model_type'.*types are supported \(qkenergy layouts lists them\)$"
    ):
        architecture({"hidden_size": 8})


def test_missing_config_key_named() -> None:
    cfg = make_config("gpt2")
    del cfg["n_head"]
    with pytest.raises(QKEnergyError, match=r"config\.json has no 'n_head'.*gpt2"):
        architecture(cfg)
    cfg = make_config("bert")
    del cfg["num_hidden_layers"]
    with pytest.raises(QKEnergyError, match=r"config\.json has no 'num_hidden_layers'"):
        architecture(cfg)


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        ({"hidden_size": "32"}, r"'hidden_size' is '32'; expected a positive integer"),
        ({"num_attention_heads": 0}, r"'num_attention_heads' is 0"),
        ({"num_attention_heads": True}, r"'num_attention_heads' is true"),
        ({"num_key_value_heads": 3}, r"not a multiple of num_key_value_heads=3"),
        ({"hidden_size": 30}, r"hidden_size=30 is not a multiple of num_attention_heads=8"),
    ],
)
def test_bad_config_values(change: dict[str, Any], pattern: str) -> None:
    with pytest.raises(QKEnergyError, match=pattern):
        architecture(make_config("llama", **change))


# --- prefixes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model_type", "prefix"),
    [
        ("bert", ""),
        ("bert", "bert."),
        ("roberta", "roberta."),
        ("gpt2", "transformer."),
        ("gpt_neox", "gpt_neox."),
        ("opt", "model.decoder."),
        ("opt", "decoder."),
        ("llama", "model."),
        ("mistral", ""),
        ("phi3", "model."),
        ("bloom", "transformer."),
    ],
)
def test_prefix_detection(model_type: str, prefix: str) -> None:
    arch = architecture(make_config(model_type))
    src, truth, _ = make_checkpoint(arch, prefix)
    assert find_prefix(src, arch) == prefix
    lw = read_layer(src, arch, 0)
    np.testing.assert_array_equal(lw.w_query, truth[0][0])


def test_prefix_needs_a_dot_boundary_and_prefers_shortest() -> None:
    arch = architecture(make_config("llama"))
    src, _, _ = make_checkpoint(arch, "model.")
    q = src.arrays["model.layers.0.self_attn.q_proj.weight"]
    src.arrays["teacher.model.layers.0.self_attn.q_proj.weight"] = q
    src.arrays["xlayers.0.self_attn.q_proj.weight"] = q  # not on a '.' boundary
    assert find_prefix(src, arch) == "model."


def test_prefix_not_found() -> None:
    arch = architecture(make_config("llama"))
    src = DictSource({"encoder.layer.0.attention.self.query.weight": np.zeros((32, 32))})
    with pytest.raises(QKEnergyError) as err:
        find_prefix(src, arch)
    msg = str(err.value)
    assert "/ckpt/model.safetensors" in msg and "'layers.0.self_attn.q_proj.weight'" in msg
    assert "llama" in msg


# --- reading and fused splits ------------------------------------------------------------------


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_read_layer_recovers_weights(model_type: str) -> None:
    arch = architecture(make_config(model_type))
    src, truth, _ = make_checkpoint(arch, "p.")
    for layer in range(arch.n_layers):
        lw = read_layer(src, arch, layer)
        H, Hkv, n, N = arch.n_heads, arch.n_kv_heads, arch.head_dim, arch.hidden_size
        assert lw.layer == layer
        assert lw.w_query.shape == (H, n, N) and lw.w_key.shape == (Hkv, n, N)
        np.testing.assert_array_equal(lw.w_query, truth[layer][0])
        np.testing.assert_array_equal(lw.w_key, truth[layer][1])
        assert lw.norm_gain is None


def test_fused_splits_by_hand() -> None:
    """Fused layouts split as the modeling code does, written out on tiny arrays."""
    H, n, N = 2, 1, 3
    rows = np.arange(3 * H * n * N, dtype=np.float64).reshape(3 * H * n, N)
    # gpt_neox / bloom: rows are (head, [q, k, v], n)
    arch = Architecture("gpt_neox", 1, H, H, n, N, FAMILIES["gpt_neox"].stacks[0])
    lw = read_layer(DictSource({"layers.0.attention.query_key_value.weight": rows}), arch, 0)
    np.testing.assert_array_equal(lw.w_query[:, 0], rows[[0, 3]])
    np.testing.assert_array_equal(lw.w_key[:, 0], rows[[1, 4]])
    # phi3: rows are [q (H n); k (H_kv n); v (H_kv n)], here H_kv = 1
    arch = Architecture("phi3", 1, H, 1, n, N, FAMILIES["phi3"].stacks[0])
    rows4 = rows[:4]
    lw = read_layer(DictSource({"layers.0.self_attn.qkv_proj.weight": rows4}), arch, 0)
    np.testing.assert_array_equal(lw.w_query[:, 0], rows4[[0, 1]])
    np.testing.assert_array_equal(lw.w_key[:, 0], rows4[[2]])
    # falcon's new decoder architecture: rows are (kv group, [q heads of the group, k, v], n)
    falcon = {"model_type": "falcon", "num_attention_heads": 4, "num_kv_heads": 2, "hidden_size": 12}
    arch = architecture(dict(falcon, num_hidden_layers=1, new_decoder_architecture=True))
    assert arch.layout.storage == "grouped" and (arch.n_kv_heads, arch.head_dim) == (2, 3)
    grouped = np.arange(8 * 3 * 12, dtype=np.float64).reshape(8 * 3, 12)
    lw = read_layer(DictSource({"h.0.self_attention.query_key_value.weight": grouped}), arch, 0)
    blocks = grouped.reshape(2, 4, 3, 12)  # group, [q0, q1, k, v], n, N
    np.testing.assert_array_equal(lw.w_query, blocks[:, :2].reshape(4, 3, 12))
    np.testing.assert_array_equal(lw.w_key, blocks[:, 2])
    assert lw.kv_head.tolist() == [0, 0, 1, 1]
    # gpt2 Conv1D: stored [in, out], columns q | k | v
    arch = Architecture("gpt2", 1, H, H, n, N, FAMILIES["gpt2"].stacks[0])
    cols = rows.T.copy()
    lw = read_layer(DictSource({"h.0.attn.c_attn.weight": cols}), arch, 0)
    np.testing.assert_array_equal(lw.w_query[:, 0], cols[:, [0, 1]].T)
    np.testing.assert_array_equal(lw.w_key[:, 0], cols[:, [2, 3]].T)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_dtype_kept(dtype: Any) -> None:
    arch = architecture(make_config("gpt2"))
    src, truth, _ = make_checkpoint(arch, "transformer.", dtype=dtype)
    lw = read_layer(src, arch, 1)
    assert lw.w_query.dtype == dtype and lw.w_key.dtype == dtype
    np.testing.assert_array_equal(lw.w_key, truth[1][1])
    folded = read_layer(src, arch, 1, fold_norm=True)
    expected = np.float64 if dtype == np.float64 else np.float32
    assert folded.w_query.dtype == expected and folded.norm_gain.dtype == expected


@pytest.mark.parametrize("model_type", ["llama", "gpt2", "phi3", "bloom", "bert"])
def test_reads_only_that_layer(model_type: str) -> None:
    arch = architecture(make_config(model_type))
    src, _, _ = make_checkpoint(arch, "m.")
    read_layer(src, arch, 1)
    lay = arch.layout
    expected = {"m." + lay.query.format(i=1)} | ({"m." + lay.key.format(i=1)} if lay.key else set())
    assert set(src.reads) == expected
    src.reads.clear()
    read_layer(src, arch, 1, fold_norm=True)
    norm = lay.norm.format(i=0 if lay.post_norm else 1)
    assert set(src.reads) == expected | {"m." + norm}


# --- fold_norm ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model_type", "layer", "norm"),
    [
        ("llama", 1, "layers.1.input_layernorm.weight"),
        ("gpt2", 0, "h.0.ln_1.weight"),
        ("gpt_neox", 1, "layers.1.input_layernorm.weight"),
        ("bloom", 1, "h.1.input_layernorm.weight"),
        ("opt", 1, "layers.1.self_attn_layer_norm.weight"),
        ("phi3", 0, "layers.0.input_layernorm.weight"),
        # post-norm: layer 0 is fed by the embeddings norm, layer i by layer i-1's output norm
        ("bert", 0, "embeddings.LayerNorm.weight"),
        ("bert", 2, "encoder.layer.1.output.LayerNorm.weight"),
        ("distilbert", 0, "embeddings.LayerNorm.weight"),
        ("distilbert", 1, "transformer.layer.0.output_layer_norm.weight"),
    ],
)
def test_fold_norm_uses_the_norm_feeding_attention(model_type: str, layer: int, norm: str) -> None:
    arch = architecture(make_config(model_type))
    src, truth, norms = make_checkpoint(arch, "x.")
    gain = norms["x." + norm].astype(np.float64)
    lw = read_layer(src, arch, layer, fold_norm=True)
    np.testing.assert_allclose(lw.norm_gain, gain)
    wq, wk = (w.astype(np.float64) for w in truth[layer])
    np.testing.assert_allclose(lw.w_query, wq * gain, rtol=1e-6)
    np.testing.assert_allclose(lw.w_key, wk * gain, rtol=1e-6)
    # L -> D L D for every head
    L = wk[lw.kv_head[0]].T @ wq[0]
    L_fold = lw.w_key[lw.kv_head[0]].astype(np.float64).T @ lw.w_query[0].astype(np.float64)
    want = gain[:, None] * L * gain[None, :]
    np.testing.assert_allclose(L_fold, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_gemma_gain_is_one_plus_weight() -> None:
    arch = architecture(make_config("gemma"))
    src, truth, norms = make_checkpoint(arch, "model.")
    w = norms["model.layers.1.input_layernorm.weight"]
    lw = read_layer(src, arch, 1, fold_norm=True)
    np.testing.assert_allclose(lw.norm_gain, 1.0 + w, rtol=1e-6)
    np.testing.assert_allclose(lw.w_query, truth[1][0] * (1.0 + w), rtol=1e-6)


def test_legacy_gamma_names() -> None:
    arch = architecture(make_config("bert"))
    src, _, _norms = make_checkpoint(arch, "bert.")
    g = src.arrays.pop("bert.encoder.layer.0.output.LayerNorm.weight")
    src.arrays["bert.encoder.layer.0.output.LayerNorm.gamma"] = g
    np.testing.assert_allclose(read_layer(src, arch, 1, fold_norm=True).norm_gain, g)


def test_opt_post_norm_and_no_affine() -> None:
    cfg = make_config("opt", do_layer_norm_before=False)
    arch = architecture(cfg)
    assert arch.layout.post_norm and arch.layout.first_norm is None
    src, truth, _ = make_checkpoint(arch, "model.decoder.")
    layer0 = read_layer(src, arch, 0, fold_norm=True)
    assert layer0.norm_gain is None  # embeddings feed layer 0 unnormed
    np.testing.assert_array_equal(layer0.w_query, truth[0][0])
    g = src.arrays["model.decoder.layers.0.final_layer_norm.weight"]
    np.testing.assert_allclose(read_layer(src, arch, 1, fold_norm=True).norm_gain, g)
    arch = architecture(make_config("opt", layer_norm_elementwise_affine=False))
    src, _, _ = make_checkpoint(arch)
    assert read_layer(src, arch, 1, fold_norm=True).norm_gain is None


# --- errors ------------------------------------------------------------------------------------


def test_missing_tensor_named() -> None:
    arch = architecture(make_config("llama"))
    src, _, _ = make_checkpoint(arch, "model.")
    del src.arrays["model.layers.1.self_attn.k_proj.weight"]
    with pytest.raises(QKEnergyError) as err:
        read_layer(src, arch, 1)
    msg = str(err.value)
    assert "/ckpt/model.safetensors" in msg and "'model.layers.1.self_attn.k_proj.weight'" in msg
    del src.arrays["model.layers.0.input_layernorm.weight"]
    read_layer(src, arch, 0)  # the norm is only needed for fold_norm
    with pytest.raises(QKEnergyError, match=r"missing tensor 'model\.layers\.0\.input_layernorm"):
        read_layer(src, arch, 0, fold_norm=True)


@pytest.mark.parametrize(
    ("model_type", "name", "bad", "expected"),
    [
        ("llama", "layers.0.self_attn.q_proj.weight", (16, 32), "[32, 32]"),
        ("llama", "layers.0.self_attn.k_proj.weight", (32, 32), "[8, 32]"),
        ("gpt2", "h.0.attn.c_attn.weight", (96, 32), "[32, 96]"),
        ("phi3", "layers.0.self_attn.qkv_proj.weight", (96, 32), "[64, 32]"),
        ("bloom", "h.0.self_attention.query_key_value.weight", (96, 16), "[96, 32]"),
    ],
)
def test_wrong_shape_named(model_type: str, name: str, bad: tuple[int, ...], expected: str) -> None:
    arch = architecture(make_config(model_type))
    src, _, _ = make_checkpoint(arch)
    src.arrays[name] = np.zeros(bad, np.float32)
    with pytest.raises(QKEnergyError) as err:
        read_layer(src, arch, 0)
    msg = str(err.value)
    assert repr(name) in msg and str(list(bad)) in msg and f"expected {expected}" in msg


def test_wrong_norm_shape_named() -> None:
    arch = architecture(make_config("llama"))
    src, _, _ = make_checkpoint(arch)
    src.arrays["layers.0.input_layernorm.weight"] = np.ones(31, np.float32)
    with pytest.raises(QKEnergyError, match=r"input_layernorm.weight' has shape \[31\], expected \[32\]"):
        read_layer(src, arch, 0, fold_norm=True)


def test_layer_out_of_range() -> None:
    arch = architecture(make_config("llama"))
    src, _, _ = make_checkpoint(arch)
    for layer in (-1, 2):
        with pytest.raises(QKEnergyError, match=rf"layer {layer} out of range.*2 layers"):
            read_layer(src, arch, layer)


# --- families, stacks and folded qk-norm ------------------------------------------------------


def _two_stacks() -> Family:
    enc = Layout(
        query="enc.{i}.q.weight", key="enc.{i}.k.weight", stack="encoder", final_norm="enc_norm.weight"
    )
    cross = Layout(
        query="dec.{i}.cq.weight",
        key="dec.{i}.ck.weight",
        norm="dec.{i}.cnorm.weight",
        stack="cross",
        key_stack="encoder",
        layers_keys=("decoder_layers",),
        positional="none",
    )
    return Family((enc, cross), proof="")


def test_stacks_are_named_and_chosen() -> None:
    cfg = {"model_type": "toy", "num_attention_heads": 2, "hidden_size": 8, "num_hidden_layers": 3}
    cfg["decoder_layers"] = 2
    archs = architectures(cfg, layout=_two_stacks())
    assert [(a.stack, a.n_layers, a.positional) for a in archs] == [
        ("encoder", 3, "absolute"),
        ("cross", 2, "none"),
    ]
    assert archs[1].key_norm == "enc_norm.weight" and archs[0].key_norm is None
    assert architecture(cfg, stack="cross", layout=_two_stacks()).n_layers == 2
    with pytest.raises(QKEnergyError, match=r"stacks 'encoder', 'cross'; name one"):
        architecture(cfg, layout=_two_stacks())
    with pytest.raises(QKEnergyError, match=r"not 'decoder'"):
        architecture(cfg, stack="decoder", layout=_two_stacks())


def test_cross_attention_folds_each_stream_norm() -> None:
    cfg = {"model_type": "toy", "num_attention_heads": 2, "hidden_size": 8, "num_hidden_layers": 1}
    arch = architecture(dict(cfg, decoder_layers=1), stack="cross", layout=_two_stacks())
    rng = np.random.default_rng(3)
    wq, wk = rng.standard_normal((8, 8)), rng.standard_normal((8, 8))
    g_dec, g_enc = rng.uniform(0.5, 1.5, 8), rng.uniform(0.5, 1.5, 8)
    src = DictSource(
        {"dec.0.cq.weight": wq, "dec.0.ck.weight": wk, "dec.0.cnorm.weight": g_dec, "enc_norm.weight": g_enc}
    )
    lw = read_layer(src, arch, 0, fold_norm=True)
    np.testing.assert_allclose(lw.w_query.reshape(8, 8), wq * g_dec)
    np.testing.assert_allclose(lw.w_key.reshape(8, 8), wk * g_enc)
    np.testing.assert_allclose(lw.norm_gain, g_dec)
    np.testing.assert_allclose(lw.key_norm_gain, g_enc)


@pytest.mark.parametrize(
    ("qk", "gain_shape"),
    [
        (QKNorm("l.{i}.qn.weight", "l.{i}.kn.weight"), {"q": (4,), "k": (4,)}),
        (QKNorm("l.{i}.qn.weight", "l.{i}.kn.weight", scope="projection"), {"q": (12,), "k": (4,)}),
        (QKNorm("l.{i}.qn.{h}.weight", "l.{i}.kn.{h}.weight", centred=True), {"q": (4,), "k": (4,)}),
        (QKNorm("l.{i}.qn.weight", "l.{i}.kn.weight", offset=1.0), {"q": (4,), "k": (4,)}),
    ],
)
def test_qk_norm_gains_are_folded_always(qk: QKNorm, gain_shape: dict[str, tuple[int]]) -> None:
    """W -> diag(g) P W per head, with P the centring of a LayerNorm (over the norm's scope)."""
    H, Hkv, n, N = 3, 1, 4, 8
    layout = Layout(query="l.{i}.q.weight", key="l.{i}.k.weight", kv_heads_key="kv", qk_norm=qk)
    cfg = {
        "model_type": "toy",
        "num_attention_heads": H,
        "kv": Hkv,
        "hidden_size": 12,
        "num_hidden_layers": 1,
    }
    cfg["head_dim"] = n
    arch = architecture(cfg, layout=Family((dataclasses.replace(layout, head_dim_key="head_dim"),)))
    arch = dataclasses.replace(arch, hidden_size=N)
    rng = np.random.default_rng(5)
    wq, wk = rng.standard_normal((H * n, N)), rng.standard_normal((Hkv * n, N))
    arrays = {"l.0.q.weight": wq, "l.0.k.weight": wk}
    gains = {}
    for side, heads in (("q", H), ("k", Hkv)):
        if "{h}" in qk.query:
            g = rng.uniform(0.5, 1.5, (heads, n))
            arrays.update({f"l.0.{side}n.{h}.weight": g[h] for h in range(heads)})
        else:
            raw = rng.uniform(0.5, 1.5, gain_shape[side])
            arrays[f"l.0.{side}n.weight"] = raw
            g = np.broadcast_to((raw + qk.offset).reshape(-1, n), (heads, n))
        gains[side] = g
    lw = read_layer(DictSource(arrays), arch, 0)
    for got, w, side, heads in ((lw.w_query, wq, "q", H), (lw.w_key, wk, "k", Hkv)):
        w = w.reshape(heads, n, N)
        if qk.centred:
            w = w - w.mean(axis=1, keepdims=True)
        np.testing.assert_allclose(got, gains[side][:, :, None] * w, rtol=1e-6)
        assert got.dtype == np.float64


def test_describe_families_lists_every_type() -> None:
    rows = describe_families()
    assert [r["model_type"] for r in rows] == supported_model_types()
    assert set(rows[0]) == set(LAYOUT_COLUMNS)
    for row in rows:
        assert row["proven by"].startswith("transformers ") and row["qk_norm"] in ("yes", "no")
        assert set(row["positional"].split(", ")) <= set(POSITIONAL)
