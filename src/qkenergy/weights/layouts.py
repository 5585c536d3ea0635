"""Declarative architecture layouts: where each head's W_Q, W_K live in a checkpoint.

A :class:`Layout` says, for one model family, which config.json keys give the
sizes, the names of the query/key tensors relative to a layer (``{i}`` is the
layer index, the checkpoint's own name prefix such as ``model.`` is found at
read time), how Q and K are stored, and which norm's gain feeds attention (for
the fold-norm option). Adding a family is a few lines in :data:`LAYOUTS`.

Head weights come back in the shared convention: ``(heads, n, N)``, the head's
row block of an ``nn.Linear`` weight ``[out_features, in_features]``, so the
head's bilinear form is ``L = W_K^T W_Q`` and its score is ``x_q^T L^T x_k``
up to the attention scale. Biases are not part of L and are never read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from qkenergy.errors import ArgumentError, QKEnergyError

__all__ = [
    "LAYOUTS",
    "Architecture",
    "LayerWeights",
    "Layout",
    "TensorReader",
    "architecture",
    "find_prefix",
    "read_layer",
    "supported_model_types",
]

Storage = Literal["separate", "stacked", "conv1d", "interleaved"]
"""How Q and K are stored:

- ``separate``: one ``[H*n, N]`` query weight and one ``[H_kv*n, N]`` key weight.
- ``stacked``: one fused ``[(H + 2*H_kv)*n, N]`` weight, rows ``[q; k; v]`` (phi3 qkv_proj).
- ``conv1d``: one fused GPT-2 ``Conv1D`` weight stored ``[N, 3*H*n]``, columns ``q | k | v``.
- ``interleaved``: one fused ``[3*H*n, N]`` weight whose rows reshape to
  ``(H, 3, n)`` (q, k, v per head: gpt_neox query_key_value, bloom).
