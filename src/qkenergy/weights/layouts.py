"""Declarative architecture layouts: where each head's W_Q, W_K live in a checkpoint.

A :class:`Family` (one config.json ``model_type``) has one :class:`Layout` per
attention stack (encoder, decoder and cross-attention of t5; text and vision
towers of clip; a single unnamed stack for most models). A layout says which
config.json keys give the sizes, the names of the query/key tensors relative to
a layer (``{i}`` is the layer index, the checkpoint's own name prefix such as
``model.`` is found at read time), how Q and K are stored, which norm's gain
feeds attention (for the fold-norm option), how positions enter, and any
qk-norm or latent projections folded into the form. Adding a family is a few
declarative lines in :data:`FAMILIES`.

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
from qkenergy.weights.json_input import get_bool, get_int, get_str, show_name

__all__ = [
    "FAMILIES",
    "LAYOUT_COLUMNS",
    "POSITIONAL",
    "STACKS",
    "Architecture",
    "Family",
    "LatentAttention",
    "LayerWeights",
    "Layout",
    "QKNorm",
    "TensorReader",
    "architecture",
    "architectures",
    "describe_families",
    "family_of",
    "find_prefix",
    "layer_tensors",
    "read_layer",
    "supported_model_types",
]

Storage = Literal["separate", "stacked", "conv1d", "interleaved", "grouped", "latent"]
"""How Q and K are stored:

- ``separate``: one ``[H*n, N]`` query weight and one ``[H_kv*n, N]`` key weight.
- ``stacked``: one fused ``[(H + 2*H_kv)*n, N]`` weight, rows ``[q; k; v]`` (phi3 qkv_proj,
  multi-query falcon with H_kv = 1).
- ``conv1d``: one fused GPT-2 ``Conv1D`` weight stored ``[N, 3*H*n]``, columns ``q | k | v``.
- ``interleaved``: one fused ``[3*H*n, N]`` weight whose rows reshape to
  ``(H, 3, n)`` (q, k, v per head: gpt_neox query_key_value, bloom).
