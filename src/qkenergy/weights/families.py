"""The supported families: one declarative :class:`~qkenergy.weights.layout.Family` per ``model_type``.

Adding a family is a few declarative lines in :data:`FAMILIES` (the builders
below share the common shapes: BERT-like, llama-like, seq2seq stacks, vision
towers). ``qkenergy layouts`` lists them (:func:`describe_families`,
:data:`LAYOUT_COLUMNS`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from qkenergy.base.errors import QKEnergyError
from qkenergy.weights.layout import (
    Family,
    KVSharing,
    LatentAttention,
    LayerPattern,
    LayerShape,
    Layout,
    Positional,
    QKNorm,
    SharedBlocks,
)

__all__ = [
    "FAMILIES",
    "LAYOUT_COLUMNS",
    "describe_families",
    "supported_model_types",
]


def _qk(prefix: str, q: str = "q_proj", k: str = "k_proj") -> dict[str, Any]:
    """The query and key weights ``<prefix><q>.weight`` and ``<prefix><k>.weight`` of a layout."""
    return dict(query=f"{prefix}{q}.weight", key=f"{prefix}{k}.weight")


def _sizes(heads: str, hidden: str, layers: str) -> dict[str, Any]:
    """Config keys of the sizes, each falling back to the usual transformers name."""
    return dict(
        heads_keys=(heads, "num_attention_heads"),
        hidden_keys=(hidden, "hidden_size"),
        layers_keys=(layers, "num_hidden_layers"),
    )


def _bert_like(**kw: Any) -> Layout:
    """Post-LayerNorm encoder with separate query / key, its layer 0 fed by the embeddings norm."""
    fields: dict[str, Any] = dict(
        **_qk("encoder.layer.{i}.attention.self.", "query", "key"),
        norm="encoder.layer.{i}.output.LayerNorm.weight",
        post_norm=True,
        first_norm="embeddings.LayerNorm.weight",
    )
    return Layout(**{**fields, **kw})


def _bert_pre_norm(norm: str) -> Layout:
    """BERT's names, pre-norm: the norm ``attention.<norm>`` feeds attention."""
    return _bert_like(norm=f"encoder.layer.{{i}}.attention.{norm}.weight", post_norm=False, first_norm=None)


def _llama_like(**kw: Any) -> Layout:
    """Pre-RMSNorm decoder with separate q_proj / k_proj, grouped-query attention and RoPE."""
    fields: dict[str, Any] = dict(
        **_qk("layers.{i}.self_attn."),
        norm="layers.{i}.input_layernorm.weight",
        kv_heads_key="num_key_value_heads",
        head_dim_key="head_dim",
        positional="rope",
    )
    return Layout(**{**fields, **kw})


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


def _opt_like(**kw: Any) -> Layout:
    """Pre-LayerNorm decoder with separate q_proj / k_proj (OPT, XGLM, BioGPT, Whisper-like encoders)."""
    return Layout(**_qk("layers.{i}.self_attn."), norm="layers.{i}.self_attn_layer_norm.weight", **kw)


def _gpt2_like(**kw: Any) -> Layout:
    """GPT-2's names: the fused c_attn (its storage set by the caller), ln_1 feeding attention."""
    fields: dict[str, Any] = dict(
        query="h.{i}.attn.c_attn.weight", norm="h.{i}.ln_1.weight", **_sizes("n_head", "n_embd", "n_layer")
    )
    return Layout(**{**fields, **kw})


def _neox_like(attention: str, **kw: Any) -> Layout:
    """GPT-NeoX's fused query_key_value (each head's q, k, v rows in turn), pre-norm, RoPE."""
    return Layout(
        query=f"layers.{{i}}.{attention}.query_key_value.weight",
        storage="interleaved",
        norm="layers.{i}.input_layernorm.weight",
        positional="rope",
        **kw,
    )


def _modernbert(**kw: Any) -> Layout:
    """ModernBERT's layers; layer 0 has no attn_norm: the embeddings norm feeds it."""
    return Layout(
        norm="layers.{i}.attn_norm.weight", first_norm="embeddings.norm.weight", positional="rope", **kw
    )


def _family(
    stacks: Layout | tuple[Layout, ...], proof: str, models: str = "", note: str = "", variants: str = ""
) -> Family:
    """A family of one stack (a Layout) or several (a tuple of them)."""
    stacks = stacks if isinstance(stacks, tuple) else (stacks,)
    return Family(stacks, models=models, note=note, proof=proof, variants=variants)


def _qk_norm(
    prefix: str = "layers.{i}.self_attn.", q: str = "q_norm", k: str = "k_norm", **kw: Any
) -> QKNorm:
    return QKNorm(f"{prefix}{q}.weight", f"{prefix}{k}.weight", **kw)


def _falcon_adjust(config: Mapping[str, Any], layout: Layout) -> Layout:
    """Falcon's three storages of query_key_value, and ALiBi instead of RoPE when asked."""
    positional: Positional = "alibi" if config.get("alibi") else "rope"
    if config.get("new_decoder_architecture"):
        # Two parallel norms by default (num_ln_in_parallel_attn null or 2): ln_attn feeds attention.
        one_norm = config.get("num_ln_in_parallel_attn") == 1
        norm = "h.{i}.input_layernorm.weight" if one_norm else "h.{i}.ln_attn.weight"
        return dataclasses.replace(
            layout, storage="grouped", kv_heads_key="num_kv_heads", norm=norm, positional=positional
        )
    if config.get("multi_query", True):
        return dataclasses.replace(layout, storage="stacked", kv_heads=1, positional=positional)
    return dataclasses.replace(layout, storage="interleaved", positional=positional)


def _with_qk_norm(qk: QKNorm, flag: str) -> Callable[[Mapping[str, Any], Layout], Layout]:
    """The layout with ``qk`` when the config sets ``flag`` (phi's and stablelm's qk_layernorm, glm4_moe's
    use_qk_norm, cohere's)."""

    def adjust(config: Mapping[str, Any], layout: Layout) -> Layout:
        return dataclasses.replace(layout, qk_norm=qk) if config.get(flag) else layout

    return adjust


def _electra_adjust(config: Mapping[str, Any], layout: Layout) -> Layout:
    # A smaller embedding is projected up after its norm: no norm feeds layer 0 directly.
    if config.get("embedding_size", config.get("hidden_size")) != config.get("hidden_size"):
        return dataclasses.replace(layout, first_norm=None)
    return layout


def _albert_adjust(config: Mapping[str, Any], layout: Layout) -> Layout:
    if config.get("inner_group_num", 1) != 1:
        raise QKEnergyError(
            f"ALBERT with inner_group_num={config.get('inner_group_num')!r} is not supported "
            "(every released ALBERT has 1: one layer per group)"
        )
    return layout


def _deepseek_adjust(config: Mapping[str, Any], layout: Layout) -> Layout:
    """Without a query latent (q_lora_rank null, DeepSeek-V2-Lite) q_proj reads x directly."""
    if config.get("q_lora_rank") is None and layout.latent is not None:
        latent = dataclasses.replace(layout.latent, query_norm=None, query_up=None)
        return dataclasses.replace(layout, query="layers.{i}.self_attn.q_proj.weight", latent=latent)
    return layout


def _t5_stacks() -> tuple[Layout, ...]:
    def stack(name: str, sublayer: int, attention: str, **kw: Any) -> Layout:
        """A stack whose layer i has its attention in ``block.{i}.layer.<sublayer>.<attention>``."""
        side = "encoder" if name == "encoder" else "decoder"
        return Layout(
            **_qk(f"{side}.block.{{i}}.layer.{sublayer}.{attention}.", "q", "k"),
            norm=f"{side}.block.{{i}}.layer.{sublayer}.layer_norm.weight",
            heads_keys=("num_heads",),
            hidden_keys=("d_model",),
            head_dim_key="d_kv",
            layers_keys=("num_layers",) if side == "encoder" else ("num_decoder_layers", "num_layers"),
            stack=name,
            **kw,
        )

    return (
        stack(
            "encoder",
            0,
            "SelfAttention",
            positional="relative_bias",
            final_norm="encoder.final_layer_norm.weight",
        ),
        stack("decoder", 0, "SelfAttention", positional="relative_bias"),
        stack("cross", 1, "EncDecAttention", positional="none", key_stack="encoder"),
    )


def _seq2seq_stacks(post_norm: bool, unnormed: tuple[str, ...] = ()) -> tuple[Layout, ...]:
    """BART (post-norm, normed embeddings) and Whisper (pre-norm, a final encoder norm).

    ``unnormed``: post-norm stacks whose layer 0 is not fed by a norm's output (Marian; the
    BlenderBot-small decoder, which adds its positions after the embeddings norm).
    """

    def sizes(side: str) -> dict[str, Any]:
        return dict(
            heads_keys=(f"{side}_attention_heads",), hidden_keys=("d_model",), layers_keys=(f"{side}_layers",)
        )

    stacks = []
    for side in ("encoder", "decoder"):
        layer = f"{side}.layers.{{i}}."
        if post_norm:
            first = None if side in unnormed else f"{side}.layernorm_embedding.weight"
            norm: dict[str, Any] = dict(
                norm=layer + "final_layer_norm.weight", post_norm=True, first_norm=first
            )
        else:
            norm = dict(norm=layer + "self_attn_layer_norm.weight")
            if side == "encoder":
                norm["final_norm"] = "encoder.layer_norm.weight"
        stacks.append(Layout(**_qk(layer + "self_attn."), stack=side, **sizes(side), **norm))
    cross_norm = "self_attn_layer_norm" if post_norm else "encoder_attn_layer_norm"
    cross = Layout(
        **_qk("decoder.layers.{i}.encoder_attn."),
        norm=f"decoder.layers.{{i}}.{cross_norm}.weight",
        stack="cross",
        key_stack="encoder",
        **sizes("decoder"),
    )
    return (*stacks, cross)


