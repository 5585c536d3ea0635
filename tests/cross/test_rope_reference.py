"""RoPE at every relative offset, proven against transformers' own attention scores.

For each case a tiny random model runs with chosen (non-contiguous) position
ids; for every query token a and earlier key token b, the model's score
difference log p[a, b] - log p[a, 0] must equal the one computed from our
forms, scale * x_b^T W_K^T R_d W_Q x_a with d = pos[a] - pos[b], where
W_Q, W_K come from the layouts and R_d (with the square of the rope kind's
attention factor on the rotated coordinates) from qkenergy.math.rope, with the
settings read from the model's config (qkenergy.weights.rope_settings). Kinds whose frequencies depend on the sequence
length (dynamic, longrope) run one two-token sequence [0, d] per offset, the
shortest sequence holding the offset, which is where we evaluate them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from qkenergy.math.rope import rotate  # noqa: E402
from qkenergy.weights.architecture import architecture  # noqa: E402
from qkenergy.weights.checkpoint import open_model  # noqa: E402
from qkenergy.weights.reading import read_layer  # noqa: E402
from qkenergy.weights.rope_settings import layer_ropes  # noqa: E402

pytestmark = pytest.mark.slow

VOCAB = 64
SPREAD_POSITIONS = [[0, 1, 3, 8, 21, 50, 120, 300]]
TWO_TOKEN_POSITIONS = [[0, d] for d in (3, 20, 100, 300)]  # ascending: transformers caches the growth
_LLAMA = dict(
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_hidden_layers=1,
    intermediate_size=64,
    vocab_size=VOCAB,
    max_position_embeddings=512,
)
# Small original contexts put the scaled frequencies where a tiny head (8 frequencies) has them.
CASES: dict[str, tuple[str, str, dict[str, Any], list[list[int]]]] = {
    "llama-llama3": (
        "LlamaConfig",
        "LlamaModel",
        dict(
            _LLAMA,
            rope_parameters=dict(
                rope_type="llama3",
                rope_theta=10000.0,
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=64,
            ),
        ),
        SPREAD_POSITIONS,
    ),
    "llama-yarn": (
        "LlamaConfig",
        "LlamaModel",
        dict(
            _LLAMA,
            rope_parameters=dict(
                rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=64
            ),
        ),
        SPREAD_POSITIONS,
    ),
    "llama-linear": (
        "LlamaConfig",
        "LlamaModel",
        dict(_LLAMA, rope_parameters=dict(rope_type="linear", rope_theta=500.0, factor=3.0)),
        SPREAD_POSITIONS,
    ),
    "llama-dynamic": (
        "LlamaConfig",
        "LlamaModel",
        dict(
            _LLAMA,
            max_position_embeddings=16,
            rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0),
        ),
        TWO_TOKEN_POSITIONS,
    ),
    "gpt_neox-partial": (
        "GPTNeoXConfig",
        "GPTNeoXModel",
        dict(
            hidden_size=64,
            num_attention_heads=4,
            num_hidden_layers=1,
            intermediate_size=64,
            vocab_size=VOCAB,
            max_position_embeddings=512,
            rotary_pct=0.25,
        ),
        SPREAD_POSITIONS,
    ),
    "phi3-longrope-partial": (
        "Phi3Config",
        "Phi3Model",
        dict(
            _LLAMA,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            original_max_position_embeddings=32,
            rope_parameters=dict(
                rope_type="longrope",
                rope_theta=10000.0,
                partial_rotary_factor=0.5,
                short_factor=[1.0, 1.5, 2.0, 3.0],
                long_factor=[1.0, 3.0, 6.0, 12.0],
                original_max_position_embeddings=32,
            ),
        ),
        TWO_TOKEN_POSITIONS,
    ),
    "gptj-interleaved": (
        "GPTJConfig",
        "GPTJModel",
        dict(n_embd=64, n_head=4, n_layer=1, rotary_dim=8, n_positions=512, vocab_size=VOCAB),
        SPREAD_POSITIONS,
    ),
}


def _query_input_hook(model: Any, captured: list[np.ndarray]) -> Any:
    """Capture the input of the layer-0 query projection (the attention input x)."""
    for name, module in model.named_modules():
        if name.endswith(("q_proj", "query_key_value", "qkv_proj")) and ".0." in f".{name}.":
            return module.register_forward_pre_hook(
                lambda mod, args: captured.append(args[0].detach().double().numpy()[0])
            )
    raise AssertionError("no query projection found")


@pytest.mark.parametrize("case", list(CASES))
def test_rope_offsets_reproduce_transformers_scores(case: str) -> None:
    cfg_name, model_name, kwargs, runs = CASES[case]
    config = getattr(transformers, cfg_name)(**kwargs)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") and ("attn" in name or "attention" in name):
                p.zero_()  # q/k biases are not part of the form
            elif "norm" not in name and "ln" not in name:
                p.normal_(0.0, 0.25)

    with open_model(model) as source:
        arch = architecture(source.config)
        rope = layer_ropes(source.config, arch)[0]
        weights = read_layer(source.tensors, arch, 0)
    assert (rope.pairs == "interleaved") == case.startswith("gptj")
    scale = 1.0 / math.sqrt(arch.head_dim)
    largest = 0.0
    for positions in runs:
        captured: list[np.ndarray] = []
        hook = _query_input_hook(model, captured)
        ids = torch.randint(3, VOCAB, (1, len(positions)), generator=torch.Generator().manual_seed(7))
        with torch.no_grad():
            out = model(input_ids=ids, position_ids=torch.tensor([positions]), output_attentions=True)
        hook.remove()
        with np.errstate(divide="ignore"):  # masked (future) keys have probability 0
            log_p = np.log(out.attentions[0].double().numpy()[0])
        x = captured[0]
        for head in range(arch.n_heads):
            wq = weights.w_query[head].astype(np.float64)
            wk = weights.w_key[weights.kv_head[head]].astype(np.float64)
            keys = x @ wk.T  # (T, n)
            for a in range(1, len(positions)):
                # query a against every key b <= a, each at its own offset
                want = np.array(
                    [
                        scale * keys[b] @ (rotate(wq, rope, positions[a] - positions[b]) @ x[a])
                        for b in range(a + 1)
                    ]
                )
                got = log_p[head, a, : a + 1]
                np.testing.assert_allclose(
                    got - got[0],
                    want - want[0],
                    rtol=1e-4,
                    atol=3e-4,
                    err_msg=f"{case} head {head} query {a}",
                )
                largest = max(largest, float(np.abs(want - want[0]).max()))
    assert largest > 0.5, "scores too flat for the comparison to mean anything"