- ``grouped``: one fused ``[(H + 2*H_kv)*n, N]`` weight whose rows reshape to
  ``(H_kv, H/H_kv + 2, n)``: each key group's query heads, then its key, then its value
  (falcon's new decoder architecture).
- ``latent``: multi-head latent attention (DeepSeek-V2/V3), see :class:`LatentAttention`.
"""

Positional = Literal["absolute", "rope", "alibi", "relative_bias", "none"]
"""How a stack sees positions. Only ``rope`` acts inside the bilinear form (the form read
is the one at relative offset 0); ``absolute`` embeddings are added to the residual stream
before the layers, ``alibi`` and ``relative_bias`` add a term to the scores that is not part
of L, and ``none`` has no position signal at all."""
POSITIONAL: tuple[str, ...] = ("absolute", "rope", "alibi", "relative_bias", "none")
STACKS: tuple[str, ...] = ("", "encoder", "decoder", "cross", "text", "vision")


class TensorReader(Protocol):
    """What :func:`read_layer` needs from a checkpoint (e.g. safetensors_io.TensorSource)."""

    @property
    def names(self) -> Collection[str]: ...

    def shape(self, name: str) -> tuple[int, ...]: ...

    def tensor(self, name: str) -> np.ndarray: ...


@dataclass(frozen=True)
class QKNorm:
    """Norms applied to the projected queries and keys before the score (qk-norm).

    The score is the bilinear form of the normalised query and key. Normalising divides a
    token's query (key) by a positive number, which scales its scores and does not change
    the form; the gains g_Q, g_K do change it and are folded in, always:
    L = (diag(g_K) W_K)^T (diag(g_Q) W_Q). A LayerNorm (``centred``) also subtracts the
    mean of the normalised entries, a fixed linear projection P that is folded too:
    W -> diag(g) P W.
    """

    query: str  # gain of the query norm; "{h}" in the name: each head has its own norm
    key: str
    # "head": each head's n entries are normalised together (gain (n,) or, with {h}, one per head);
    # "projection": the whole projection's H*n entries at once (olmo2; gain (H*n,)).
    scope: Literal["head", "projection"] = "head"
    offset: float = 0.0  # gemma3's RMSNorm multiplies by (1 + weight)
    centred: bool = False  # LayerNorm (subtracts the mean) rather than RMSNorm


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
    """

    query_norm: str | None  # None: no query latent
    query_up: str | None
    key_norm: str
    key_up: str
    nope_key: str = "qk_nope_head_dim"  # config keys of the sizes
    rope_key: str = "qk_rope_head_dim"
    value_key: str = "v_head_dim"
    rank_key: str = "kv_lora_rank"


@dataclass(frozen=True)
class Layout:
    """One attention stack of a family; tensor names are relative to the checkpoint's prefix.

    ``{i}`` in a name is the layer index. A family has one stack per kind of attention
    (see :class:`Family`).
    """

    query: str
    key: str | None = None  # None for fused storage: the query tensor holds q, k and v
    storage: Storage = "separate"
    norm: str | None = None  # gain of the norm that feeds attention, or None if there is none
    # Post-norm (BERT-style): layer i is fed by layer i-1's output norm. Layer 0 is fed by
    # ``first_norm`` (the embeddings norm; None when the embeddings are not normed); a
    # pre-norm stack may name a ``first_norm`` too, for a layer 0 without its own norm (modernbert).
    post_norm: bool = False
    first_norm: str | None = None
    norm_offset: float = 0.0  # gemma's RMSNorm multiplies by (1 + weight)
    # config.json keys, first match wins; the first one is named in errors.
    heads_keys: tuple[str, ...] = ("num_attention_heads",)
    hidden_keys: tuple[str, ...] = ("hidden_size",)
    layers_keys: tuple[str, ...] = ("num_hidden_layers",)
    kv_heads_key: str | None = None  # None: every query head has its own key head
    kv_heads: int | None = None  # a fixed key-head count (multi-query: 1), overrides kv_heads_key
    head_dim_key: str | None = None  # None: head_dim = hidden_size / heads
    stack: str = ""  # "", encoder, decoder, cross, text, vision
    positional: Positional = "absolute"
    # RoPE coordinate pairs: "half" (k with k + r/2: neox, llama) or "interleaved" (2k with 2k + 1: gptj)
    rope_pairs: Literal["half", "interleaved"] = "half"
    qk_norm: QKNorm | None = None
    latent: LatentAttention | None = None
    config_section: str | None = None  # sizes live in this sub-dict of config.json (clip: text_config)
    # Cross-attention: keys read the output of this stack (its final norm, ``final_norm``, or for
    # a post-norm stack its last layer's norm, feeds them).
    key_stack: str | None = None
    final_norm: str | None = None
    # Config-dependent variants (e.g. OPT's do_layer_norm_before); returns the layout to use.
    adjust: Callable[[Mapping[str, Any], Layout], Layout] | None = field(
        default=None, compare=False, repr=False
    )


@dataclass(frozen=True)
class Family:
    """Everything qkenergy knows about one config.json ``model_type``."""

    stacks: tuple[Layout, ...]
    models: str = ""  # examples of checkpoints of this family, for `qkenergy layouts`
    note: str = ""  # what a user must know about the rows (printed with the analysis)
    proof: str = ""  # the transformers class tests/test_layouts_reference.py proves it against
    # Config-dependent variants, for `qkenergy layouts` (e.g. "alibi if alibi: true").
    variants: str = ""

    def stack(self, name: str) -> Layout:
        for layout in self.stacks:
            if layout.stack == name:
                return layout
        raise KeyError(name)


def _bert_like(root: str, **kw: Any) -> Layout:
    return Layout(
        query=f"{root}.layer.{{i}}.attention.self.query.weight",
        key=f"{root}.layer.{{i}}.attention.self.key.weight",
        norm=f"{root}.layer.{{i}}.output.LayerNorm.weight",
        post_norm=True,
        first_norm="embeddings.LayerNorm.weight",
        **kw,
    )


def _llama_like(**kw: Any) -> Layout:
    """Pre-RMSNorm decoder with separate q_proj / k_proj, grouped-query attention and RoPE."""
    fields: dict[str, Any] = dict(
        query="layers.{i}.self_attn.q_proj.weight",
        key="layers.{i}.self_attn.k_proj.weight",
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


def _family(layout: Layout, proof: str, models: str = "", note: str = "", variants: str = "") -> Family:
    return Family((layout,), models=models, note=note, proof=proof, variants=variants)


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


def _with_qk_layernorm(qk: QKNorm) -> Callable[[Mapping[str, Any], Layout], Layout]:
    """The layout with ``qk`` when the config sets qk_layernorm (phi, stablelm)."""

    def adjust(config: Mapping[str, Any], layout: Layout) -> Layout:
        return dataclasses.replace(layout, qk_norm=qk) if config.get("qk_layernorm") else layout

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
    sizes: dict[str, Any] = dict(heads_keys=("num_heads",), hidden_keys=("d_model",), head_dim_key="d_kv")
    decoder_layers = ("num_decoder_layers", "num_layers")
    return (
        Layout(
            query="encoder.block.{i}.layer.0.SelfAttention.q.weight",
            key="encoder.block.{i}.layer.0.SelfAttention.k.weight",
            norm="encoder.block.{i}.layer.0.layer_norm.weight",
            layers_keys=("num_layers",),
            stack="encoder",
            positional="relative_bias",
            final_norm="encoder.final_layer_norm.weight",
            **sizes,
        ),
        Layout(
            query="decoder.block.{i}.layer.0.SelfAttention.q.weight",
            key="decoder.block.{i}.layer.0.SelfAttention.k.weight",
            norm="decoder.block.{i}.layer.0.layer_norm.weight",
            layers_keys=decoder_layers,
            stack="decoder",
            positional="relative_bias",
            **sizes,
        ),
        Layout(
            query="decoder.block.{i}.layer.1.EncDecAttention.q.weight",
            key="decoder.block.{i}.layer.1.EncDecAttention.k.weight",
            norm="decoder.block.{i}.layer.1.layer_norm.weight",
            layers_keys=decoder_layers,
            stack="cross",
            positional="none",
            key_stack="encoder",
            **sizes,
        ),
    )


def _seq2seq_stacks(post_norm: bool) -> tuple[Layout, ...]:
    """BART (post-norm, normed embeddings) and Whisper (pre-norm, a final encoder norm)."""
    stacks = []
    for stack in ("encoder", "decoder"):
        common: dict[str, Any] = dict(
            heads_keys=(f"{stack}_attention_heads",),
            hidden_keys=("d_model",),
            layers_keys=(f"{stack}_layers",),
        )
        if post_norm:
            norm: dict[str, Any] = dict(
                norm=f"{stack}.layers.{{i}}.final_layer_norm.weight",
                post_norm=True,
                first_norm=f"{stack}.layernorm_embedding.weight",
            )
        else:
            norm = dict(norm=f"{stack}.layers.{{i}}.self_attn_layer_norm.weight")
            if stack == "encoder":
                norm["final_norm"] = "encoder.layer_norm.weight"
        stacks.append(
            Layout(
                query=f"{stack}.layers.{{i}}.self_attn.q_proj.weight",
                key=f"{stack}.layers.{{i}}.self_attn.k_proj.weight",
                stack=stack,
                **common,
                **norm,
            )
        )
        if stack == "decoder":
            cross_norm = "self_attn_layer_norm" if post_norm else "encoder_attn_layer_norm"
            stacks.append(
                Layout(
                    query="decoder.layers.{i}.encoder_attn.q_proj.weight",
                    key="decoder.layers.{i}.encoder_attn.k_proj.weight",
                    norm=f"decoder.layers.{{i}}.{cross_norm}.weight",
                    stack="cross",
                    key_stack="encoder",
                    **common,
                )
            )
    return tuple(stacks)


def _clip_tower(tower: str) -> Layout:
    return Layout(
        query=f"{tower}_model.encoder.layers.{{i}}.self_attn.q_proj.weight",
        key=f"{tower}_model.encoder.layers.{{i}}.self_attn.k_proj.weight",
        norm=f"{tower}_model.encoder.layers.{{i}}.layer_norm1.weight",
        stack=tower,
        config_section=f"{tower}_config",
    )


def _vit_like(norm: str) -> Layout:
    return Layout(
        query="encoder.layer.{i}.attention.attention.query.weight",
        key="encoder.layer.{i}.attention.attention.key.weight",
        norm=f"encoder.layer.{{i}}.{norm}.weight",
    )


FAMILIES: dict[str, Family] = {
    "bert": _family(_bert_like("encoder"), "BertForMaskedLM", "BERT, MiniLM, sentence-transformers"),
    "roberta": _family(_bert_like("encoder"), "RobertaForMaskedLM", "RoBERTa"),
    "distilbert": _family(
        Layout(
            query="transformer.layer.{i}.attention.q_lin.weight",
            key="transformer.layer.{i}.attention.k_lin.weight",
            norm="transformer.layer.{i}.output_layer_norm.weight",
            post_norm=True,
            first_norm="embeddings.LayerNorm.weight",
            heads_keys=("n_heads", "num_attention_heads"),
            hidden_keys=("dim", "hidden_size"),
            layers_keys=("n_layers", "num_hidden_layers"),
        ),
        "DistilBertModel",
        "DistilBERT",
    ),
    "gpt2": _family(
        Layout(
            query="h.{i}.attn.c_attn.weight",
            storage="conv1d",
            norm="h.{i}.ln_1.weight",
            heads_keys=("n_head", "num_attention_heads"),
            hidden_keys=("n_embd", "hidden_size"),
            layers_keys=("n_layer", "num_hidden_layers"),
        ),
        "GPT2LMHeadModel",
        "GPT-2",
    ),
    "gpt_neox": _family(
        Layout(
            query="layers.{i}.attention.query_key_value.weight",
            storage="interleaved",
            norm="layers.{i}.input_layernorm.weight",
            positional="rope",
        ),
        "GPTNeoXForCausalLM",
        "GPT-NeoX, Pythia",
    ),
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
    "opt": _family(
        Layout(
            query="layers.{i}.self_attn.q_proj.weight",
            key="layers.{i}.self_attn.k_proj.weight",
            norm="layers.{i}.self_attn_layer_norm.weight",
            adjust=_opt_adjust,
        ),
        "OPTForCausalLM",
        "OPT",
    ),
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
    "olmo2": _family(
        # Olmo2 norms the outputs of its sublayers: attention reads the raw residual stream.
        _llama_like(norm=None, qk_norm=_qk_norm(scope="projection")),
        "Olmo2ForCausalLM",
        "OLMo 2",
    ),
    "mixtral": _family(_llama_like(), "MixtralForCausalLM", "Mixtral"),
    "starcoder2": _family(_llama_like(), "Starcoder2ForCausalLM", "StarCoder2"),
    "stablelm": _family(
        _llama_like(
            adjust=_with_qk_layernorm(
                _qk_norm(q="q_layernorm.norms.{h}", k="k_layernorm.norms.{h}", centred=True)
            )
        ),
        "StableLmForCausalLM",
        "StableLM, StableLM 2",
        variants="qk-norm (a LayerNorm per head) with qk_layernorm",
    ),
    "phi": _family(
        _llama_like(adjust=_with_qk_layernorm(_qk_norm(q="q_layernorm", k="k_layernorm", centred=True))),
        "PhiForCausalLM",
        "Phi-1, Phi-1.5, Phi-2",
        variants="qk-norm (LayerNorm) with qk_layernorm",
    ),
    "gpt_neo": _family(
        Layout(
            query="h.{i}.attn.attention.q_proj.weight",
            key="h.{i}.attn.attention.k_proj.weight",
            norm="h.{i}.ln_1.weight",
            heads_keys=("num_heads",),
            layers_keys=("num_layers",),
        ),
        "GPTNeoForCausalLM",
        "GPT-Neo",
    ),
    "gptj": _family(
        Layout(
            query="h.{i}.attn.q_proj.weight",
            key="h.{i}.attn.k_proj.weight",
            norm="h.{i}.ln_1.weight",
            heads_keys=("n_head", "num_attention_heads"),
            hidden_keys=("n_embd", "hidden_size"),
            layers_keys=("n_layer", "num_hidden_layers"),
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
        Layout(
            query="layers.{i}.attn.Wqkv.weight",
            storage="stacked",
            norm="layers.{i}.attn_norm.weight",
            first_norm="embeddings.norm.weight",  # layer 0 has no attn_norm: the embeddings norm feeds it
            positional="rope",
        ),
        "ModernBertForMaskedLM",
        "ModernBERT",
    ),
    "albert": _family(
        Layout(
            query="encoder.albert_layer_groups.{i}.albert_layers.0.attention.query.weight",
            key="encoder.albert_layer_groups.{i}.albert_layers.0.attention.key.weight",
            norm="encoder.albert_layer_groups.{i}.albert_layers.0.full_layer_layer_norm.weight",
            layers_keys=("num_hidden_groups",),
            adjust=_albert_adjust,
        ),
        "AlbertForMaskedLM",
        "ALBERT",
        "ALBERT shares one layer's weights across all its layers: each shared layer (group) is one row per "
        "head, layer 0; --fold-norm folds its output norm, which feeds every application but the first",
    ),
    "xlm-roberta": _family(_bert_like("encoder"), "XLMRobertaForMaskedLM", "XLM-RoBERTa"),
    "electra": _family(_bert_like("encoder", adjust=_electra_adjust), "ElectraForPreTraining", "ELECTRA"),
    "t5": Family(_t5_stacks(), models="T5, T5 v1.1, Flan-T5", proof="T5ForConditionalGeneration"),
    "mt5": Family(_t5_stacks(), models="mT5", proof="MT5ForConditionalGeneration"),
    "bart": Family(_seq2seq_stacks(post_norm=True), models="BART", proof="BartForConditionalGeneration"),
    "whisper": Family(
        _seq2seq_stacks(post_norm=False), models="Whisper", proof="WhisperForConditionalGeneration"
    ),
    "vit": _family(_vit_like("layernorm_before"), "ViTModel", "ViT"),
    "dinov2": _family(_vit_like("norm1"), "Dinov2Model", "DINOv2"),
    "clip": Family((_clip_tower("text"), _clip_tower("vision")), models="CLIP", proof="CLIPModel"),
    "deepseek_v3": _family(
        Layout(
            query="layers.{i}.self_attn.q_a_proj.weight",
            key="layers.{i}.self_attn.kv_a_proj_with_mqa.weight",
            storage="latent",
            norm="layers.{i}.input_layernorm.weight",
            positional="rope",
            latent=LatentAttention(
                query_norm="layers.{i}.self_attn.q_a_layernorm.weight",
                query_up="layers.{i}.self_attn.q_b_proj.weight",
                key_norm="layers.{i}.self_attn.kv_a_layernorm.weight",
                key_up="layers.{i}.self_attn.kv_b_proj.weight",
            ),
            adjust=_deepseek_adjust,
        ),
        "DeepseekV3ForCausalLM",
        "DeepSeek-V3, DeepSeek-R1",
        "latent attention: the non-RoPE and decoupled RoPE parts are one form at offset 0; the key "
        "latent's norm scales only the non-RoPE part (docs/families.md)",
        "multi-head latent attention; q_proj without a query latent when q_lora_rank is null",
    ),
}


def supported_model_types() -> list[str]:
    """The config.json ``model_type`` values qkenergy can read."""
    return sorted(FAMILIES)


@dataclass(frozen=True)
class Architecture:
    """Attention sizes of one stack of a checkpoint (from config.json) and its layout."""

    model_type: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden_size: int
    layout: Layout
    # Cross-attention: the norm (relative name) on the output of the stack its keys read,
    # folded into W_K by fold_norm; None for self-attention (keys see the query's norm).
    key_norm: str | None = None
    # Latent attention: (d_nope, d_rope, d_value, kv_rank) from config.json.
    latent: tuple[int, int, int, int] | None = None

    @property
    def stack(self) -> str:
        return self.layout.stack

    @property
    def positional(self) -> str:
        return self.layout.positional

    @property
    def qk_norm(self) -> bool:
        """Whether queries and keys are normalised after projection (qk-norm or latent norms)."""
        return self.layout.qk_norm is not None or self.layout.latent is not None

    @property
    def kv_head(self) -> np.ndarray:
        """Key head used by each query head: h // (n_heads / n_kv_heads) (grouped-query attention)."""
        return np.arange(self.n_heads) // (self.n_heads // self.n_kv_heads)


# Boolean config.json keys that change a layout (see the ``adjust`` functions).
_FLAGS = ("layer_norm_elementwise_affine", "do_layer_norm_before")
# Sizes in config.json beyond this are no real model's: refused before anything is sized by them.
MAX_CONFIG_SIZE = 1 << 20


def _config_int(config: Mapping[str, Any], keys: tuple[str, ...], model_type: str, source: str) -> int:
    """The first of ``keys`` present in the config, checked to be a positive integer of sane size."""
    for key in keys:
        value = get_int(config, key, source, minimum=1, maximum=MAX_CONFIG_SIZE)
        if value is not None:
            return value
    also = f" (or {', '.join(repr(k) for k in keys[1:])})" if len(keys) > 1 else ""
    raise QKEnergyError(f"{source} has no {keys[0]!r}{also}, needed for a {model_type} model")


_OVERRIDES = "pass --model-type TYPE to read it as a supported type, or --layout FILE.toml to describe it"


def family_of(
    config: Mapping[str, Any],
    source: str = "config.json",
    *,
    model_type: str | None = None,
    layout: Layout | Family | None = None,
) -> tuple[str, Family]:
    """The ``model_type`` of a config.json dict and its :class:`Family`.

    ``model_type`` reads the checkpoint as that supported type whatever its
    config says; ``layout`` (a Layout, e.g. from
    :func:`qkenergy.weights.layout_toml.load_layout`, or a whole Family) is used
    as given, for an architecture qkenergy does not ship.
    """
    if model_type is not None:
        if model_type not in FAMILIES:
            raise ArgumentError(
                f"--model-type {model_type!r} is not a supported type; supported: "
                + ", ".join(supported_model_types())
            )
    else:
        model_type = get_str(config, "model_type", source)
    if layout is not None:
        family = layout if isinstance(layout, Family) else Family((layout,))
        return str(model_type or "custom"), family
    if model_type is None:
        raise QKEnergyError(
            f"{source} has no 'model_type' ({_OVERRIDES}); supported: " + ", ".join(supported_model_types())
        )
    found = FAMILIES.get(str(model_type))
    if found is None:
        raise QKEnergyError(
            f"{source}: model_type {show_name(model_type)} is not supported ({_OVERRIDES}); supported: "
            + ", ".join(supported_model_types())
        )
    return str(model_type), found


def _stack_architecture(config: Mapping[str, Any], layout: Layout, mt: str, source: str) -> Architecture:
    if layout.config_section is not None:
        section = config.get(layout.config_section)
        if not isinstance(section, Mapping):
            raise QKEnergyError(
                f"{source} has no {layout.config_section!r} section, needed for the {layout.stack} "
                f"stack of a {mt} model"
            )
        config = section
        source = f"{source} ({layout.config_section})"
    for flag in _FLAGS:  # read by the adjust functions: true, false or absent, nothing else
        get_bool(config, flag, source, default=True)
    if layout.adjust is not None:
        layout = layout.adjust(config, layout)
    n_heads = _config_int(config, layout.heads_keys, mt, source)
    hidden = _config_int(config, layout.hidden_keys, mt, source)
    n_layers = _config_int(config, layout.layers_keys, mt, source)
    n_kv = n_heads
    kv_key = layout.kv_heads_key
    if layout.kv_heads is not None:
        n_kv, kv_key = layout.kv_heads, "key heads"
    elif kv_key is not None and config.get(kv_key) is not None:
        n_kv = _config_int(config, (kv_key,), mt, source)
    if n_heads % n_kv:
        raise QKEnergyError(
            f"{source}: {layout.heads_keys[0]}={n_heads} is not a multiple of {kv_key}={n_kv}"
        )
    latent = None
    if layout.latent is not None:
        lat = layout.latent
        keys = (lat.nope_key, lat.rope_key, lat.value_key, lat.rank_key)
        d_nope, d_rope, d_value, rank = (_config_int(config, (k,), mt, source) for k in keys)
        latent = (d_nope, d_rope, d_value, rank)
        head_dim = d_nope + d_rope
        n_kv = n_heads  # every head has its own key (its own up-projection of the latent)
    elif layout.head_dim_key is not None and config.get(layout.head_dim_key) is not None:
        head_dim = _config_int(config, (layout.head_dim_key,), mt, source)
    else:
        if hidden % n_heads:
            raise QKEnergyError(
                f"{source}: {layout.hidden_keys[0]}={hidden} is not a multiple of "
                f"{layout.heads_keys[0]}={n_heads}"
            )
        head_dim = hidden // n_heads
    return Architecture(mt, n_layers, n_heads, n_kv, head_dim, hidden, layout, latent=latent)


def _output_norm(arch: Architecture) -> str | None:
    """The norm on a stack's output (relative name): its final norm, or a post-norm stack's last."""
    lay = arch.layout
    if lay.final_norm is not None:
        return lay.final_norm
    if lay.post_norm and lay.norm is not None:
        return lay.norm.format(i=arch.n_layers - 1)
    return None


def architectures(
    config: Mapping[str, Any],
    source: str = "config.json",
    *,
    model_type: str | None = None,
    layout: Layout | Family | None = None,
) -> tuple[Architecture, ...]:
    """One :class:`Architecture` per attention stack of the model a config.json dict describes.

    ``model_type`` and ``layout`` override the lookup of the config's ``model_type``
    (see :func:`family_of`). ``source`` names the config file in error messages.
    """
    mt, family = family_of(config, source, model_type=model_type, layout=layout)
    archs = [_stack_architecture(config, layout, mt, source) for layout in family.stacks]
    by_name = {a.stack: a for a in archs}
    for k, arch in enumerate(archs):
        if arch.layout.key_stack is not None:
            archs[k] = dataclasses.replace(arch, key_norm=_output_norm(by_name[arch.layout.key_stack]))
    return tuple(archs)


def architecture(
    config: Mapping[str, Any],
    source: str = "config.json",
    *,
    stack: str | None = None,
    model_type: str | None = None,
    layout: Layout | Family | None = None,
) -> Architecture:
    """Sizes and layout of one attention stack (``stack``: its name; None for single-stack models).

    ``source`` names the config file in error messages (e.g. its full path);
    ``model_type`` and ``layout`` as for :func:`family_of`.
    """
    archs = architectures(config, source, model_type=model_type, layout=layout)
    if stack is None and len(archs) == 1:
        return archs[0]
    for arch in archs:
        if arch.stack == stack:
            return arch
    names = ", ".join(repr(a.stack) for a in archs)
    raise QKEnergyError(
        f"{source}: a {archs[0].model_type} model has the attention stacks {names}; "
        + ("name one" if stack is None else f"not {stack!r}")
    )


@dataclass(frozen=True)
class LayerWeights:
    """Query/key weights of one layer's heads; ``kv_head[h]`` is query head h's key head."""

    layer: int
    w_query: np.ndarray  # (H, n, N)
    w_key: np.ndarray  # (H_kv, n, N)
    kv_head: np.ndarray  # (H,) int
    norm_gain: np.ndarray | None  # (N,) effective gain folded in, or None
    # Cross-attention: the gain folded into W_K (the key stream's own norm), when it differs.
    key_norm_gain: np.ndarray | None = None


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
        what = f"the {arch.stack} stack of " if arch.stack else ""
        raise QKEnergyError(
            f"{_where(tensors)}: no tensor named {suffix!r} (with any prefix); "
            f"is this {what}a {arch.model_type} checkpoint?"
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
    """The norm whose output feeds layer ``layer``'s attention (relative name), if any."""
    if layer == 0 and (layout.post_norm or layout.first_norm is not None):
        return layout.first_norm
    if layout.norm is None:
        return None
    return layout.norm.format(i=layer - 1 if layout.post_norm else layer)


def _float(w: np.ndarray) -> np.dtype:
    """The dtype forms are folded in: float32, or float64 for weights stored so."""
    return np.dtype(np.float64 if w.dtype == np.float64 else np.float32)


def layer_tensors(tensors: TensorReader, arch: Architecture, layer: int, *, prefix: str = "") -> list[str]:
    """Names of the tensors holding layer ``layer``'s W_Q and W_K (those present), e.g. to prefetch them."""
    lay = arch.layout
    relative = [lay.query] + ([lay.key] if lay.storage == "separate" and lay.key is not None else [])
    names = set(tensors.names)
    return [prefix + r.format(i=layer) for r in relative if prefix + r.format(i=layer) in names]


def read_layer(
    tensors: TensorReader,
    arch: Architecture,
    layer: int,
    *,
    fold_norm: bool = False,
    prefix: str | None = None,
) -> LayerWeights:
    """Read one layer's W_Q (H, n, N) and W_K (H_kv, n, N), reading only that layer's tensors.

    The dtype is kept as stored, except when something is folded in: then the weights
    come back in float32 (float64 if stored so). qk-norm gains (and a LayerNorm's
    centring) and the latent norms of latent attention are part of the form and always
    folded in. With ``fold_norm`` the columns of W_Q and W_K are also multiplied by the
    gain of the norm feeding attention (L -> D L D; for cross-attention the keys' own
    norm: L -> D_K L D_Q). Norm biases are not part of L and are ignored. ``prefix``
    skips prefix detection (see :func:`find_prefix`).
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

    def gain(template: str, size: int, what: str, offset: float = 0.0) -> np.ndarray:
        # Checkpoints from the original BERT code name LayerNorm weights 'gamma'.
        relative = template.format(i=layer)
        legacy = relative[: -len(".weight")] + ".gamma" if relative.endswith(".weight") else relative
        name = need(relative, legacy)
        _check_shape(tensors, name, (size,), what)
        g = tensors.tensor(name).astype(np.float64)
        return g + offset

    sizes = f"{H} heads x head_dim {n}, hidden {N}"
    qname = need(lay.query.format(i=layer))
    if lay.storage == "separate":
        assert lay.key is not None, "a separate layout names its key tensor"
        kname = need(lay.key.format(i=layer))
        _check_shape(tensors, qname, (H * n, N), sizes)
        _check_shape(tensors, kname, (Hkv * n, N), f"{Hkv} key heads x head_dim {n}, hidden {N}")
        wq = tensors.tensor(qname).reshape(H, n, N)
        wk = tensors.tensor(kname).reshape(Hkv, n, N)
    elif lay.storage in ("stacked", "grouped"):
        _check_shape(
            tensors,
            qname,
            ((H + 2 * Hkv) * n, N),
            f"({H} + 2 x {Hkv} key/value heads) x head_dim {n}, hidden {N}",
        )
        w = tensors.tensor(qname)
        if lay.storage == "stacked":
            wq = w[: H * n].reshape(H, n, N)
            wk = w[H * n : (H + Hkv) * n].reshape(Hkv, n, N)
        else:
            groups = w.reshape(Hkv, H // Hkv + 2, n, N)
            wq = groups[:, :-2].reshape(H, n, N)
            wk = groups[:, -2]
    elif lay.storage == "conv1d":
        _check_shape(tensors, qname, (N, 3 * H * n), f"Conv1D [in, out]: {sizes}")
        w = tensors.tensor(qname)
        wq = w[:, : H * n].T.reshape(H, n, N)
        wk = w[:, H * n : 2 * H * n].T.reshape(H, n, N)
    elif lay.storage == "interleaved":
        _check_shape(tensors, qname, (3 * H * n, N), f"fused q, k, v per head: {sizes}")
        w = tensors.tensor(qname).reshape(H, 3, n, N)
        wq, wk = w[:, 0], w[:, 1]
    elif lay.storage == "latent":
        assert lay.latent is not None and lay.key is not None, "a latent layout names its latents"
        wq, wk = _read_latent(tensors, arch, layer, qname, need(lay.key.format(i=layer)), need, gain)
    else:  # pragma: no cover - guarded by the Storage literal
        raise AssertionError(f"unknown storage {lay.storage!r}")
    # Views into the tensors read (a Conv1D's transposed columns, a fused tensor's rows), not
    # copies: the Gram products convert each head into float32/64 anyway, and that copy reads
    # a strided head as fast as a contiguous one (a copy here costs a transpose and fresh pages).

    if lay.qk_norm is not None:
        wq, wk = _fold_qk_norm(lay.qk_norm, wq, wk, gain)

    query_gain = key_gain = None
    if fold_norm:
        norm = _norm_name(lay, layer)
        if norm is not None:
            query_gain = gain(norm, N, f"hidden {N}", lay.norm_offset).astype(_float(wq))
        key_norm = norm if lay.key_stack is None else arch.key_norm
        if key_norm is not None:
            key_gain = gain(key_norm, N, f"hidden {N}", lay.norm_offset).astype(_float(wk))
        if query_gain is not None:
            wq = wq.astype(query_gain.dtype) * query_gain
        if key_gain is not None:
            wk = wk.astype(key_gain.dtype) * key_gain
    cross_gain = key_gain if lay.key_stack is not None else None
    return LayerWeights(layer, wq, wk, arch.kv_head, query_gain, cross_gain)


def _fold_qk_norm(
    qk: QKNorm, wq: np.ndarray, wk: np.ndarray, gain: Callable[..., np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """W -> diag(g) P W per head (P: the LayerNorm's centring, or the identity for RMSNorm)."""
    out = []
    for template, w, side in ((qk.query, wq, "query"), (qk.key, wk, "key")):
        heads, n, N = w.shape
        w = w.astype(_float(w))
        if qk.scope == "projection":
            if qk.centred:
                w = w - w.reshape(heads * n, N).mean(axis=0)
            g = gain(template, heads * n, f"{side} norm over {heads} heads x head_dim {n}", qk.offset)
            g = g.reshape(heads, n)
        else:
            if qk.centred:
                w = w - w.mean(axis=1, keepdims=True)
            if "{h}" in template:
                g = np.stack(
                    [
                        gain(template.replace("{h}", str(h)), n, f"{side} norm of head {h}", qk.offset)
                        for h in range(heads)
                    ]
                )
            else:
                g = np.broadcast_to(
                    gain(template, n, f"{side} norm over head_dim {n}", qk.offset), (heads, n)
                )
        out.append(w * g.astype(w.dtype)[:, :, None])
    return out[0], out[1]


def _read_latent(
    tensors: TensorReader,
    arch: Architecture,
    layer: int,
    qname: str,
    kname: str,
    need: Callable[..., str],
    gain: Callable[..., np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """Per-head W_Q, W_K of multi-head latent attention, latent gains folded in (see LatentAttention)."""
    lat = arch.layout.latent
    assert lat is not None and arch.latent is not None
    H, n, N = arch.n_heads, arch.head_dim, arch.hidden_size
    d_nope, d_rope, d_value, rank = arch.latent
    _check_shape(tensors, kname, (rank + d_rope, N), f"kv rank {rank} + rope dim {d_rope}, hidden {N}")
    up = need(lat.key_up.format(i=layer))
    _check_shape(
        tensors, up, (H * (d_nope + d_value), rank), f"{H} heads x (nope {d_nope} + value {d_value})"
    )
    w_kva = tensors.tensor(kname)
    dtype = _float(w_kva)
    w_kva = w_kva.astype(dtype)
    g_k = gain(lat.key_norm, rank, f"kv rank {rank}").astype(dtype)
    w_kvb = tensors.tensor(up).astype(dtype).reshape(H, d_nope + d_value, rank)[:, :d_nope]
    k_nope = w_kvb @ (g_k[:, None] * w_kva[:rank])
    k_rope = np.broadcast_to(w_kva[rank:], (H, d_rope, N))  # decoupled RoPE key: shared by all heads
    wk = np.concatenate([k_nope, k_rope], axis=1)
    if lat.query_up is None:
        _check_shape(tensors, qname, (H * n, N), f"{H} heads x head_dim {n}, hidden {N}")
        return tensors.tensor(qname).astype(dtype).reshape(H, n, N), wk
    assert lat.query_norm is not None
    q_rank = tensors.shape(qname)[0]
    _check_shape(tensors, qname, (q_rank, N), f"q rank x hidden {N}")
    q_up = need(lat.query_up.format(i=layer))
    _check_shape(tensors, q_up, (H * n, q_rank), f"{H} heads x head_dim {n}, q rank {q_rank}")
    g_q = gain(lat.query_norm, q_rank, f"q rank {q_rank}").astype(dtype)
    w_qb = tensors.tensor(q_up).astype(dtype).reshape(H, n, q_rank)
    return w_qb @ (g_q[:, None] * tensors.tensor(qname).astype(dtype)), wk


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