def _clip_tower(tower: str) -> Layout:
    return Layout(
        **_qk(f"{tower}_model.encoder.layers.{{i}}.self_attn."),
        norm=f"{tower}_model.encoder.layers.{{i}}.layer_norm1.weight",
        stack=tower,
        config_section=f"{tower}_config",
    )


def _vit_like(norm: str, **kw: Any) -> Layout:
    return Layout(
        **_qk("encoder.layer.{i}.attention.attention.", "query", "key"),
        norm=f"encoder.layer.{{i}}.{norm}.weight",
        **kw,
    )


# ----------------------------------------------------------------------------- families of 2025-2026


# Layers with softmax attention in hybrid models (and the sliding-window ones), by their config's layer types.
_FULL_ATTENTION = LayerPattern("layer_types", members=("full_attention",))
_SLIDING_ATTENTION = LayerPattern("layer_types", members=("sliding_attention",))


def _exaone4_adjust(config: Mapping[str, Any], layout: Layout) -> Layout:
    """With a sliding window only the sliding layers rotate; the global layers are NoPE."""
    if config.get("sliding_window") is None:
        return layout
    return dataclasses.replace(layout, rope_layers=(_SLIDING_ATTENTION,))


def _granite_hybrid_adjust(config: Mapping[str, Any], layout: Layout) -> Layout:
    """Granite 4.0-H rotates only with position_embedding_type rope (its released models do not)."""
    if config.get("position_embedding_type") == "rope":
        return layout
    return dataclasses.replace(layout, positional="none")


_MLA_LATENT = LatentAttention(
    query_norm="layers.{i}.self_attn.q_a_layernorm.weight",
    query_up="layers.{i}.self_attn.q_b_proj.weight",
    key_norm="layers.{i}.self_attn.kv_a_layernorm.weight",
    key_up="layers.{i}.self_attn.kv_b_proj.weight",
)


def _mla(**kw: Any) -> Layout:
    """Multi-head latent attention laid out as DeepSeek-V3's (q_proj without a query latent)."""
    fields: dict[str, Any] = dict(
        **_qk("layers.{i}.self_attn.", "q_a_proj", "kv_a_proj_with_mqa"),
        storage="latent",
        norm="layers.{i}.input_layernorm.weight",
        positional="rope",
        latent=_MLA_LATENT,
        adjust=_deepseek_adjust,
    )
    return Layout(**{**fields, **kw})


def _speech_adjust(config: Mapping[str, Any], layout: Layout) -> Layout:
    """The stable-layer-norm variant (do_stable_layer_norm: large models) is pre-norm."""
    if config.get("do_stable_layer_norm"):
        return dataclasses.replace(
            layout, norm="encoder.layers.{i}.layer_norm.weight", post_norm=False, first_norm=None
        )
    return layout


def _speech_encoder() -> Layout:
    """wav2vec 2.0 / HuBERT: post-norm encoder layers after the encoder's own norm."""
    return Layout(
        **_qk("encoder.layers.{i}.attention."),
        norm="encoder.layers.{i}.final_layer_norm.weight",
        post_norm=True,
        first_norm="encoder.layer_norm.weight",
        adjust=_speech_adjust,
    )


_SPEECH_NOTE = (
    "positions enter as a convolutional embedding added to the input of the layers (absolute); "
    "the convolutional feature encoder has no attention"
)
_SPEECH_VARIANTS = "pre-norm with do_stable_layer_norm"


def _llama4_text(**kw: Any) -> Layout:
    """Llama 4's decoder: interleaved RoPE, NoPE layers, gain-free L2 qk-norm on the RoPE layers."""
    return _llama_like(
        rope_pairs="interleaved",
        rope_layers=(LayerPattern("no_rope_layers"),),
        qk_norm=QKNorm(None, None),
        **kw,
    )


_LLAMA4_NOTE = (
    "every fourth layer has no positions (NoPE) and scales its queries by a per-position temperature; "
    "the other layers L2-normalise q and k without gains (a per-token factor: the form is unchanged)"
)


def _qwen3_next(**kw: Any) -> Layout:
    """Qwen3-Next's decoder (and Qwen3.5's): gated queries, full attention every few layers."""
    return _llama_like(
        norm_offset=1.0,
        query_gate=True,
        qk_norm=_qk_norm(offset=1.0),
        attention_layers=(_FULL_ATTENTION,),
        **kw,
    )


_QWEN3_5_NOTE = (
    "hybrid: rows for the full-attention layers only (the Gated DeltaNet layers are linear attention); "
    "the query projection also holds each head's output gate"
)
_MROPE_NOTE = (
    "M-RoPE: a text token's three position components are equal, so its rotation is 1-D RoPE (the form "
    "at offset 0 is the same)"
)


# ------------------------------------------------------------------ vision towers of multimodal decoders


def _qwen_vision() -> Layout:
    """The Qwen2.5-VL / Qwen3-VL / Qwen3.5 vision encoder: fused qkv (q, k, v row blocks), 2-D RoPE."""
    return Layout(
        query="blocks.{i}.attn.qkv.weight",
        storage="stacked",
        norm="blocks.{i}.norm1.weight",
        heads_keys=("num_heads", "num_attention_heads"),
        layers_keys=("depth", "num_hidden_layers"),
        stack="vision",
        positional="rope_2d",
        config_section="vision_config",
    )


_QWEN_VISION_NOTE = (
    "two towers: the text decoder and the vision encoder, whose fused qkv heads rotate by a 2-D RoPE over "
    "patch rows and columns (the form read is the one at offset (0, 0)); its attention over windows or "
    "images of the patch sequence is a mask, not part of the form"
)
_QWEN_WINDOWS_NOTE = "; the layers not in fullatt_block_indexes attend within windows of patches"
_QWEN3_VISION_NOTE = "; learned position embeddings are also added to the patches (absolute)"
_QWEN3_DEEPSTACK_NOTE = _QWEN3_VISION_NOTE + (
    "; the deepstack mergers feeding vision features into early text layers are MLPs, without attention"
)


def _qwen_vl(
    proof: str,
    models: str,
    text: Layout,
    tail: str = "",
    lead: str = _MROPE_NOTE,
    vision: Layout | None = None,
) -> Family:
    """A Qwen vision-language model: its text decoder and the Qwen vision encoder, their notes joined."""
    text = dataclasses.replace(text, stack="text", config_section="text_config", section_optional=True)
    return _family((text, vision or _qwen_vision()), proof, models, f"{lead}; {_QWEN_VISION_NOTE}{tail}")


def _qwen_vision_alone(proof: str, models: str, tail: str = _QWEN3_VISION_NOTE) -> Family:
    """The Qwen vision encoder saved as its own model."""
    return _family(_alone(_qwen_vision()), proof, models, _QWEN_VISION_NOTE + tail)


# ------------------------------------------------- issue 18, second round: towers alone, wrappers, decoders


def _tower_alone(tower: str) -> Layout:
    """A CLIP-like encoder tower saved as its own model (clip_vision_model, siglip_text_model, ...).

    The sizes are at the config's top level; the names match with or without the tower's
    ``text_model.`` / ``vision_model.`` prefix (found at read time).
    """
    return Layout(
        **_qk("encoder.layers.{i}.self_attn."), norm="encoder.layers.{i}.layer_norm1.weight", stack=tower
    )


def _alone(layout: Layout) -> Layout:
    """A multimodal model's tower layout for the tower's own config (its sizes at the top level)."""
    return dataclasses.replace(layout, config_section=None, section_optional=False, within=None)


def _sub_model(config: Mapping[str, Any], layout: Layout) -> Layout:
    """A wrapper's tower laid out as the supported family its section's own ``model_type`` names.

    Vision-language wrappers (llava, paligemma, ...) combine a vision encoder and a decoder of
    other model types, named in ``vision_config`` / ``text_config``: the tower is read with that
    family's layout (its own config-dependent variant), kept in the wrapper's section and
    prefix. A section without a model_type is the wrapper's default tower (``layout`` itself).
    """
    sub = config.get("model_type")
    if sub is None:
        return dataclasses.replace(layout, adjust=None)
    family = FAMILIES.get(sub) if isinstance(sub, str) else None
    if family is None or len(family.stacks) != 1:
        raise QKEnergyError(
            f"the {layout.stack} tower ({layout.config_section}) has model_type {str(sub)[:60]!r}, "
            "which qkenergy does not read as a single stack; pass `layout` FILE.toml to describe it"
        )
    inner = family.stacks[0]
    if inner.adjust is not None:
        inner = inner.adjust(config, inner)
    return dataclasses.replace(
        inner,
        stack=layout.stack,
        config_section=layout.config_section,
        section_optional=layout.section_optional,
        within=layout.within,
        adjust=None,
    )


def _towers(
    text: Layout, vision: Layout, within: tuple[str, str] = ("language_model", "vision_tower"), **kw: Any
) -> tuple[Layout, Layout]:
    """A multimodal model's text and vision stacks, sized by text_config / vision_config, each ``within``."""
    return (
        dataclasses.replace(text, stack="text", config_section="text_config", within=within[0], **kw),
        dataclasses.replace(vision, stack="vision", config_section="vision_config", within=within[1], **kw),
    )


