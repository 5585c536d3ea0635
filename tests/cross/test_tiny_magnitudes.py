"""Weights of any magnitude, subnormal ones included, give the statistics of the same weights at scale 1.

The Gram route rescales each W_K, W_Q by a power of two before any product, so for weights whose
scaling by 2^k is exact (few significant bits, as bfloat16 weights have) the statistics must agree to
rounding, with no RuntimeWarning, from float64 near 1e-310 and bfloat16 near 1e-39 up to near overflow.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from qkenergy.math.statistics import STATISTICS, head_statistics

BF16 = np.dtype(ml_dtypes.bfloat16)


def _weights(seed: int, heads: int, n: int, N: int, bits: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """W_Q, W_K with entries m / 2^bits, |m| < 2^bits: exact in bfloat16 and under power-of-two scalings."""
    rng = np.random.default_rng(seed)
    top = 2**bits
    w = rng.integers(-top + 1, top, size=(2, heads, n, N)).astype(np.float64) / top
    return w[0], w[1]


def _statistics(w_query: np.ndarray, w_key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning may reach a user
        stats = head_statistics(w_query, w_key)
    return stats.stack(STATISTICS), stats.columns()["reason"]


def _same(scaled: tuple[np.ndarray, np.ndarray], reference: tuple[np.ndarray, np.ndarray]) -> None:
    np.testing.assert_array_equal(scaled[1], reference[1])
    # float64 products are exact to rounding: relative error ~ N * 2^-52 on every statistic
    np.testing.assert_allclose(scaled[0], reference[0], rtol=1e-10, atol=1e-12, equal_nan=True)


@settings(max_examples=40)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 4), N=st.integers(2, 24), k=st.integers(-1058, 1010))
@example(seed=0, n=3, N=16, k=-1058).via("the deepest subnormals")
@example(seed=1, n=2, N=8, k=-1029).via("near 1e-310")
def test_float64_any_power_of_two_scale(seed: int, n: int, N: int, k: int) -> None:
    # smallest non-zero entry 2^(k-7) >= 2^-1065, still exact as a subnormal; largest < 2^1017
    w_query, w_key = _weights(seed, 2, n, N)
    _same(_statistics(np.ldexp(w_query, k), np.ldexp(w_key, k)), _statistics(w_query, w_key))


@settings(max_examples=40)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 4), N=st.integers(2, 24), k=st.integers(-130, 124))
@example(seed=0, n=3, N=16, k=-130).via("bfloat16 near 1e-39")
def test_bfloat16_any_power_of_two_scale(seed: int, n: int, N: int, k: int) -> None:
    # bfloat16 subnormals reach 2^-133: entries m 2^(k-3), |m| < 8, with k >= -130 stay exact
    w_query, w_key = _weights(seed, 2, n, N, bits=3)
    scaled = [np.ldexp(w, k).astype(BF16) for w in (w_query, w_key)]
    assert all(
        np.array_equal(np.ldexp(s.astype(np.float64), -k), w) for s, w in zip(scaled, (w_query, w_key))
    )
    _same(_statistics(*scaled), _statistics(w_query.astype(BF16), w_key.astype(BF16)))


def test_subnormal_checkpoint_analyzes_like_scale_one(tmp_path: Path) -> None:
    """End to end: a float64 checkpoint near 1e-310 and a bfloat16 one near 1e-39, through analyze_model."""
    from safetensors.numpy import save_file

    from qkenergy.analysis.analyze import analyze_model

    config = {
        "model_type": "llama",
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "hidden_size": 16,
        "head_dim": 4,
    }
    w_query, w_key = _weights(7, 2, 4, 16, bits=3)
    tables = {}
    for name, scale, dtype in [("one", 0, np.float64), ("f64", -1029, np.float64), ("bf16", -130, BF16)]:
        root = tmp_path / name
        root.mkdir()
        (root / "config.json").write_text(json.dumps(config))
        tensors = {
            "model.layers.0.self_attn.q_proj.weight": np.ldexp(w_query, scale).reshape(8, 16).astype(dtype),
            "model.layers.0.self_attn.k_proj.weight": np.ldexp(w_key, scale).reshape(8, 16).astype(dtype),
        }
        save_file(tensors, str(root / "model.safetensors"))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            tables[name] = analyze_model(root, null=False).heads
    assert (tables["f64"]["reason"] == "").all() and (tables["bf16"]["reason"] == "").all()
    for name in ("f64", "bf16"):
        for column in STATISTICS:
            np.testing.assert_allclose(
                tables[name][column],
                tables["one"][column],
                rtol=1e-6,
                atol=1e-9,
                equal_nan=True,
                err_msg=column,
            )