"""


class TensorReader(Protocol):
    """What :func:`read_layer` needs from a checkpoint (e.g. safetensors_io.TensorSource)."""

    @property
    def names(self) -> Collection[str]: ...

    def shape(self, name: str) -> tuple[int, ...]: ...

    def tensor(self, name: str) -> np.ndarray: ...


@dataclass(frozen=True)
class Layout:
    """Where one family keeps its attention weights; templates are relative to the prefix."""

    query: str
    key: str | None = None  # None for fused storage: the query tensor holds q, k and v
    storage: Storage = "separate"
    norm: str | None = None  # gain of the norm that feeds attention, or None if there is none
    # Post-norm (BERT-style): layer i is fed by layer i-1's output norm, layer 0 by
    # ``first_norm`` (the embeddings norm; None when the embeddings are not normed).
    post_norm: bool = False
    first_norm: str | None = None
    norm_offset: float = 0.0  # gemma's RMSNorm multiplies by (1 + weight)
    # config.json keys, first match wins; the first one is named in errors.
    heads_keys: tuple[str, ...] = ("num_attention_heads",)
    hidden_keys: tuple[str, ...] = ("hidden_size",)
    layers_keys: tuple[str, ...] = ("num_hidden_layers",)
    kv_heads_key: str | None = None  # None: every query head has its own key head
    head_dim_key: str | None = None  # None: head_dim = hidden_size / heads
    # Config-dependent variants (e.g. OPT's do_layer_norm_before); returns the layout to use.
    adjust: Callable[[Mapping[str, Any], Layout], Layout] | None = field(
        default=None, compare=False, repr=False
    )


def _bert_like(root: str) -> Layout:
    return Layout(
        query=f"{root}.layer.{{i}}.attention.self.query.weight",
        key=f"{root}.layer.{{i}}.attention.self.key.weight",
        norm=f"{root}.layer.{{i}}.output.LayerNorm.weight",
        post_norm=True,
        first_norm="embeddings.LayerNorm.weight",
    )


def _llama_like(**kw: Any) -> Layout:
    """Pre-RMSNorm decoder with separate q_proj / k_proj and grouped-query attention."""
    return Layout(
        query="layers.{i}.self_attn.q_proj.weight",
        key="layers.{i}.self_attn.k_proj.weight",
        norm="layers.{i}.input_layernorm.weight",
        kv_heads_key="num_key_value_heads",
        head_dim_key="head_dim",
        **kw,
    )


def _opt_adjust(config: Mapping[str, Any], layout: Layout) -> Layout:
    if not config.get("layer_norm_elementwise_affine", True):
        return dataclasses.replace(layout, norm=None)
    if not config.get("do_layer_norm_before", True):
        # Post-norm OPT (e.g. opt-350m): layer i reads layer i-1's final_layer_norm;
        # the embeddings feeding layer 0 are not normed.
        return dataclasses.replace(
            layout, norm="layers.{i}.final_layer_norm.weight", post_norm=True, first_norm=None
        )
    return layout


LAYOUTS: dict[str, Layout] = {
    "bert": _bert_like("encoder"),
    "roberta": _bert_like("encoder"),
    "distilbert": Layout(
        query="transformer.layer.{i}.attention.q_lin.weight",
        key="transformer.layer.{i}.attention.k_lin.weight",
        norm="transformer.layer.{i}.output_layer_norm.weight",
        post_norm=True,
        first_norm="embeddings.LayerNorm.weight",
        heads_keys=("n_heads", "num_attention_heads"),
        hidden_keys=("dim", "hidden_size"),
        layers_keys=("n_layers", "num_hidden_layers"),
    ),
    "gpt2": Layout(
        query="h.{i}.attn.c_attn.weight",
        storage="conv1d",
        norm="h.{i}.ln_1.weight",
        heads_keys=("n_head", "num_attention_heads"),
        hidden_keys=("n_embd", "hidden_size"),
        layers_keys=("n_layer", "num_hidden_layers"),
    ),
    "gpt_neox": Layout(
        query="layers.{i}.attention.query_key_value.weight",
        storage="interleaved",
        norm="layers.{i}.input_layernorm.weight",
    ),
    "bloom": Layout(
        query="h.{i}.self_attention.query_key_value.weight",
        storage="interleaved",
        norm="h.{i}.input_layernorm.weight",
        heads_keys=("n_head", "num_attention_heads"),
        hidden_keys=("hidden_size", "n_embed"),
        layers_keys=("n_layer", "num_hidden_layers"),
    ),
    "opt": Layout(
        query="layers.{i}.self_attn.q_proj.weight",
        key="layers.{i}.self_attn.k_proj.weight",
        norm="layers.{i}.self_attn_layer_norm.weight",
        adjust=_opt_adjust,
    ),
    "llama": _llama_like(),
    "mistral": _llama_like(),
    "qwen2": _llama_like(),
    "gemma": _llama_like(norm_offset=1.0),
    "phi3": Layout(
        query="layers.{i}.self_attn.qkv_proj.weight",
        storage="stacked",
        norm="layers.{i}.input_layernorm.weight",
        kv_heads_key="num_key_value_heads",
        head_dim_key="head_dim",
    ),
}


def supported_model_types() -> list[str]:
    """The config.json ``model_type`` values qkenergy can read."""
    return sorted(LAYOUTS)


@dataclass(frozen=True)
class Architecture:
    """Attention sizes of a checkpoint (from config.json) and its layout."""

    model_type: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden_size: int
    layout: Layout

    @property
    def kv_head(self) -> np.ndarray:
        """Key head used by each query head: h // (n_heads / n_kv_heads) (grouped-query attention)."""
        return np.arange(self.n_heads) // (self.n_heads // self.n_kv_heads)


def _config_int(config: Mapping[str, Any], keys: tuple[str, ...], model_type: str, source: str) -> int:
    """The first of ``keys`` present in the config, checked to be a positive integer."""
    for key in keys:
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise QKEnergyError(f"{source}: {key!r} is {value!r}; expected a positive integer ({model_type})")
        return value
    also = f" (or {', '.join(repr(k) for k in keys[1:])})" if len(keys) > 1 else ""
    raise QKEnergyError(f"{source} has no {keys[0]!r}{also}, needed for a {model_type} model")


_OVERRIDES = "pass --model-type TYPE to read it as a supported type, or --layout FILE.toml to describe it"