def _wrapper(
    proof: str,
    models: str,
    text: Layout | None = None,
    within: tuple[str, str] = ("language_model", "vision_tower"),
) -> Family:
    """A vision-language wrapper: default text (llama) and vision stacks, each delegated by model_type."""
    return _family(
        _towers(text or _llama_like(), _tower_alone("vision"), within, adjust=_sub_model),
        proof,
        models,
        "two towers: the decoder and the vision encoder named by text_config / vision_config, each read "
        "as its own model_type (the projector has no attention)",
        "towers read as the model_type of text_config / vision_config",
    )


def _bigcode_adjust(config: Mapping[str, Any], layout: Layout) -> Layout:
    """StarCoder 1 (multi_query): c_attn rows are all queries, then one key head, then one value head."""
    if config.get("multi_query", True):
        return dataclasses.replace(layout, storage="stacked", kv_heads=1)
    return dataclasses.replace(layout, storage="interleaved")  # per head: its q, k, v rows


def _beit_adjust(config: Mapping[str, Any], layout: Layout) -> Layout:
    """BEiT's learned relative position bias (per layer or shared) is added to the scores."""
    if config.get("use_relative_position_bias") or config.get("use_shared_relative_position_bias"):
        return dataclasses.replace(layout, positional="relative_bias")
    return layout


def _sliding_rope_adjust(config: Mapping[str, Any], layout: Layout) -> Layout:
    """Only the sliding-window layers rotate (flint); without a sliding window no layer does."""
    if config.get("sliding_window") is None:
        return dataclasses.replace(layout, positional="none")
    return dataclasses.replace(layout, rope_layers=(_SLIDING_ATTENTION,))


def _cohere2_moe_adjust(config: Mapping[str, Any], layout: Layout) -> Layout:
    """Cohere 2 MoE rotates its sliding layers, and with prefix_dense_sliding_window_pattern 1 also its
    dense-MLP layers (full attention then): a set no single config key names, refused."""
    types, mlp = config.get("layer_types"), config.get("mlp_layer_types")
    if (
        config.get("prefix_dense_sliding_window_pattern", 1) == 1
        and isinstance(types, list)
        and isinstance(mlp, list)
    ):
        forced = [
            i
            for i, (t, m) in enumerate(zip(types, mlp, strict=False))
            if m == "dense" and t != "sliding_attention"
        ]
        if forced:
            raise QKEnergyError(
                f"this cohere2_moe model rotates its full-attention dense layers {forced[:8]} "
                "(prefix_dense_sliding_window_pattern 1), which qkenergy does not model; pass `layout` FILE.toml"
            )
    return layout


def _audio_encoder(proof: str, models: str) -> Family:
    """A Whisper-like audio encoder saved on its own (Qwen2-Audio's, Voxtral's): pre-norm layers."""
    return _family(
        _opt_like(**_sizes("encoder_attention_heads", "d_model", "encoder_layers")),
        proof,
        models,
        "a Whisper encoder: the convolutional front end has no attention",
    )


def _olmo2_like() -> Layout:
    """OLMo 2's decoder norms the outputs of its sublayers: attention reads the raw residual stream."""
    return _llama_like(norm=None, qk_norm=_qk_norm(scope="projection"))


def _cohere2_text(**kw: Any) -> Layout:
    """Cohere 2's decoder: interleaved pairs; only the sliding layers rotate (the global ones are NoPE)."""
    return _llama_like(rope_pairs="interleaved", rope_layers=(_SLIDING_ATTENTION,), **kw)


def _hunyuan(proof: str, models: str) -> Family:
    """Hunyuan's decoders: qk-norm after RoPE."""
    return _family(
        _llama_like(qk_norm=_qk_norm(q="query_layernorm", k="key_layernorm", after_rope=True)),
        proof,
        models,
        "qk-norm after RoPE: its gains do not commute with the rotation, so the form read is the one of "
        "two tokens at position 0",
    )


def _lfm2(proof: str, models: str) -> Family:
    """LFM2's hybrid decoder: attention layers between short convolutions."""
    return _family(
        _llama_like(
            norm="layers.{i}.operator_norm.weight",
            qk_norm=_qk_norm(q="q_layernorm", k="k_layernorm"),
            attention_layers=(_FULL_ATTENTION,),
        ),
        proof,
        models,
        "hybrid: rows for the attention layers only (the others are short convolutions)",
    )


def _pixtral() -> Layout:
    """The Pixtral vision encoder: 2-D RoPE over patch rows and columns."""
    return Layout(
        **_qk("transformer.layers.{i}.attention."),
        norm="transformer.layers.{i}.attention_norm.weight",
        head_dim_key="head_dim",
        stack="vision",
        positional="rope_2d",
    )


def _llama4_vision() -> Layout:
    """Llama 4's vision encoder: 2-D RoPE."""
    return Layout(
        **_qk("model.layers.{i}.self_attn."),
        norm="model.layers.{i}.input_layernorm.weight",
        stack="vision",
        positional="rope_2d",
    )


# Notes and variants shared by several families.
_MLA_NOTE = "latent attention, as deepseek_v3 (qkenergy explain families)"
_MLA_VARIANTS = "multi-head latent attention; q_proj without a query latent when q_lora_rank is null"
_QK_LAYERNORM = _with_qk_norm(_qk_norm(q="q_layernorm", k="k_layernorm", centred=True), "qk_layernorm")
_QK_LAYERNORM_VARIANTS = "qk-norm (LayerNorm) with qk_layernorm"
_BEIT_VARIANTS = "relative_bias with use_relative_position_bias or use_shared_relative_position_bias"
_POOLING_NOTE = "the attention-pooling head (one learned probe) is not read"
_TOWER_POOLING = "the vision tower's attention-pooling head (one learned probe) is not read"
_UNNORMED_NOTE = "post-norm, sinusoidal positions; the embeddings feeding layer 0 are not normed"


# ---------------------------------------------------------------------- per-layer shapes, KV sharing
# (gemma4, mimo_v2_flash): layers whose heads differ in size, layers that reuse earlier keys.


def _gemma4_adjust(config: Mapping[str, Any], layout: Layout) -> Layout:
    """Gemma 4's full layers have their own key-head count only with attention_k_eq_v (as transformers)."""
    if config.get("attention_k_eq_v"):
        return layout
    shapes = tuple(dataclasses.replace(shape, kv_heads_key=None) for shape in layout.layer_shapes)
    return dataclasses.replace(layout, layer_shapes=shapes)


def _embedding_gemma2_text(**kw: Any) -> Layout:
    """EmbeddingGemma 2's bidirectional encoder: Gemma 4's attention without KV sharing."""
    return _llama_like(
        qk_norm=_qk_norm(),
        layer_shapes=(
            LayerShape(
                _FULL_ATTENTION, head_dim_key="global_head_dim", kv_heads_key="num_global_key_value_heads"
            ),
        ),
        **kw,
    )


def _gemma4_text(**kw: Any) -> Layout:
    """Gemma 4's decoder: qk-norm per head, larger heads in the full layers, KV sharing at the end."""
    return _embedding_gemma2_text(kv_sharing=KVSharing(), adjust=_gemma4_adjust, **kw)


_GEMMA4_NOTE = (
    "full-attention layers have larger heads (global_head_dim; with attention_k_eq_v fewer key heads, "
    "whose keys are also the values) and proportional RoPE; the last num_kv_shared_layers layers reuse "
    "the keys of the last earlier layer of their type: their rows pair their own queries with that "
    "layer's keys (settings: key_layers)"
)


def _zamba2_adjust(config: Mapping[str, Any], layout: Layout) -> Layout:
    """Zamba2 rotates queries and keys in its shared blocks only with use_mem_rope."""
    return dataclasses.replace(layout, positional="rope") if config.get("use_mem_rope") else layout


_ZAMBA2_BLOCK = "layers.{i}.shared_transformer."


def _zamba2_adapter(side: str) -> tuple[str, str]:
    """The adapter of application {k} on the q or k side: its down (0) and up (1) projections."""
    name = _ZAMBA2_BLOCK + f"self_attn.linear_{side}_adapter_list.{{k}}"
    return f"{name}.0.weight", f"{name}.1.weight"


def _gemma4_vision() -> Layout:
    """Gemma 4's vision encoder: clippable linears, qk-norm per head, 2-D axial RoPE."""
    return Layout(
        query="encoder.layers.{i}.self_attn.q_proj.linear.weight",
        key="encoder.layers.{i}.self_attn.k_proj.linear.weight",
        norm="encoder.layers.{i}.input_layernorm.weight",
        kv_heads_key="num_key_value_heads",
        head_dim_key="head_dim",
        qk_norm=_qk_norm("encoder.layers.{i}.self_attn."),
        positional="rope_2d",
    )


_EMBEDDING_GEMMA2_NOTE = (
    "a bidirectional encoder; its full-attention layers have larger heads and their own key-head count "
    "(per_layer_config)"
)


