"""The schema of an architecture layout: where each head's W_Q, W_K live in a checkpoint.

A :class:`Family` (one config.json ``model_type``) has one :class:`Layout` per
attention stack (encoder, decoder and cross-attention of t5; text and vision
towers of clip; a single unnamed stack for most models). A layout says which
config.json keys give the sizes, the names of the query/key tensors relative to
a layer (``{i}`` is the layer index, the checkpoint's own name prefix such as
``model.`` is found at read time), how Q and K are stored, which norm's gain
feeds attention (for the fold-norm option), how positions enter, and any
qk-norm (:class:`QKNorm`) or latent projections (:class:`LatentAttention`)
folded into the form. The families themselves are data in
:mod:`qkenergy.weights.families`; resolving a config is
:mod:`qkenergy.weights.architecture`, reading a layer :mod:`qkenergy.weights.reading`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

import numpy as np

__all__ = [
    "POSITIONAL",
    "STACKS",
    "Family",
    "KVSharing",
    "LatentAttention",
    "LayerPattern",
    "LayerShape",
    "Layout",
    "QKNorm",
    "SharedBlocks",
    "TensorReader",
]


Storage = Literal["separate", "stacked", "conv1d", "interleaved", "grouped", "latent"]


Positional = Literal["absolute", "rope", "rope_2d", "alibi", "relative_bias", "none"]


POSITIONAL: tuple[str, ...] = get_args(Positional)


STACKS: tuple[str, ...] = ("", "encoder", "decoder", "cross", "text", "vision")


class TensorReader(Protocol):
    """What :func:`read_layer` needs from a checkpoint (e.g. safetensors_io.TensorSource)."""

    @property
    def names(self) -> Collection[str]: ...

    def shape(self, name: str) -> tuple[int, ...]: ...

    def tensor(self, name: str) -> np.ndarray: ...


@dataclass(frozen=True)
class LayerPattern:
    """A set of layers named by config.json: the layers of a hybrid model that have softmax
    attention, or the layers of a model with NoPE layers that rotate.

    ``key`` is a config.json key (a dotted path reaches into a sub-dict, e.g.
    ``linear_attn_config.full_attn_layers``). Its value is read by ``kind``:

    - ``types``: one entry per layer, a list (layer types such as "full_attention", or 0/1
      flags) or a string of one character per layer (nemotron_h's "M-*"); a layer belongs
      when its entry is one of ``members`` (no members: when the entry is truthy, e.g. 1);
    - ``indices``: the list of the layer indices that belong, counted from ``base``;
    - ``period``: layer i belongs when i % value equals the value of ``offset_key`` (jamba);
    - ``cycle``: as ``types``, the list repeated over the layers (recurrent_gemma's block_types);
    - ``first``: as ``types``, only the first layer that belongs (one attention block shared by
      every layer that belongs, zamba: its weights, and so its form, are the same at each).

    Parameters
    ----------
    key : str
        The config.json key (a dotted path reaches into a sub-dict).
    kind : {"types", "indices", "period", "cycle", "first"}
        How its value is read (see above).
    members : tuple of str
        The entries that belong (``types``, ``cycle``, ``first``); empty: every truthy entry.
    base : int
        The index of the first layer (``indices``).
    offset_key : str or None
        The config.json key of the offset (``period``).
    """

    key: str
    kind: Literal["types", "indices", "period", "cycle", "first"] = "types"
    members: tuple[str, ...] = ()
    base: int = 0
    offset_key: str | None = None


@dataclass(frozen=True)
class LayerShape:
    """Layers whose heads differ in size from the rest of their stack.

    Gemma 4's full-attention layers have heads of ``global_head_dim`` (and, with
    ``attention_k_eq_v``, ``num_global_key_value_heads`` key heads); MiMo-V2-Flash's
    sliding layers have twice the key heads of its full layers. ``layers`` names them;
    ``head_dim_key`` / ``kv_heads_key`` are config.json keys of their sizes (absent from the
    config: the stack's size; ignored when the config has transformers' ``per_layer_config``,
    which then gives the sizes of every layer), and ``kv_heads_factor`` multiplies their
    key-head count whatever gave it.

    Parameters
    ----------
    layers : LayerPattern
        The layers whose heads differ.
    head_dim_key : str or None
        The config.json key of their head dimension; None: the stack's.
    kv_heads_key : str or None
        The config.json key of their key-head count; None: the stack's.
    kv_heads_factor : int
        What their key-head count is multiplied by.
    """

    layers: LayerPattern
    head_dim_key: str | None = None
    kv_heads_key: str | None = None
    kv_heads_factor: int = 1


@dataclass(frozen=True)
class KVSharing:
    """The last layers of a decoder reuse the keys of an earlier layer (Gemma 4's KV sharing).

    The last ``count_key`` layers (a config.json key) have no key projection: each takes the
    keys the last earlier layer of the same type (``types_key``: one type per layer) computed,
    from that layer's own input. Its score pairs its queries with those keys, so its form is
    ``W_K(source)^T W_Q(layer)``, read with the source layer's key projection, key norm and
    (with fold-norm) the source layer's input norm on the key side.

    Parameters
    ----------
    count_key : str
        The config.json key of the number of last layers that share keys.
    types_key : str
        The config.json key of the per-layer attention types.
    """

    count_key: str = "num_kv_shared_layers"
    types_key: str = "layer_types"


@dataclass(frozen=True)
class SharedBlocks:
    """Attention blocks shared by the attention layers, each application with its own adapter (zamba2).

    The model keeps ``blocks_key`` (config.json) attention blocks; its k-th attention layer
    applies block k mod that number, whose weights (projections, norms) are stored once, under
    the block's first layer. With ``adapter_key`` true in the config, each application adds a
    low-rank adapter of its own to the query and key projections: ``W_Q(k) = W_Q + B_k A_k``,
    the tensors named by ``query_adapter`` / ``key_adapter`` (down A, then up B; ``{i}`` is the
    block's first layer, ``{k}`` the application's index), so each application has its own form.

    Parameters
    ----------
    blocks_key : str
        The config.json key of the number of shared blocks.
    adapter_key : str
        The config.json key that says whether each application has its own adapters.
    query_adapter, key_adapter : (str, str) or None
        The names of the adapter's down (A) and up (B) tensors of the query and key projections.
    """

    blocks_key: str = "num_mem_blocks"
    adapter_key: str = "use_shared_attention_adapter"
    query_adapter: tuple[str, str] | None = None
    key_adapter: tuple[str, str] | None = None


@dataclass(frozen=True)
class QKNorm:
    """Norms applied to the projected queries and keys before the score (qk-norm).

    The score is the bilinear form of the normalised query and key. Normalising divides a
    token's query (key) by a positive number, which scales its scores and does not change
    the form; the gains g_Q, g_K do change it and are folded in, always:
    L = (diag(g_K) W_K)^T (diag(g_Q) W_Q). A LayerNorm (``centred``) also subtracts the
    mean of the normalised entries, a fixed linear projection P that is folded too:
    W -> diag(g) P W. A norm without learned gains (llama4's L2 norm: ``query`` and ``key``
    None) leaves the form unchanged: nothing is folded.

    Parameters
    ----------
    query : str or None
        The gain of the query norm (relative name; "{h}" in it: each head has its own norm).
    key : str or None
        The gain of the key norm; None for both: a norm without learned gains, nothing folded.
    scope : {"head", "projection", "head_rows"}
        What is normalised together: each head's n entries (gain (n,), or one per head with
        "{h}"), the whole projection's H*n entries (olmo2; gain (H*n,)), or each head with its
        gains stored as one (H, n) tensor (cohere).
    offset : float
        Added to the stored gains (1 for an RMSNorm that multiplies by 1 + w, gemma3's).
    centred : bool
        A LayerNorm (subtracts the mean) rather than an RMSNorm.
    after_rope : bool
        The norm acts after the rotary embedding (hunyuan): its gains do not commute with the
        rotation, so the form read (gains folded) is that of two tokens at position 0.
    """

    query: str | None
    key: str | None
    scope: Literal["head", "projection", "head_rows"] = "head"
    offset: float = 0.0
    centred: bool = False
    after_rope: bool = False


@dataclass(frozen=True)
class LatentAttention:
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank Q and K with normed latents.

    With the query latent c_Q = W_QA x (normed, gain g_Q) and the key latent
    [c_K; k_rope] = W_KVA x (c_K normed, gain g_K), head h's query is
    W_QB[h] diag(g_Q) W_QA x and its key is [W_KVB[h, :d_nope] diag(g_K) W_KVA[:r]; W_KVA[r:]] x:
    the part without RoPE (d_nope rows) and the decoupled RoPE part shared by every head
    (d_rope rows), concatenated into one form at offset 0. The layout's ``query`` names
    W_QA (or the plain query projection when the model has no query latent: q_lora_rank
    null) and its ``key`` names W_KVA.

    Parameters
    ----------
    query_norm : str or None
        The norm on the query latent (gain g_Q); None when the model has no query latent.
    query_up : str or None
        W_QB, the query up-projection; None with no query latent.
    key_norm : str
        The norm on the key latent c_K (gain g_K).
    key_up : str
        W_KVB, the key-value up-projection.
    nope_key, rope_key, value_key, rank_key : str
        The config.json keys of d_nope, d_rope, the value head size and the key latent's rank r.
    """

    query_norm: str | None
    query_up: str | None
    key_norm: str
    key_up: str
    nope_key: str = "qk_nope_head_dim"
    rope_key: str = "qk_rope_head_dim"
    value_key: str = "v_head_dim"
    rank_key: str = "kv_lora_rank"


@dataclass(frozen=True)
class Layout:
    """One attention stack of a family; tensor names are relative to the checkpoint's prefix.

    ``{i}`` in a name is the layer index. A family has one stack per kind of attention
    (see :class:`Family`).

    Parameters
    ----------
    query : str
        The query projection's weight (for fused storage: the tensor holding q, k and v).
    key : str, optional
        The key projection's weight (None for fused storage).
    storage : str
        How the heads are stored: separate, stacked, conv1d, interleaved, grouped or latent.
    norm : str, optional
        The gain of the norm that feeds attention (None if there is none).
    post_norm : bool
        BERT-style: layer i is fed by layer i-1's output norm.
    first_norm : str, optional
        The norm feeding layer 0 (the embeddings norm; None when they are not normed) of a
        post-norm stack, or of a pre-norm layer 0 without its own norm (modernbert).
    norm_offset : float
        Added to the norm's gain (gemma's RMSNorm multiplies by 1 + weight).
    heads_keys, hidden_keys, layers_keys : tuple of str
        config.json keys of the head count, residual width and layer count, first match wins
        (the first is named in errors).
    kv_heads_key : str, optional
        The key-head count's key (None: every query head has its own key head).
    kv_heads : int, optional
        A fixed key-head count (multi-query: 1), overriding ``kv_heads_key``.
    head_dim_key : str, optional
        The head dimension's key (None: hidden_size / heads).
    stack : str
        "", encoder, decoder, cross, text or vision.
    positional : str
        absolute, rope, rope_2d, alibi, relative_bias or none.
    rope_pairs : str
        RoPE coordinate pairs: "half" (k with k + r/2: neox, llama) or "interleaved" (2k with 2k + 1: gptj).
    qk_norm : QKNorm, optional
        Norms applied to queries and keys after projection (their gains are folded in).
    latent : LatentAttention, optional
        Multi-head latent attention's factors.
    config_section : str, optional
        The sub-dict of config.json holding the sizes (clip: text_config).
    section_optional : bool
        A config without that section keeps the sizes at its top level (older multimodal configs).
    key_stack : str, optional
        Cross-attention: the stack whose output the keys read (its final norm or, for a post-norm
        stack, its last layer's norm feeds them).
    final_norm : str, optional
        The stack's final norm.
    query_gate : bool
        The query projection also holds a gate per head (qwen3_next: rows (H, 2n), each head's n
        query rows first, then its n gate rows; only the query rows enter the form).
    attention_layers : tuple of LayerPattern
        Hybrid models: the layers with softmax attention (the first pattern whose key the config
        has; none: every layer). Rows keep the model's own layer index.
    rope_layers : tuple of LayerPattern
        Models with NoPE layers: the layers that rotate (the first pattern whose key the config has;
        none: every layer of a rope stack); the other layers are ``positional = none``.
    within : str, optional
        A multimodal tower's name inside the checkpoint prefix (language_model, vision_tower), so
        one tower's tensors are never taken for another's.
    adjust : callable, optional
        ``adjust(config, layout) -> Layout``: config-dependent variants (e.g. OPT's do_layer_norm_before).
    layer_shapes : tuple of LayerShape
        Layers whose heads have another size or key-head count (:class:`LayerShape`; the first
        pattern a layer matches); a config's ``per_layer_config`` (transformers 5) is read in any case.
    kv_sharing : KVSharing, optional
        Layers that attend with an earlier layer's keys (:class:`KVSharing`).
    shared_blocks : SharedBlocks, optional
        Attention blocks shared between layers, each use with its own adapter (:class:`SharedBlocks`).
    """

    query: str
    key: str | None = None
    storage: Storage = "separate"
    norm: str | None = None
    post_norm: bool = False
    first_norm: str | None = None
    norm_offset: float = 0.0
    heads_keys: tuple[str, ...] = ("num_attention_heads",)
    hidden_keys: tuple[str, ...] = ("hidden_size",)
    layers_keys: tuple[str, ...] = ("num_hidden_layers",)
    kv_heads_key: str | None = None
    kv_heads: int | None = None
    head_dim_key: str | None = None
    stack: str = ""
    positional: Positional = "absolute"
    rope_pairs: Literal["half", "interleaved"] = "half"
    qk_norm: QKNorm | None = None
    latent: LatentAttention | None = None
    config_section: str | None = None
    section_optional: bool = False
    key_stack: str | None = None
    final_norm: str | None = None
    query_gate: bool = False
    attention_layers: tuple[LayerPattern, ...] = ()
    rope_layers: tuple[LayerPattern, ...] = ()
    within: str | None = None
    layer_shapes: tuple[LayerShape, ...] = ()
    kv_sharing: KVSharing | None = None
    shared_blocks: SharedBlocks | None = None
    adjust: Callable[[Mapping[str, Any], Layout], Layout] | None = field(
        default=None, compare=False, repr=False
    )


@dataclass(frozen=True)
class Family:
    """Everything qkenergy knows about one config.json ``model_type``.

    Parameters
    ----------
    stacks : tuple of Layout
        One layout per attention stack.
    models : str
        Examples of checkpoints of the family, for ``qkenergy layouts``.
    note : str
        What a user must know about the rows, printed with the analysis.
    proof : str
        The transformers attention class whose scores the layout is proven to reproduce
        (tests/cross/test_universal_proof.py); "" when none.
    variants : str
        The config-dependent variants, for ``qkenergy layouts`` (e.g. "alibi if alibi: true").
    """

    stacks: tuple[Layout, ...]
    models: str = ""
    note: str = ""
    proof: str = ""
    variants: str = ""

    def stack(self, name: str) -> Layout:
        for layout in self.stacks:
            if layout.stack == name:
                return layout
        raise KeyError(name)