def architecture(
    config: Mapping[str, Any],
    source: str = "config.json",
    *,
    model_type: str | None = None,
    layout: Layout | None = None,
) -> Architecture:
    """Sizes and layout of the model described by a config.json dict.

    ``source`` names the config file in error messages (e.g. its full path).
    ``model_type`` reads the checkpoint as that supported type whatever its
    config says; ``layout`` (e.g. from :func:`qkenergy.weights.layout_toml.load_layout`)
    is used as given, for an architecture qkenergy does not ship.
    """
    if model_type is not None:
        if model_type not in LAYOUTS:
            raise ArgumentError(
                f"--model-type {model_type!r} is not a supported type; supported: "
                + ", ".join(supported_model_types())
            )
    else:
        model_type = config.get("model_type")
    if layout is None:
        if model_type is None:
            raise QKEnergyError(
                f"{source} has no 'model_type' ({_OVERRIDES}); supported: "
                + ", ".join(supported_model_types())
            )
        layout = LAYOUTS.get(str(model_type))
        if layout is None:
            raise QKEnergyError(
                f"{source}: model_type {model_type!r} is not supported ({_OVERRIDES}); supported: "
                + ", ".join(supported_model_types())
            )
    elif model_type is None:
        model_type = "custom"
    if layout.adjust is not None:
        layout = layout.adjust(config, layout)
    mt = str(model_type)
    n_heads = _config_int(config, layout.heads_keys, mt, source)
    hidden = _config_int(config, layout.hidden_keys, mt, source)
    n_layers = _config_int(config, layout.layers_keys, mt, source)
    n_kv = n_heads
    if layout.kv_heads_key is not None and config.get(layout.kv_heads_key) is not None:
        n_kv = _config_int(config, (layout.kv_heads_key,), mt, source)
    if n_heads % n_kv:
        raise QKEnergyError(
            f"{source}: {layout.heads_keys[0]}={n_heads} is not a multiple of {layout.kv_heads_key}={n_kv}"
        )
    if layout.head_dim_key is not None and config.get(layout.head_dim_key) is not None:
        head_dim = _config_int(config, (layout.head_dim_key,), mt, source)
    else:
        if hidden % n_heads:
            raise QKEnergyError(
                f"{source}: {layout.hidden_keys[0]}={hidden} is not a multiple of "
                f"{layout.heads_keys[0]}={n_heads}"
            )
        head_dim = hidden // n_heads
    return Architecture(mt, n_layers, n_heads, n_kv, head_dim, hidden, layout)


@dataclass(frozen=True)
class LayerWeights:
    """Query/key weights of one layer's heads; ``kv_head[h]`` is query head h's key head."""

    layer: int
    w_query: np.ndarray  # (H, n, N)
    w_key: np.ndarray  # (H_kv, n, N)
    kv_head: np.ndarray  # (H,) int
    norm_gain: np.ndarray | None  # (N,) effective gain folded in, or None


def _where(tensors: object) -> str:
    """How to name the checkpoint in a message: its ``location`` (a TensorSource), ``path`` or ``name``."""
    for attr in ("location", "path", "name"):
        value = getattr(tensors, attr, None)
        if value:
            return str(value)
    return "the checkpoint"


def find_prefix(tensors: TensorReader, arch: Architecture) -> str:
    """The checkpoint's name prefix ('' or ending in '.'), from the layer-0 query tensor.

    The shortest match wins, so a base model nested inside a larger one (``bert.``
    in a BertForMaskedLM) is found and a stray deeper copy is not.
    """
    suffix = arch.layout.query.format(i=0)
    dotted = "." + suffix
    found = [n[: len(n) - len(suffix)] for n in tensors.names if n == suffix or n.endswith(dotted)]
    if not found:
        raise QKEnergyError(
            f"{_where(tensors)}: no tensor named {suffix!r} (with any prefix); "
            f"is this a {arch.model_type} checkpoint?"
        )
    return min(found, key=lambda p: (len(p), p))


def _check_shape(tensors: TensorReader, name: str, expected: tuple[int, ...], what: str) -> None:
    shape = tuple(tensors.shape(name))
    if shape != expected:
        raise QKEnergyError(
            f"{_where(tensors)}: tensor {name!r} has shape {list(shape)}, expected "
            f"{list(expected)} ({what} from config.json)"
        )


def _norm_name(layout: Layout, layer: int) -> str | None:
    if not layout.post_norm:
        return None if layout.norm is None else layout.norm.format(i=layer)
    if layer == 0:
        return layout.first_norm
    return None if layout.norm is None else layout.norm.format(i=layer - 1)