FAMILIES: dict[str, Family] = {
    "bert": _family(_bert_like(), "BertForMaskedLM", "BERT, MiniLM, sentence-transformers"),
    "roberta": _family(_bert_like(), "RobertaForMaskedLM", "RoBERTa"),
    "distilbert": _family(
        Layout(
            **_qk("transformer.layer.{i}.attention.", "q_lin", "k_lin"),
            norm="transformer.layer.{i}.output_layer_norm.weight",
            post_norm=True,
            first_norm="embeddings.LayerNorm.weight",
            **_sizes("n_heads", "dim", "n_layers"),
        ),
        "DistilBertModel",
        "DistilBERT",
    ),
    "gpt2": _family(_gpt2_like(storage="conv1d"), "GPT2LMHeadModel", "GPT-2"),
    "gpt_neox": _family(_neox_like("attention"), "GPTNeoXForCausalLM", "GPT-NeoX, Pythia"),
    "bloom": _family(
        Layout(
            query="h.{i}.self_attention.query_key_value.weight",
            storage="interleaved",
            norm="h.{i}.input_layernorm.weight",
            heads_keys=("n_head", "num_attention_heads"),
            hidden_keys=("hidden_size", "n_embed"),
            layers_keys=("n_layer", "num_hidden_layers"),
            positional="alibi",
        ),
        "BloomForCausalLM",
        "BLOOM",
    ),
    "opt": _family(_opt_like(adjust=_opt_adjust), "OPTForCausalLM", "OPT"),
    "llama": _family(_llama_like(), "LlamaForCausalLM", "Llama 1-3, CodeLlama, TinyLlama"),
    "mistral": _family(_llama_like(), "MistralModel", "Mistral"),
    "qwen2": _family(_llama_like(), "Qwen2ForCausalLM", "Qwen2, Qwen2.5"),
    "gemma": _family(_llama_like(norm_offset=1.0), "GemmaForCausalLM", "Gemma"),
    "phi3": _family(
        Layout(
            query="layers.{i}.self_attn.qkv_proj.weight",
            storage="stacked",
            norm="layers.{i}.input_layernorm.weight",
            kv_heads_key="num_key_value_heads",
            head_dim_key="head_dim",
            positional="rope",
        ),
        "Phi3ForCausalLM",
        "Phi-3, Phi-3.5, Phi-4",
    ),
    "qwen3": _family(_llama_like(qk_norm=_qk_norm()), "Qwen3ForCausalLM", "Qwen3"),
    "qwen3_moe": _family(_llama_like(qk_norm=_qk_norm()), "Qwen3MoeForCausalLM", "Qwen3 MoE"),
    "gemma2": _family(
        _llama_like(norm_offset=1.0),
        "Gemma2ForCausalLM",
        "Gemma 2",
        "scores are soft-capped after the bilinear form; the form read is the one before capping",
    ),
    "gemma3_text": _family(
        _llama_like(norm_offset=1.0, qk_norm=_qk_norm(offset=1.0)), "Gemma3ForCausalLM", "Gemma 3 (text)"
    ),
    "olmo2": _family(_olmo2_like(), "Olmo2ForCausalLM", "OLMo 2"),
    "mixtral": _family(_llama_like(), "MixtralForCausalLM", "Mixtral"),
    "starcoder2": _family(_llama_like(), "Starcoder2ForCausalLM", "StarCoder2"),
    "stablelm": _family(
        _llama_like(
            adjust=_with_qk_norm(
                _qk_norm(q="q_layernorm.norms.{h}", k="k_layernorm.norms.{h}", centred=True), "qk_layernorm"
            )
        ),
        "StableLmForCausalLM",
        "StableLM, StableLM 2",
        variants="qk-norm (a LayerNorm per head) with qk_layernorm",
    ),
    "phi": _family(
        _llama_like(adjust=_QK_LAYERNORM),
        "PhiForCausalLM",
        "Phi-1, Phi-1.5, Phi-2",
        variants=_QK_LAYERNORM_VARIANTS,
    ),
    "gpt_neo": _family(
        Layout(
            **_qk("h.{i}.attn.attention."),
            norm="h.{i}.ln_1.weight",
            heads_keys=("num_heads",),
            layers_keys=("num_layers",),
        ),
        "GPTNeoForCausalLM",
        "GPT-Neo",
    ),
    "gptj": _family(
        Layout(
            **_qk("h.{i}.attn."),
            norm="h.{i}.ln_1.weight",
            **_sizes("n_head", "n_embd", "n_layer"),
            positional="rope",
            rope_pairs="interleaved",
        ),
        "GPTJForCausalLM",
        "GPT-J",
    ),
    "falcon": _family(
        Layout(
            query="h.{i}.self_attention.query_key_value.weight",
            norm="h.{i}.input_layernorm.weight",
            heads_keys=("num_attention_heads", "n_head"),
            layers_keys=("num_hidden_layers", "n_layer"),
            positional="rope",
            adjust=_falcon_adjust,
        ),
        "FalconForCausalLM",
        "Falcon",
        variants="new decoder architecture (grouped), legacy multi-query and multi-head; alibi with alibi",
    ),
    "mpt": _family(
        Layout(
            query="blocks.{i}.attn.Wqkv.weight",
            storage="stacked",
            norm="blocks.{i}.norm_1.weight",
            heads_keys=("n_heads",),
            hidden_keys=("d_model",),
            layers_keys=("n_layers",),
            positional="alibi",
        ),
        "MptForCausalLM",
        "MPT",
        "an MPT with attn_config.clip_qkv clamps q and k entrywise (not linear): the form is the unclamped one",
    ),
    "modernbert": _family(
        _modernbert(query="layers.{i}.attn.Wqkv.weight", storage="stacked"),
        "ModernBertForMaskedLM",
        "ModernBERT",
    ),
    "albert": _family(
        Layout(
            **_qk("encoder.albert_layer_groups.{i}.albert_layers.0.attention.", "query", "key"),
            norm="encoder.albert_layer_groups.{i}.albert_layers.0.full_layer_layer_norm.weight",
            layers_keys=("num_hidden_groups",),
            adjust=_albert_adjust,
        ),
        "AlbertForMaskedLM",
        "ALBERT",
        "ALBERT shares one layer's weights across all its layers: each shared layer (group) is one row per "
        "head, layer 0; --fold-norm folds its output norm, which feeds every application but the first",
    ),
    "xlm-roberta": _family(_bert_like(), "XLMRobertaForMaskedLM", "XLM-RoBERTa"),
    "electra": _family(_bert_like(adjust=_electra_adjust), "ElectraForPreTraining", "ELECTRA"),
    "t5": _family(_t5_stacks(), "T5ForConditionalGeneration", "T5, T5 v1.1, Flan-T5"),
    "mt5": _family(_t5_stacks(), "MT5ForConditionalGeneration", "mT5"),
    "bart": _family(_seq2seq_stacks(post_norm=True), "BartForConditionalGeneration", "BART"),
    "whisper": _family(_seq2seq_stacks(post_norm=False), "WhisperForConditionalGeneration", "Whisper"),
    "vit": _family(_vit_like("layernorm_before"), "ViTModel", "ViT"),
    "dinov2": _family(_vit_like("norm1"), "Dinov2Model", "DINOv2"),
    "clip": _family((_clip_tower("text"), _clip_tower("vision")), "CLIPModel", "CLIP"),
    "deepseek_v3": _family(
        _mla(),
        "DeepseekV3ForCausalLM",
        "DeepSeek-V3, DeepSeek-R1",
        "latent attention: the non-RoPE and decoupled RoPE parts are one form at offset 0; the key "
        "latent's norm scales only the non-RoPE part (qkenergy explain families)",
        _MLA_VARIANTS,
    ),
    # ------------------------------------------------------------- families of 2025-2026 (issue 18)
    "gpt_oss": _family(
        _llama_like(),
        "GptOssForCausalLM",
        "gpt-oss",
        "each head's learned attention sink (an extra logit per row) and the q/k biases are not part of "
        "the bilinear form",
    ),
    "smollm3": _family(
        _llama_like(rope_layers=(LayerPattern("no_rope_layers"),)),
        "SmolLM3ForCausalLM",
        "SmolLM3",
        "every fourth layer has no positions (NoPE, no_rope_layers): positional none there",
    ),
    "cohere": _family(
        _llama_like(
            rope_pairs="interleaved",
            adjust=_with_qk_norm(_qk_norm(scope="head_rows", centred=True), "use_qk_norm"),
        ),
        "CohereForCausalLM",
        "Command R, Command R+, Aya",
        variants="qk-norm (a LayerNorm per head, own gains) with use_qk_norm",
    ),
    "cohere2": _family(
        _cohere2_text(),
        "Cohere2ForCausalLM",
        "Command R7B, Command A",
        "the global (full attention) layers have no positions (NoPE): positional none there",
    ),
    "glm": _family(_llama_like(rope_pairs="interleaved"), "GlmForCausalLM", "GLM-4 (glm-4-9b)"),
    "glm4": _family(_llama_like(rope_pairs="interleaved"), "Glm4ForCausalLM", "GLM-4-0414, GLM-Z1"),
    "glm4_moe": _family(
        _llama_like(adjust=_with_qk_norm(_qk_norm(), "use_qk_norm")),
        "Glm4MoeForCausalLM",
        "GLM-4.5, GLM-4.6",
        variants="qk-norm with use_qk_norm",
    ),
    "seed_oss": _family(_llama_like(), "SeedOssForCausalLM", "Seed-OSS"),
    "ernie4_5": _family(_llama_like(rope_pairs="interleaved"), "Ernie4_5ForCausalLM", "ERNIE 4.5 (dense)"),
    "ernie4_5_moe": _family(
        _llama_like(rope_pairs="interleaved"), "Ernie4_5_MoeForCausalLM", "ERNIE 4.5 MoE"
    ),
    "hunyuan_v1_dense": _hunyuan("HunYuanDenseV1ForCausalLM", "Hunyuan dense"),
    "hunyuan_v1_moe": _hunyuan("HunYuanMoEV1ForCausalLM", "Hunyuan-A13B"),
    "granite": _family(_llama_like(), "GraniteForCausalLM", "Granite 3"),
    "granitemoe": _family(_llama_like(), "GraniteMoeForCausalLM", "Granite 3 MoE"),
    "granitemoeshared": _family(_llama_like(), "GraniteMoeSharedForCausalLM", "Granite MoE (shared experts)"),
    "olmo3": _family(_olmo2_like(), "Olmo3ForCausalLM", "OLMo 3"),
    "flex_olmo": _family(_olmo2_like(), "FlexOlmoForCausalLM", "FlexOlmo"),
    "olmoe": _family(
        _llama_like(qk_norm=_qk_norm(scope="projection")),
        "OlmoeForCausalLM",
        "OLMoE",
        "an OLMoE with clip_qkv clamps q and k entrywise (not linear): the form is the unclamped one",
    ),
    "minimax_m2": _family(
        _llama_like(qk_norm=_qk_norm(scope="projection")), "MiniMaxM2ForCausalLM", "MiniMax-M2"
    ),
    "exaone4": _family(
        _llama_like(norm=None, qk_norm=_qk_norm(), adjust=_exaone4_adjust),
        "Exaone4ForCausalLM",
        "EXAONE 4.0",
        "with a sliding window the global layers have no positions (NoPE): positional none there",
    ),
    "exaone_moe": _family(_llama_like(qk_norm=_qk_norm()), "ExaoneMoeForCausalLM", "K-EXAONE"),
    "helium": _family(_llama_like(rope_pairs="interleaved"), "HeliumForCausalLM", "Helium"),
    "arcee": _family(_llama_like(), "ArceeForCausalLM", "Arcee AFM"),
    "ministral": _family(_llama_like(), "MinistralForCausalLM", "Ministral"),
    "ministral3": _family(_llama_like(), "Ministral3ForCausalLM", "Ministral 3"),
    "qwen2_moe": _family(_llama_like(), "Qwen2MoeForCausalLM", "Qwen1.5 MoE, Qwen2 MoE"),
    "phimoe": _family(_llama_like(), "PhimoeForCausalLM", "Phi-3.5-MoE"),
    "olmo": _family(
        # OLMo 1's layer norms have no learned gain: nothing to fold.
        _llama_like(norm=None),
        "OlmoForCausalLM",
        "OLMo",
    ),
    "nemotron": _family(_llama_like(norm_offset=1.0), "NemotronForCausalLM", "Nemotron-4, Minitron"),
    "cwm": _family(_llama_like(), "CwmForCausalLM", "Code World Model"),
    "vaultgemma": _family(_llama_like(norm_offset=1.0), "VaultGemmaForCausalLM", "VaultGemma"),
    "solar_open": _family(_llama_like(), "SolarOpenForCausalLM", "Solar Open"),
    "hy_v3": _family(_llama_like(qk_norm=_qk_norm()), "HYV3ForCausalLM", "Hunyuan V3"),
    "apertus": _family(
        _llama_like(norm="layers.{i}.attention_layernorm.weight", qk_norm=_qk_norm()),
        "ApertusForCausalLM",
        "Apertus",
    ),
    "afmoe": _family(
        _llama_like(qk_norm=_qk_norm()),
        "AfmoeForCausalLM",
        "Trinity (AFMoE)",
        "the output gate (its own gate_proj) does not enter the scores",
    ),
    "laguna": _family(
        _llama_like(qk_norm=_qk_norm()),
        "LagunaForCausalLM",
        "Laguna",
        "the output gate (its own g_proj) does not enter the scores",
    ),
    "deepseek_v2": _family(
        _mla(rope_pairs="interleaved"),
        "DeepseekV2ForCausalLM",
        "DeepSeek-V2, DeepSeek-V2-Lite, DeepSeek-Coder-V2",
        _MLA_NOTE,
        _MLA_VARIANTS,
    ),
    "deepseek_v32": _family(
        _mla(rope_pairs="interleaved"),
        "DeepseekV32ForCausalLM",
        "DeepSeek-V3.2",
        "latent attention, as deepseek_v3; the lightning indexer that picks the keys each query attends "
        "to is a separate score, not the heads' form, and is not read",
    ),
    "glm4_moe_lite": _family(_mla(), "Glm4MoeLiteForCausalLM", "GLM-4.7-Flash", _MLA_NOTE),
    "youtu": _family(_mla(), "YoutuForCausalLM", "Youtu-LLM", _MLA_NOTE),
    # ------------------------------------------------------------------ towers, vision, audio
    "siglip": _family((_clip_tower("text"), _clip_tower("vision")), "SiglipModel", "SigLIP", _TOWER_POOLING),
    "siglip2": _family(
        (_clip_tower("text"), _clip_tower("vision")), "Siglip2Model", "SigLIP 2", _TOWER_POOLING
    ),
    "gemma3": _family(
        _towers(_llama_like(norm_offset=1.0, qk_norm=_qk_norm(offset=1.0)), _tower_alone("vision")),
        "Gemma3ForConditionalGeneration",
        "Gemma 3 (multimodal: 4B, 12B, 27B), MedGemma",
        "two towers: the Gemma 3 text decoder and the SigLIP vision encoder (the projector has no attention)",
    ),
    "dinov3_vit": _family(
        Layout(
            **_qk("layer.{i}.attention."),
            norm="layer.{i}.norm1.weight",
            positional="rope_2d",
        ),
        "DINOv3ViTModel",
        "DINOv3 (ViT)",
        "2-D RoPE over patch rows and columns: the form read is the one at offset (0, 0); the class and "
        "register tokens are not rotated",
    ),
    "modernbert-decoder": _family(
        _modernbert(**_qk("layers.{i}.attn.")),
        "ModernBertDecoderForCausalLM",
        "ModernBERT decoder (Ettin)",
    ),
    "wav2vec2": _family(
        _speech_encoder(), "Wav2Vec2Model", "wav2vec 2.0, XLS-R, MMS", _SPEECH_NOTE, _SPEECH_VARIANTS
    ),
    "hubert": _family(_speech_encoder(), "HubertModel", "HuBERT", _SPEECH_NOTE, _SPEECH_VARIANTS),
    "llama4_text": _family(_llama4_text(), "Llama4ForCausalLM", "Llama 4 (text)", _LLAMA4_NOTE),
    "unispeech": _family(_speech_encoder(), "UniSpeechModel", "UniSpeech", _SPEECH_NOTE, _SPEECH_VARIANTS),
    "unispeech-sat": _family(
        _speech_encoder(), "UniSpeechSatModel", "UniSpeech-SAT", _SPEECH_NOTE, _SPEECH_VARIANTS
    ),
    "data2vec-audio": _family(_speech_encoder(), "Data2VecAudioModel", "data2vec (audio)", _SPEECH_NOTE),
    # encoders laid out as BERT, ViT and DINOv2
    "camembert": _family(_bert_like(), "CamembertModel", "CamemBERT"),
    "data2vec-text": _family(_bert_like(), "Data2VecTextModel", "data2vec (text)"),
    "ernie": _family(_bert_like(), "ErnieModel", "ERNIE 1.0-3.0"),
    "roberta-prelayernorm": _family(
        _bert_pre_norm("LayerNorm"), "RobertaPreLayerNormModel", "RoBERTa-PreLayerNorm"
    ),
    "megatron-bert": _family(_bert_pre_norm("ln"), "MegatronBertModel", "Megatron-BERT"),
    "deit": _family(_vit_like("layernorm_before"), "DeiTModel", "DeiT"),
    "vit_mae": _family(_vit_like("layernorm_before"), "ViTMAEModel", "ViT-MAE"),
    "vit_msn": _family(_vit_like("layernorm_before"), "ViTMSNModel", "ViT-MSN"),
    "ijepa": _family(_vit_like("layernorm_before"), "IJepaModel", "I-JEPA"),
    "dinov2_with_registers": _family(_vit_like("norm1"), "Dinov2WithRegistersModel", "DINOv2 with registers"),
    # multimodal decoders: the text stack and the vision tower
    "qwen2_5_vl": _qwen_vl(
        "Qwen2_5_VLForConditionalGeneration", "Qwen2.5-VL", _llama_like(), _QWEN_WINDOWS_NOTE
    ),
    "qwen2_5_vl_text": _family(
        _llama_like(), "Qwen2_5_VLTextModel", "Qwen2.5-VL (text tower alone)", _MROPE_NOTE
    ),
    "qwen3_vl": _qwen_vl(
        "Qwen3VLForConditionalGeneration", "Qwen3-VL", _llama_like(qk_norm=_qk_norm()), _QWEN3_DEEPSTACK_NOTE
    ),
    "qwen3_vl_text": _family(
        _llama_like(qk_norm=_qk_norm()), "Qwen3VLTextModel", "Qwen3-VL (text tower alone)", _MROPE_NOTE
    ),
    "qwen3_5": _qwen_vl(
        "Qwen3_5ForConditionalGeneration", "Qwen3.5", _qwen3_next(), _QWEN3_VISION_NOTE, _QWEN3_5_NOTE
    ),
    "qwen3_5_text": _family(
        _qwen3_next(section_optional=True), "Qwen3_5ForCausalLM", "Qwen3.5 (text)", _QWEN3_5_NOTE
    ),
    "qwen3_5_moe": _qwen_vl(
        "Qwen3_5MoeForConditionalGeneration", "Qwen3.5 MoE", _qwen3_next(), _QWEN3_VISION_NOTE, _QWEN3_5_NOTE
    ),
    "qwen3_5_moe_text": _family(
        _qwen3_next(section_optional=True), "Qwen3_5MoeForCausalLM", "Qwen3.5 MoE (text)", _QWEN3_5_NOTE
    ),
    "mistral3": _family(
        _towers(_llama_like(), _pixtral()),
        "Mistral3ForConditionalGeneration",
        "Mistral Small 3.1 / 3.2, Magistral Small",
        "two towers: the Mistral text decoder and the Pixtral vision encoder, whose 2-D RoPE over "
        "patch rows and columns makes its form the one at offset (0, 0)",
    ),
    "llama4": _family(
        _towers(_llama4_text(), _llama4_vision(), ("language_model", "vision_model")),
        "Llama4ForConditionalGeneration",
        "Llama 4 Scout, Maverick",
        _LLAMA4_NOTE + "; two towers: the text decoder and the vision encoder, whose 2-D RoPE (on "
        "interleaved pairs, over patch columns and rows; the class token is not rotated) makes its form the "
        "one at offset (0, 0)",
    ),
    # ----------------------------------------------------------------------------- hybrids
    "qwen3_next": _family(
        _qwen3_next(),
        "Qwen3NextForCausalLM",
        "Qwen3-Next",
        _QWEN3_5_NOTE + ", which does not enter the form",
    ),
    "lfm2": _lfm2("Lfm2ForCausalLM", "LFM2"),
    "falcon_h1": _family(
        _llama_like(),
        "FalconH1ForCausalLM",
        "Falcon-H1",
        "every layer runs attention and a Mamba-2 mixer in parallel: the rows are the attention heads; "
        "the constant key and input multipliers scale all scores of a layer and are not part of L",
    ),
    "jamba": _family(
        _llama_like(
            positional="none",
            attention_layers=(
                LayerPattern("layer_types", members=("attention",)),
                LayerPattern("attn_layer_period", kind="period", offset_key="attn_layer_offset"),
            ),
        ),
        "JambaForCausalLM",
        "Jamba",
        "hybrid: rows for the attention layers only (one in attn_layer_period; the others are Mamba); "
        "no position embedding at all",
    ),
    "nemotron_h": _family(
        _llama_like(
            **_qk("layers.{i}.mixer."),
            norm="layers.{i}.norm.weight",
            layers_keys=("num_hidden_layers", "layers_block_type"),  # a list counts its layers
            positional="none",
            attention_layers=(
                LayerPattern("layers_block_type", members=("attention", "full_attention")),
                LayerPattern("hybrid_override_pattern", members=("*",)),
            ),
        ),
        "NemotronHForCausalLM",
        "Nemotron-H, Nemotron Nano 2",
        "hybrid: rows for the attention layers only (the others are Mamba-2 and MLP layers); "
        "no position embedding at all",
    ),
    "minimax": _family(
        _llama_like(attention_layers=(_FULL_ATTENTION,)),
        "MiniMaxForCausalLM",
        "MiniMax-Text-01",
        "hybrid: rows for the softmax-attention layers only (the others are lightning linear attention)",
    ),
    "granitemoehybrid": _family(
        _llama_like(
            attention_layers=(LayerPattern("layer_types", members=("attention", "full_attention")),),
            adjust=_granite_hybrid_adjust,
        ),
        "GraniteMoeHybridForCausalLM",
        "Granite 4.0-H",
        "hybrid: rows for the attention layers only (the others are Mamba-2); no positions unless "
        "position_embedding_type is rope",
        "rope with position_embedding_type rope",
    ),
    "bamba": _family(
        _llama_like(attention_layers=(LayerPattern("attn_layer_indices", kind="indices"),)),
        "BambaForCausalLM",
        "Bamba",
        "hybrid: rows for the attention layers only (attn_layer_indices; the others are Mamba-2)",
    ),
    "kimi_linear": _family(
        _mla(
            positional="none",
            attention_layers=(
                _FULL_ATTENTION,
                LayerPattern("linear_attn_config.full_attn_layers", kind="indices", base=1),
            ),
        ),
        "KimiLinearForCausalLM",
        "Kimi Linear",
        "hybrid: rows for the latent-attention (MLA) layers only, which have no positions (NoPE); "
        "the Kimi Delta Attention layers are linear attention",
    ),
    # --------------------------------------------- issue 18, second round: towers saved on their own
    "clip_text_model": _family(_tower_alone("text"), "CLIPTextModel", "CLIP text encoder"),
    "clip_vision_model": _family(_tower_alone("vision"), "CLIPVisionModel", "CLIP vision encoder"),
    "siglip_text_model": _family(_tower_alone("text"), "SiglipTextModel", "SigLIP text encoder"),
    "siglip_vision_model": _family(
        _tower_alone("vision"), "SiglipVisionModel", "SigLIP vision encoder", _POOLING_NOTE
    ),
    "siglip2_text_model": _family(_tower_alone("text"), "Siglip2TextModel", "SigLIP 2 text encoder"),
    "siglip2_vision_model": _family(
        _tower_alone("vision"), "Siglip2VisionModel", "SigLIP 2 vision encoder", _POOLING_NOTE
    ),
    "metaclip_2": _family((_clip_tower("text"), _clip_tower("vision")), "MetaClip2Model", "MetaCLIP 2"),
    "metaclip_2_text_model": _family(_tower_alone("text"), "MetaClip2TextModel", "MetaCLIP 2 text encoder"),
    "metaclip_2_vision_model": _family(
        _tower_alone("vision"), "MetaClip2VisionModel", "MetaCLIP 2 vision encoder"
    ),
    "qwen2_5_vl_vision": _qwen_vision_alone(
        "Qwen2_5_VisionTransformerPretrainedModel", "Qwen2.5-VL vision encoder", _QWEN_WINDOWS_NOTE
    ),
    "qwen3_vl_vision": _qwen_vision_alone("Qwen3VLVisionModel", "Qwen3-VL vision encoder"),
    "qwen3_5_vision": _qwen_vision_alone("Qwen3_5VisionModel", "Qwen3.5 vision encoder"),
    "qwen3_5_moe_vision": _qwen_vision_alone("Qwen3_5MoeVisionModel", "Qwen3.5 MoE vision encoder"),
    "llama4_vision_model": _family(
        _llama4_vision(),
        "Llama4VisionModel",
        "Llama 4 vision encoder",
        "2-D RoPE (interleaved pairs, over patch columns and rows; the class token is not rotated): the "
        "form read is the one at offset (0, 0)",
    ),
    "pixtral": _family(
        _pixtral(),
        "PixtralVisionModel",
        "Pixtral vision encoder",
        "2-D RoPE over patch rows and columns: the form read is the one at offset (0, 0)",
    ),
    # ------------------------------------------------------------- issue 18, second round: decoders
    "gpt_bigcode": _family(
        _gpt2_like(adjust=_bigcode_adjust),
        "GPTBigCodeForCausalLM",
        "StarCoder, SantaCoder, GPT-BigCode",
        "multi-query: one key head shared by every query head",
        "multi-head (c_attn per head) without multi_query",
    ),
    "openai-gpt": _family(
        # Post-norm: layer i reads layer i-1's ln_2; the embeddings feeding layer 0 are not normed.
        _gpt2_like(storage="conv1d", norm="h.{i}.ln_2.weight", post_norm=True),
        "OpenAIGPTLMHeadModel",
        "GPT (OpenAI GPT-1)",
    ),
    "xglm": _family(
        _opt_like(**_sizes("attention_heads", "d_model", "num_layers")),
        "XGLMForCausalLM",
        "XGLM",
        "sinusoidal positions added to the embeddings (absolute)",
    ),
    "biogpt": _family(_opt_like(), "BioGptForCausalLM", "BioGPT"),
    "persimmon": _family(
        _neox_like("self_attn", adjust=_QK_LAYERNORM),
        "PersimmonForCausalLM",
        "Persimmon, Fuyu's decoder",
        variants=_QK_LAYERNORM_VARIANTS,
    ),
    "bitnet": _family(
        _llama_like(),
        "BitNetForCausalLM",
        "BitNet b1.58",
        "the norm after attention (attn_sub_norm, before o_proj) does not enter the scores; ternary "
        "checkpoints are read as stored",
    ),
    "nanochat": _family(
        # Its RMSNorms have no learned gains: nothing to fold, and the qk-norm is a per-token factor.
        # Its rotate_half is cat(x2, -x1): the rotation turns the other way, so only the form at
        # offset 0 is the standard one (proved at position 0, as for a qk-norm after RoPE).
        _llama_like(norm=None, qk_norm=QKNorm(None, None, after_rope=True)),
        "NanoChatForCausalLM",
        "nanochat",
        "RMSNorms without gains (inputs and q, k after RoPE): per-token factors, the form is unchanged; "
        "its RoPE turns the opposite way, so with --rope-offsets the row at offset d is nanochat's form "
        "at offset -d (offset 0 is exact)",
    ),
    "minicpm3": _family(_mla(), "MiniCPM3ForCausalLM", "MiniCPM3", "latent attention, as deepseek_v3"),
    "lfm2_moe": _lfm2("Lfm2MoeForCausalLM", "LFM2-MoE"),
    # ------------------------------------------ issue 18, second round: vision-language wrappers
    "llava": _wrapper(
        "LlavaForConditionalGeneration", "LLaVA 1.5, BakLLaVA, Pixtral 12B (llava with a pixtral tower)"
    ),
    "vipllava": _wrapper("VipLlavaForConditionalGeneration", "ViP-LLaVA"),
    "paligemma": _wrapper(
        "PaliGemmaForConditionalGeneration", "PaliGemma, PaliGemma 2", _llama_like(norm_offset=1.0)
    ),
    "aya_vision": _wrapper("AyaVisionForConditionalGeneration", "Aya Vision", _cohere2_text()),
    "qwen2_vl": _qwen_vl(
        "Qwen2VLForConditionalGeneration",
        "Qwen2-VL",
        _llama_like(),
        vision=dataclasses.replace(_qwen_vision(), hidden_keys=("embed_dim",)),
    ),
    "qwen2_vl_text": _family(_llama_like(), "Qwen2VLTextModel", "Qwen2-VL (text tower alone)", _MROPE_NOTE),
    "qwen3_vl_moe": _qwen_vl(
        "Qwen3VLMoeForConditionalGeneration",
        "Qwen3-VL MoE",
        _llama_like(qk_norm=_qk_norm()),
        _QWEN3_DEEPSTACK_NOTE,
    ),
    "qwen3_vl_moe_text": _family(
        _llama_like(qk_norm=_qk_norm()), "Qwen3VLMoeTextModel", "Qwen3-VL MoE (text tower alone)", _MROPE_NOTE
    ),
    "qwen3_vl_moe_vision": _qwen_vision_alone("Qwen3VLMoeVisionModel", "Qwen3-VL MoE vision encoder"),
    # -------------------------------------------------------------- issue 18, second round: encoders
    "xlm-roberta-xl": _family(
        _bert_pre_norm("self_attn_layer_norm"),
        "XLMRobertaXLModel",
        "XLM-RoBERTa XL, XXL",
        "pre-norm (attention.self_attn_layer_norm feeds attention)",
    ),
    "eurobert": _family(_llama_like(), "EuroBertModel", "EuroBERT", "bidirectional: no causal mask"),
    "splinter": _family(_bert_like(), "SplinterModel", "Splinter"),
    "rembert": _family(
        _bert_like(first_norm=None),
        "RemBertModel",
        "RemBERT",
        "the normed input embeddings are projected up before layer 0: no norm feeds it directly",
    ),
    "layoutlm": _family(
        _bert_like(),
        "LayoutLMModel",
        "LayoutLM",
        "2-D box position embeddings are added to the embeddings (absolute)",
    ),
    "markuplm": _family(
        _bert_like(),
        "MarkupLMModel",
        "MarkupLM",
        "XPath embeddings are added to the embeddings (absolute)",
    ),
    "mpnet": _family(
        _bert_like(**_qk("encoder.layer.{i}.attention.attn.", "q", "k"), positional="relative_bias"),
        "MPNetModel",
        "MPNet, all-mpnet-base-v2",
        "a learned relative position bias (shared by the layers) is added to the scores, and absolute "
        "position embeddings to the input: neither is part of L",
    ),
    "data2vec-vision": _family(
        _vit_like("layernorm_before", adjust=_beit_adjust),
        "Data2VecVisionModel",
        "data2vec (vision)",
        variants=_BEIT_VARIANTS,
    ),
    "beit": _family(
        _vit_like("layernorm_before", adjust=_beit_adjust), "BeitModel", "BEiT", variants=_BEIT_VARIANTS
    ),
    # ------------------------------------------------------ issue 18, second round: encoder-decoders
    "mbart": _family(_seq2seq_stacks(post_norm=False), "MBartForConditionalGeneration", "mBART, mBART-50"),
    "pegasus": _family(_seq2seq_stacks(post_norm=False), "PegasusForConditionalGeneration", "PEGASUS"),
    "m2m_100": _family(
        _seq2seq_stacks(post_norm=False), "M2M100ForConditionalGeneration", "M2M-100, NLLB-200 (dense)"
    ),
    "blenderbot": _family(
        _seq2seq_stacks(post_norm=False), "BlenderbotForConditionalGeneration", "BlenderBot"
    ),
    "blenderbot-small": _family(
        _seq2seq_stacks(post_norm=True, unnormed=("decoder",)),
        "BlenderbotSmallForConditionalGeneration",
        "BlenderBot small",
        "the decoder adds its positions after the embeddings norm: no norm feeds its layer 0 directly",
    ),
    "plbart": _family(_seq2seq_stacks(post_norm=True), "PLBartForConditionalGeneration", "PLBART"),
    "marian": _family(
        _seq2seq_stacks(post_norm=True, unnormed=("encoder", "decoder")),
        "MarianMTModel",
        "Marian (opus-mt)",
        _UNNORMED_NOTE,
    ),
    # ------------------------------------------------- issue 18, second round: more llama-like decoders
    "aria_text": _family(_llama_like(), "AriaTextForCausalLM", "Aria (text decoder)"),
    "granite_swa": _family(_llama_like(), "GraniteSWAForCausalLM", "Granite (sliding window)"),
    "granitemoe_swa": _family(_llama_like(), "GraniteMoeSWAForCausalLM", "Granite MoE (sliding window)"),
    "internlm3": _family(_llama_like(), "LlamaForCausalLM", "InternLM3"),
    "iquestcoder": _family(_llama_like(), "LlamaForCausalLM", "IQuest-Coder"),
    "jais2": _family(_llama_like(), "Jais2ForCausalLM", "Jais 2"),
    "exaone": _family(
        _llama_like(
            **_qk("h.{i}.attn.attention."),
            norm="h.{i}.ln_1.weight",
            layers_keys=("num_layers", "num_hidden_layers"),
        ),
        "LlamaForCausalLM",
        "EXAONE 3, 3.5",
        "a Llama decoder under EXAONE's names (transformer.h.{i}.attn.attention)",
    ),
    "hyperclovax": _family(
        _llama_like(),
        "HyperCLOVAXForCausalLM",
        "HyperCLOVA X",
        "the norms after each sublayer (post_norm1, post_norm2) act on outputs, not on attention's input",
    ),
    "flint": _family(
        _llama_like(qk_norm=_qk_norm(), adjust=_sliding_rope_adjust),
        "FlintForCausalLM",
        "Flint",
        "only the sliding-window layers rotate; the full-attention layers have no positions (NoPE)",
    ),
    "mellum": _family(_llama_like(qk_norm=_qk_norm()), "MellumForCausalLM", "Mellum"),
    "kolibri1": _family(_llama_like(qk_norm=_qk_norm()), "Kolibri1ForCausalLM", "Kolibri 1"),
    "sarvam_mla": _family(
        _mla(), "DeepseekV3ForCausalLM", "Sarvam (MLA)", "latent attention, as deepseek_v3"
    ),
    "axk1": _family(_mla(), "AXK1ForCausalLM", "A.X K1", "latent attention, as deepseek_v3"),
    "bert-generation": _family(_bert_like(first_norm=None), "BertGenerationDecoder", "BertGeneration"),
    "roc_bert": _family(_bert_like(), "RoCBertForCausalLM", "RoCBert"),
    "xmod": _family(
        _bert_like(),
        "XmodForCausalLM",
        "X-MOD",
        "the per-language adapters sit in the feed-forward blocks, outside attention",
    ),
    # ---------------------------------------------- issue 18, second round: disentangled attention
    "deberta": _family(
        _bert_like(
            query="encoder.layer.{i}.attention.self.in_proj.weight",
            key=None,
            storage="interleaved",
            positional="relative_bias",
        ),
        "DebertaModel",
        "DeBERTa",
        "disentangled attention: the form read is the content-to-content term (in_proj holds each head's "
        "q, k, v rows in turn); the content-to-position and position-to-content terms are not part of L",
    ),
    "deberta-v2": _family(
        _bert_like(
            **_qk("encoder.layer.{i}.attention.self.", "query_proj", "key_proj"),
            positional="relative_bias",
        ),
        "DebertaV2Model",
        "DeBERTa-v2, DeBERTa-v3",
        "disentangled attention: the form read is the content-to-content term; the content-to-position "
        "and position-to-content terms (each linear in one token, against relative position embeddings) "
        "are added to it and are not part of L",
    ),
    # ---------------------------------------- issue 18, second round: more text and vision towers
    "glm4v_text": _family(
        _llama_like(rope_pairs="interleaved"), "Glm4vTextModel", "GLM-4.1V (text decoder)", _MROPE_NOTE
    ),
    "glm_ocr_text": _family(
        _llama_like(rope_pairs="interleaved"), "GlmOcrTextModel", "GLM-OCR (text decoder)", _MROPE_NOTE
    ),
    "glm4v_moe_text": _family(_llama_like(), "Glm4vMoeTextModel", "GLM-4.5V (text decoder)", _MROPE_NOTE),
    "glm_image_text": _family(_llama_like(), "GlmImageTextModel", "GLM-Image (text decoder)", _MROPE_NOTE),
    "apertus1p5_text": _family(
        _llama_like(norm="layers.{i}.attention_layernorm.weight", qk_norm=_qk_norm()),
        "Apertus1p5TextModel",
        "Apertus 1.5 (text decoder)",
    ),
    "granite_docling_text": _family(
        _llama_like(), "GraniteDoclingTextModel", "Granite-Docling (text decoder)"
    ),
    "chinese_clip": _family(
        (_bert_like(stack="text", config_section="text_config"), _clip_tower("vision")),
        "ChineseCLIPModel",
        "Chinese-CLIP",
        "two towers: a BERT text encoder (post-norm) and a CLIP vision encoder",
    ),
    "chinese_clip_text_model": _family(
        _bert_like(stack="text"), "ChineseCLIPTextModel", "Chinese-CLIP text encoder"
    ),
    "chinese_clip_vision_model": _family(
        _tower_alone("vision"), "ChineseCLIPVisionModel", "Chinese-CLIP vision encoder"
    ),
    "idefics3_vision": _family(
        _tower_alone("vision"), "Idefics3VisionTransformer", "Idefics3 vision encoder (SigLIP-like)"
    ),
    "smolvlm_vision": _family(_tower_alone("vision"), "SmolVLMVisionTransformer", "SmolVLM vision encoder"),
    "idefics3": _wrapper(
        "Idefics3ForConditionalGeneration", "Idefics3", within=("text_model", "vision_model")
    ),
    "smolvlm": _wrapper(
        "SmolVLMForConditionalGeneration", "SmolVLM, SmolVLM2", within=("text_model", "vision_model")
    ),
    "cohere2_moe": _family(
        _cohere2_text(adjust=_cohere2_moe_adjust),
        "Cohere2MoeModel",
        "Command A MoE",
        "as cohere2: the global (full attention) layers have no positions (NoPE)",
    ),
    # -------------------------------------------------- issue 18, second round: T5-like seq2seq
    "umt5": _family(
        _t5_stacks(),
        "UMT5ForConditionalGeneration",
        "UMT5",
        "as t5, with a relative position bias of its own in every layer (added, not part of L)",
    ),
    "switch_transformers": _family(
        _t5_stacks(),
        "SwitchTransformersForConditionalGeneration",
        "Switch Transformers",
        "as t5; the mixture-of-experts feed-forward layers do not touch attention",
    ),
    "pop2piano": _family(_t5_stacks(), "Pop2PianoForConditionalGeneration", "Pop2Piano"),
    "qwen2_audio_encoder": _audio_encoder("Qwen2AudioEncoder", "Qwen2-Audio audio encoder"),
    "voxtral_encoder": _audio_encoder("VoxtralEncoder", "Voxtral audio encoder"),
    "speech_to_text": _family(
        _seq2seq_stacks(post_norm=False),
        "Speech2TextForConditionalGeneration",
        "Speech2Text (S2T)",
        "as whisper: the convolutional subsampler before the encoder has no attention",
    ),
    "mvp": _family(
        _seq2seq_stacks(post_norm=True),
        "MvpForConditionalGeneration",
        "MVP",
        "as bart; with use_prompt the learned prompt vectors prepended to the keys are not tokens of "
        "the input and are not part of L",
    ),
    "fsmt": _family(
        _seq2seq_stacks(post_norm=True, unnormed=("encoder", "decoder")),
        "FSMTForConditionalGeneration",
        "FSMT (WMT19 translation)",
        _UNNORMED_NOTE,
    ),
    # ------------------------------------ per-layer shapes, KV sharing, shared blocks, more hybrids
    "gemma4_text": _family(_gemma4_text(), "Gemma4ForCausalLM", "Gemma 4 (text)", _GEMMA4_NOTE),
    "gemma4": _family(
        _towers(_gemma4_text(), _gemma4_vision()),
        "Gemma4ForConditionalGeneration",
        "Gemma 4 (E2B, E4B, 26B A4B, 31B)",
        _GEMMA4_NOTE + "; two towers read: the text decoder and the vision encoder (2-D RoPE: "
        "the form at offset (0, 0)); the audio encoder is not read",
    ),
    "wavlm": _family(
        _speech_encoder(),
        "WavLMModel",
        "WavLM",
        _SPEECH_NOTE + "; a gated relative position bias (a learned bias per offset, scaled by a gate "
        "computed from the query token) is added to the scores: it never involves the key's content "
        "and is not part of the form",
        _SPEECH_VARIANTS,
    ),
    "diffllama": _family(
        _llama_like(),
        "DiffLlamaForCausalLM",
        "DiffLlama (differential attention)",
        "differential attention: query heads h and h + H/2 are one pair whose two softmax maps are "
        "subtracted after the softmax (the first minus lambda times the second); each map is an ordinary "
        "head's softmax of its own bilinear form, one row per query head",
    ),
    "recurrent_gemma": _family(
        _llama_like(
            **_qk("layers.{i}.temporal_block."),
            norm="layers.{i}.temporal_pre_norm.weight",
            norm_offset=1.0,
            head_dim_key=None,
            attention_layers=(LayerPattern("block_types", kind="cycle", members=("attention",)),),
        ),
        "RecurrentGemmaForCausalLM",
        "RecurrentGemma (Griffin)",
        "hybrid: rows for the local-attention blocks only (block_types, repeated over the layers); the "
        "others are RG-LRU recurrent blocks",
    ),
    "zamba": _family(
        _llama_like(
            **_qk("layers.{i}.shared_transf.self_attn."),
            norm="layers.{i}.shared_transf.input_layernorm.weight",
            hidden_keys=("attention_hidden_size",),
            head_dim_key="attention_head_dim",
            positional="none",
            attention_layers=(LayerPattern("layers_block_type", kind="first", members=("hybrid",)),),
        ),
        "ZambaForCausalLM",
        "Zamba",
        "one attention block, its weights shared by every hybrid layer of layers_block_type (the others "
        "are Mamba layers): its form is the same at each application and is read once, at the first "
        "hybrid layer; its input is the concatenation of the layer's hidden state and the token "
        "embeddings (N = attention_hidden_size = 2 hidden_size); no positions",
    ),
    "gemma4_unified_text": _family(
        _gemma4_text(), "Gemma4UnifiedForCausalLM", "Gemma 4 unified (text)", _GEMMA4_NOTE
    ),
    "gemma4_unified": _family(
        _gemma4_text(config_section="text_config", within="language_model"),
        "Gemma4UnifiedForConditionalGeneration",
        "Gemma 4 unified (encoder-free multimodal)",
        _GEMMA4_NOTE + "; images and audio enter through embedders without attention: the text "
        "decoder is the only attention stack",
    ),
    "embedding_gemma2_text": _family(
        _embedding_gemma2_text(),
        "EmbeddingGemma2TextModel",
        "EmbeddingGemma 2 (text)",
        _EMBEDDING_GEMMA2_NOTE,
    ),
    "embedding_gemma2": _family(
        _towers(_embedding_gemma2_text(), _gemma4_vision()),
        "EmbeddingGemma2Model",
        "EmbeddingGemma 2",
        _EMBEDDING_GEMMA2_NOTE + "; the Gemma 4 vision encoder, when the checkpoint has it, is read "
        "as gemma4's (the audio encoder is not read)",
    ),
    "zamba2": _family(
        _llama_like(
            **_qk(_ZAMBA2_BLOCK + "self_attn."),
            norm=_ZAMBA2_BLOCK + "input_layernorm.weight",
            hidden_keys=("attention_hidden_size",),
            head_dim_key="attention_head_dim",
            positional="none",
            attention_layers=(LayerPattern("layers_block_type", members=("hybrid",)),),
            shared_blocks=SharedBlocks(query_adapter=_zamba2_adapter("q"), key_adapter=_zamba2_adapter("k")),
            adjust=_zamba2_adjust,
        ),
        "Zamba2ForCausalLM",
        "Zamba2",
        "num_mem_blocks attention blocks shared by the hybrid layers (block k mod num_mem_blocks at the "
        "k-th), stored under each block's first layer; with use_shared_attention_adapter every application "
        "adds its own low-rank adapter to W_Q and W_K (its own form, one row set per hybrid layer), without "
        "it the applications of one block repeat its form; the input is the hidden state and the token "
        "embeddings concatenated (N = attention_hidden_size); RoPE only with use_mem_rope",
        "rope with use_mem_rope",
    ),
    "mimo_v2_flash": _family(
        _llama_like(
            layer_shapes=(LayerShape(_SLIDING_ATTENTION, kv_heads_factor=2),),
        ),
        "MiMoV2FlashForCausalLM",
        "MiMo-V2-Flash",
        "sliding-window layers have twice the key heads of the full layers, and a learned sink logit per "
        "head (not part of the form)",
    ),
}


def supported_model_types() -> list[str]:
    """The config.json ``model_type`` values qkenergy can read.

    Returns
    -------
    list of str
        Sorted.
    """
    return sorted(FAMILIES)


LAYOUT_COLUMNS: tuple[str, ...] = (
    "model_type",
    "models",
    "stacks",
    "positional",
    "qk_norm",
    "variants",
    "proven by",
)


def describe_families(families: Mapping[str, Family] | None = None) -> list[dict[str, str]]:
    """One row per supported ``model_type``: what `qkenergy layouts` lists (columns LAYOUT_COLUMNS).

    ``stacks`` is "-" for single-stack models; ``positional`` lists each stack's kind
    (the default variant where the config can choose); ``proven by`` names the
    transformers class whose attention scores the layout reproduces.

    Parameters
    ----------
    families : mapping of str to Family or None
        The families to list; None for the ones qkenergy ships.

    Returns
    -------
    list of dict of str to str
        Sorted by ``model_type``, one key per column.
    """
    rows = []
    for model_type, family in sorted((families or FAMILIES).items()):
        stacks = [layout.stack for layout in family.stacks]
        positional = list(dict.fromkeys(layout.positional for layout in family.stacks))
        qk = any(layout.qk_norm is not None or layout.latent is not None for layout in family.stacks)
        rows.append(
            {
                "model_type": model_type,
                "models": family.models,
                "stacks": ", ".join(stacks) if any(stacks) else "-",
                "positional": ", ".join(positional),
                "qk_norm": "yes" if qk else "no",
                "variants": family.variants,
                "proven by": f"transformers {family.proof}" if family.proof else "not proven",
            }
        )
    return rows