def read_layer(
    tensors: TensorReader,
    arch: Architecture,
    layer: int,
    *,
    fold_norm: bool = False,
    prefix: str | None = None,
) -> LayerWeights:
    """Read one layer's W_Q (H, n, N) and W_K (H_kv, n, N), reading only that layer's tensors.

    The dtype is kept as stored, except with ``fold_norm``: then the columns of
    W_Q and W_K are multiplied by the gain of the norm feeding attention
    (L -> D L D) in float32 (float64 if stored so). The norm's bias is not part
    of L and is ignored. ``prefix`` skips prefix detection (see :func:`find_prefix`).
    """
    if not 0 <= layer < arch.n_layers:
        raise QKEnergyError(
            f"layer {layer} out of range: the model has {arch.n_layers} layers (0..{arch.n_layers - 1})"
        )
    if prefix is None:
        prefix = find_prefix(tensors, arch)
    lay = arch.layout
    H, Hkv, n, N = arch.n_heads, arch.n_kv_heads, arch.head_dim, arch.hidden_size
    names = set(tensors.names)

    def need(relative: str, *fallbacks: str) -> str:
        name = prefix + relative
        for alt in fallbacks:
            if name not in names and prefix + alt in names:
                name = prefix + alt
        if name not in names:
            raise QKEnergyError(
                f"{_where(tensors)}: missing tensor {name!r} (layer {layer} of a "
                f"{arch.model_type} checkpoint)"
            )
        return name

    sizes = f"{H} heads x head_dim {n}, hidden {N}"
    qname = need(lay.query.format(i=layer))
    if lay.storage == "separate":
        assert lay.key is not None, "a separate layout names its key tensor"
        kname = need(lay.key.format(i=layer))
        _check_shape(tensors, qname, (H * n, N), sizes)
        _check_shape(tensors, kname, (Hkv * n, N), f"{Hkv} key heads x head_dim {n}, hidden {N}")
        wq = tensors.tensor(qname).reshape(H, n, N)
        wk = tensors.tensor(kname).reshape(Hkv, n, N)
    elif lay.storage == "stacked":
        _check_shape(
            tensors,
            qname,
            ((H + 2 * Hkv) * n, N),
            f"({H} + 2 x {Hkv} key/value heads) x head_dim {n}, hidden {N}",
        )
        w = tensors.tensor(qname)
        wq = w[: H * n].reshape(H, n, N)
        wk = w[H * n : (H + Hkv) * n].reshape(Hkv, n, N)
    elif lay.storage == "conv1d":
        _check_shape(tensors, qname, (N, 3 * H * n), f"Conv1D [in, out]: {sizes}")
        w = tensors.tensor(qname)
        wq = w[:, : H * n].T.reshape(H, n, N)
        wk = w[:, H * n : 2 * H * n].T.reshape(H, n, N)
    elif lay.storage == "interleaved":
        _check_shape(tensors, qname, (3 * H * n, N), f"fused q, k, v per head: {sizes}")
        w = tensors.tensor(qname).reshape(H, 3, n, N)
        wq, wk = w[:, 0], w[:, 1]
    else:  # pragma: no cover - guarded by the Storage literal
        raise AssertionError(f"unknown storage {lay.storage!r}")
    # Contiguous copies: drop the value rows of fused tensors and the file mapping.
    wq, wk = np.ascontiguousarray(wq), np.ascontiguousarray(wk)

    gain = None
    if fold_norm:
        norm = _norm_name(lay, layer)
        if norm is not None:
            # Checkpoints from the original BERT code name LayerNorm weights 'gamma'.
            legacy = norm[: -len(".weight")] + ".gamma" if norm.endswith(".weight") else norm
            gname = need(norm, legacy)
            _check_shape(tensors, gname, (N,), f"hidden {N}")
            gain = tensors.tensor(gname).astype(np.float64 if wq.dtype == np.float64 else np.float32)
            gain = gain + np.asarray(lay.norm_offset, dtype=gain.dtype)
            wq = wq.astype(gain.dtype) * gain
            wk = wk.astype(gain.dtype) * gain
    return LayerWeights(layer, wq, wk, arch.kv_head, gain)
