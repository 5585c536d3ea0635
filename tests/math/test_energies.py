"""Lemma 5 on dense L (energies.py) and the Gram route's blocks and energies (gram.py)."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkenergy.math import gram
from qkenergy.math.energies import energies, energies_from_invariants, scale_by_power_of_two
from qkenergy.math.gram import (
    accumulator_dtype,
    gram_energies,
    gram_norm_sq,
    gram_trace,
    gram_trace_square,
    head_gram,
    key_block,
    query_block,
    query_key_block,
)

SETTINGS = settings(max_examples=60, deadline=None)

seeds = st.integers(0, 2**32 - 1)
sizes = st.integers(1, 8)
batches = st.integers(1, 3)


def square_matrices(seed: int, batch: int, N: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, N, N))


def head_pair(seed: int, batch: int, n: int, N: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, n, N)), rng.standard_normal((batch, n, N))


def dense_l(w_query: np.ndarray, w_key: np.ndarray) -> np.ndarray:
    """L = W_K^T W_Q."""
    return np.swapaxes(w_key, -1, -2) @ w_query


# ---------------------------------------------------------------- Lemma 5


@SETTINGS
@given(seed=seeds, batch=batches, N=sizes)
def test_lemma5_identities(seed: int, batch: int, N: int) -> None:
    L = square_matrices(seed, batch, N)
    e = energies(L)
    scale = np.max(e.norm_l_sq)
    np.testing.assert_allclose(e.norm_l_sq, np.sum(L * L, axis=(-2, -1)), rtol=1e-12)
    np.testing.assert_allclose(e.norm_l_sq, e.norm_s_sq + e.norm_t_sq, rtol=1e-12)
    np.testing.assert_allclose(e.norm_s_sq, 0.5 * e.norm_l_sq + 0.5 * e.trace_l_sq, atol=1e-12 * scale)
    np.testing.assert_allclose(e.norm_t_sq, 0.5 * e.norm_l_sq - 0.5 * e.trace_l_sq, atol=1e-12 * scale)
    np.testing.assert_allclose(e.trace_l_sq, np.trace(L @ L, axis1=-2, axis2=-1), atol=1e-12 * scale)
    # the divided form of Lemma 5
    half_ratio = e.trace_l_sq / (2 * e.norm_l_sq)
    np.testing.assert_allclose(e.symmetric_ratio, 0.5 + half_ratio, atol=1e-12)
    np.testing.assert_allclose(e.skew_ratio, 0.5 - half_ratio, atol=1e-12)
    np.testing.assert_allclose(e.symmetric_ratio + e.skew_ratio, 1.0, atol=1e-12)


@SETTINGS
@given(seed=seeds, N=sizes)
def test_invariants_route_agrees_with_dense(seed: int, N: int) -> None:
    L = square_matrices(seed, 2, N)
    dense = energies(L)
    from_invariants = energies_from_invariants(dense.norm_l_sq, dense.trace_l_sq)
    for name in ("norm_s_sq", "norm_t_sq", "symmetric_ratio", "skew_ratio"):
        np.testing.assert_allclose(
            getattr(from_invariants, name), getattr(dense, name), atol=1e-12 * np.max(dense.norm_l_sq)
        )


def test_energies_single_matrix_has_scalar_shape() -> None:
    e = energies(np.arange(9.0).reshape(3, 3))
    assert e.norm_l_sq.shape == ()
    assert e.symmetric_ratio.shape == ()


def test_symmetric_and_antisymmetric_faces_are_exact() -> None:
    A = square_matrices(1, 1, 5)[0]
    symmetric = energies(A + A.T)
    antisymmetric = energies(A - A.T)
    assert symmetric.skew_ratio == 0.0 and symmetric.symmetric_ratio == 1.0
    assert antisymmetric.symmetric_ratio == 0.0 and antisymmetric.skew_ratio == 1.0


def test_zero_matrix_gives_nan_ratios_without_warnings() -> None:
    L = square_matrices(2, 3, 4)
    L[1] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        e = energies(L)
    assert np.isnan(e.symmetric_ratio[1]) and np.isnan(e.skew_ratio[1])
    assert e.norm_l_sq[1] == 0.0
    assert np.all(np.isfinite(e.symmetric_ratio[[0, 2]]))


@pytest.mark.parametrize("scale", [1e-200, 1e-30, 3.7, 1e30, 1e150])
def test_ratios_are_scale_free(scale: float) -> None:
    L = square_matrices(3, 2, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaled = energies(L * scale)
    reference = energies(L)
    np.testing.assert_allclose(scaled.symmetric_ratio, reference.symmetric_ratio, rtol=1e-13)
    np.testing.assert_allclose(scaled.skew_ratio, reference.skew_ratio, rtol=1e-13)
    np.testing.assert_allclose(scaled.norm_l_sq, reference.norm_l_sq * scale**2, rtol=1e-13)


def test_non_finite_matrix_gives_nan() -> None:
    L = square_matrices(4, 2, 3)
    L[0, 1, 2] = np.inf
    e = energies(L)
    assert np.isnan(e.symmetric_ratio[0]) and np.isfinite(e.symmetric_ratio[1])


# ---------------------------------------------------------------- Gram route


@SETTINGS
@given(seed=seeds, batch=batches, n=st.integers(1, 5), N=sizes)
def test_gram_blocks_and_energies_match_dense(seed: int, batch: int, n: int, N: int) -> None:
    w_query, w_key = head_pair(seed, batch, n, N)
    C = np.concatenate([w_key, w_query], axis=-2)
    G = C @ np.swapaxes(C, -1, -2)
    np.testing.assert_allclose(key_block(G), w_key @ np.swapaxes(w_key, -1, -2), rtol=1e-12)
    np.testing.assert_allclose(query_block(G), w_query @ np.swapaxes(w_query, -1, -2), rtol=1e-12)
    np.testing.assert_allclose(query_key_block(G), w_query @ np.swapaxes(w_key, -1, -2), rtol=1e-12)

    L = dense_l(w_query, w_key)
    dense = energies(L)
    scale = np.max(dense.norm_l_sq)
    # ||L||^2 can cancel far below ||W_K||^2 ||W_Q||^2 (e.g. N = 1), so the
    # rounding error of the Gram route is measured against that product.
    weights = np.sum(w_key**2, axis=(-2, -1)) * np.sum(w_query**2, axis=(-2, -1))
    np.testing.assert_allclose(gram_norm_sq(G), dense.norm_l_sq, rtol=1e-10, atol=1e-12 * np.max(weights))
    np.testing.assert_allclose(gram_trace_square(G), dense.trace_l_sq, atol=1e-10 * scale)
    np.testing.assert_allclose(gram_trace(G), np.trace(L, axis1=-2, axis2=-1), atol=1e-10 * np.sqrt(scale))
    via_gram = gram_energies(G)
    for name in ("norm_s_sq", "norm_t_sq"):
        np.testing.assert_allclose(getattr(via_gram, name), getattr(dense, name), atol=1e-10 * scale)
    for name in ("symmetric_ratio", "skew_ratio"):
        np.testing.assert_allclose(getattr(via_gram, name), getattr(dense, name), atol=1e-10)


def test_head_gram_layout_keys_first() -> None:
    rng = np.random.default_rng(5)
    # entries in (-1, 1) with a max-abs entry in [0.5, 1): head_gram leaves them unscaled
    w_query = rng.uniform(-0.9, 0.9, (3, 2, 7))
    w_key = rng.uniform(-0.9, 0.9, (3, 2, 7))
    w_query[..., 0, 0] = w_key[..., 0, 0] = 0.95
    G = head_gram(w_query, w_key)
    C = np.concatenate([w_key, w_query], axis=-2)
    assert G.shape == (3, 4, 4) and G.dtype == np.float64
    np.testing.assert_allclose(G, C @ np.swapaxes(C, -1, -2), rtol=1e-14)
    np.testing.assert_array_equal(G, np.swapaxes(G, -1, -2))


def test_head_gram_rescales_each_matrix_separately_and_exactly() -> None:
    w_query, w_key = head_pair(6, 4, 3, 9)
    reference = head_gram(w_query, w_key)
    np.testing.assert_array_equal(head_gram(w_query * 2.0**40, w_key * 2.0**-70), reference)
    # any other scale changes G by a factor per block, but no ratio
    scaled = gram_energies(head_gram(w_query * 1e-250, w_key * 1e250))
    np.testing.assert_allclose(scaled.symmetric_ratio, gram_energies(reference).symmetric_ratio, rtol=1e-13)


def test_head_gram_keeps_batch_shape_and_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    w_query = rng.standard_normal((2, 3, 4, 10)).astype(np.float32)
    w_key = rng.standard_normal((2, 3, 4, 10)).astype(np.float32)
    whole = head_gram(w_query, w_key)
    assert whole.shape == (2, 3, 8, 8)
    monkeypatch.setattr(gram, "_PIECE_VALUES", 1)  # one head per piece
    np.testing.assert_array_equal(head_gram(w_query, w_key), whole)
    single = head_gram(w_query[1, 2], w_key[1, 2])
    assert single.shape == (8, 8)
    np.testing.assert_array_equal(single, whole[1, 2])


def test_head_gram_grouped_query_attention_pairs_each_query_with_its_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # kv_head pairs query heads with shared key heads without copying them; the
    # query-key blocks of a piece come from one product, so compare with the
    # expanded keys to rounding, and with one head per piece bitwise.
    rng = np.random.default_rng(8)
    w_query = rng.standard_normal((6, 4, 16))
    w_key = rng.standard_normal((2, 4, 16))
    kv_head = np.array([0, 0, 0, 1, 1, 1])
    grouped = head_gram(w_query, w_key, kv_head)
    np.testing.assert_allclose(grouped, head_gram(w_query, w_key[kv_head]), rtol=1e-13, atol=1e-13)
    assert [list(p) for p in gram.query_pieces(kv_head, 4, 16)] == [[0, 1, 2, 3, 4, 5]]
    # pieces hold whole groups while they fit; a group too large alone is a piece of its own
    # (converted in chunks, its key once)
    monkeypatch.setattr(gram, "_PIECE_VALUES", 4 * 16 * 4)
    assert [list(p) for p in gram.query_pieces(kv_head, 4, 16)] == [[0, 1, 2], [3, 4, 5]]
    monkeypatch.setattr(gram, "_PIECE_VALUES", 4 * 16 * 2)
    assert [list(p) for p in gram.query_pieces(kv_head, 4, 16)] == [[0, 1, 2], [3, 4, 5]]
    np.testing.assert_allclose(head_gram(w_query, w_key, kv_head), grouped, rtol=1e-13, atol=1e-13)
    interleaved = np.array([0, 1, 0, 1, 0, 1])  # keys need not be consecutive
    np.testing.assert_allclose(
        head_gram(w_query, w_key, interleaved), head_gram(w_query, w_key[interleaved]), rtol=1e-13, atol=1e-13
    )
    monkeypatch.setattr(gram, "_PIECE_VALUES", 1)
    np.testing.assert_array_equal(head_gram(w_query, w_key, kv_head), head_gram(w_query, w_key[kv_head]))
    with pytest.raises(ValueError, match="kv_head"):
        head_gram(w_query, w_key, np.array([0, 0, 0, 1, 1, 2]))


def test_head_gram_reads_strided_heads_as_contiguous_ones() -> None:
    # read_layer hands over views (a Conv1D's transposed columns): the same G bit for bit
    rng = np.random.default_rng(9)
    n, N, H = 4, 24, 3
    conv1d = rng.standard_normal((N, 3 * H * n)).astype(np.float32)  # [in, out]: Q, K, V columns
    w_query = conv1d[:, : H * n].T.reshape(H, n, N)
    w_key = conv1d[:, H * n : 2 * H * n].T.reshape(H, n, N)
    assert not w_query.flags.c_contiguous
    for kv_head in (None, np.zeros(H, dtype=int)):  # each head its own key; one key for all
        keys = w_key if kv_head is None else w_key[:1]
        contiguous = head_gram(np.ascontiguousarray(w_query), np.ascontiguousarray(keys), kv_head)
        np.testing.assert_array_equal(head_gram(w_query, keys, kv_head), contiguous)


def test_head_gram_accepts_float32_exactly() -> None:
    w_query, w_key = head_pair(8, 3, 4, 16)
    low_query, low_key = w_query.astype(np.float32), w_key.astype(np.float32)
    # float32 weights are widened to float64 exactly, so G equals that of the float64 copy
    np.testing.assert_array_equal(
        head_gram(low_query, low_key),
        head_gram(low_query.astype(np.float64), low_key.astype(np.float64)),
    )


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_head_gram_accumulates_16_bit_weights_in_float32(dtype) -> None:
    w_query, w_key = head_pair(8, 3, 4, 16)
    low_query, low_key = w_query.astype(dtype), w_key.astype(dtype)
    assert accumulator_dtype(low_query.dtype, low_key.dtype) == np.float32
    assert accumulator_dtype(low_query.dtype, np.float32) == np.float64
    # float32 products of the (exactly representable) weights: relative rounding ~ 2^-24 sqrt(N)
    G = head_gram(low_query, low_key)
    reference = head_gram(low_query.astype(np.float64), low_key.astype(np.float64))
    np.testing.assert_allclose(G, reference, rtol=0, atol=1e-6 * np.max(np.abs(reference)))


def test_head_gram_zero_and_non_finite_heads() -> None:
    w_query, w_key = head_pair(9, 4, 2, 5)
    w_key[1] = 0.0
    w_query[2, 0, 3] = np.nan
    w_key[3, 1, 1] = -np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        G = head_gram(w_query, w_key)
    assert np.all(key_block(G[1]) == 0.0) and np.all(np.isfinite(G[1]))
    assert np.all(np.isnan(G[2])) and np.all(np.isnan(G[3]))
    np.testing.assert_array_equal(G[0], head_gram(w_query[0], w_key[0]))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_max_abs_reads_the_largest_magnitude_from_the_bits(dtype) -> None:
    rng = np.random.default_rng(11)
    tiny = float(ml_dtypes.finfo(dtype).smallest_subnormal)
    heads = (rng.standard_normal((7, 3, 9)) * 0.05).astype(dtype)
    heads[1] = -np.abs(heads[1])  # no positive entry
    heads[2] = np.abs(heads[2])  # no negative entry
    heads[3] = 0.0
    heads[3, 0, 0] = -0.0
    heads[4] = tiny  # subnormals only
    heads[4, 1, 2] = -3 * tiny
    heads[5, 2, 2] = -np.inf
    heads[6, 0, 1] = np.nan
    expected = np.max(np.abs(heads.astype(np.float64)), axis=(-2, -1))
    np.testing.assert_array_equal(gram.max_abs(heads), expected)  # NaN where a head holds one
    columns = np.ascontiguousarray(np.swapaxes(heads, -1, -2))  # a strided view, as a Conv1D's heads
    np.testing.assert_array_equal(gram.max_abs(np.swapaxes(columns, -1, -2)), expected)


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float32, np.float64])
def test_head_gram_is_the_same_whether_weights_are_scaled_before_or_after_the_product(dtype) -> None:
    # Weights within 2**+-_UNSCALED_EXPONENT are multiplied as they are and G's blocks scaled
    # after; others are rescaled first: both give the G of the rescaled weights bit for bit,
    # in the grouped-query and the multi-head products.
    rng = np.random.default_rng(12)
    w_query, w_key = (rng.standard_normal((2, 4, 3, 20)) * 0.03).astype(dtype)
    # beyond the limit where the dtype can hold that (not float32 weights: float64 products, limit 400)
    limit = gram._UNSCALED_EXPONENT[gram.accumulator_dtype(w_query.dtype)]
    far = min(limit + 5, ml_dtypes.finfo(dtype).maxexp - 18)
    for kv_head in (np.arange(4), np.array([0, 0, 1, 1])):
        keys = w_key[: kv_head.max() + 1]
        reference = head_gram(w_query, keys, kv_head)
        for k in (-far, -7, 0, 9, far):
            scaled = head_gram((w_query * 2.0**k).astype(dtype), keys, kv_head)
            np.testing.assert_array_equal(scaled, reference, err_msg=f"2**{k} W_Q")


def test_head_gram_rejects_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="share a shape"):
        head_gram(np.zeros((2, 3, 4)), np.zeros((2, 3, 5)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scale_by_power_of_two_is_bitwise_ldexp(dtype: type) -> None:
    # Every exponent, from overflow to results deep in the subnormals, and the ldexp fallback
    # (an exponent whose power the dtype cannot hold).
    info = np.finfo(dtype)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(4000) * 2.0 ** rng.integers(info.minexp, info.maxexp - 1, 4000)).astype(dtype)
    x = np.concatenate([x, [info.smallest_subnormal, info.smallest_normal, info.max, 0.0]]).astype(dtype)
    bits = np.uint32 if dtype == np.float32 else np.uint64
    exponents = np.arange(info.minexp - info.nmant - 8, info.maxexp + 8)
    with np.errstate(over="ignore"):
        for e in exponents:
            got = scale_by_power_of_two(x, np.array(e))
            np.testing.assert_array_equal(got.view(bits), np.ldexp(x, e).view(bits), err_msg=str(e))
        per_row = rng.choice(exponents, (len(x) // 4, 1))
        rows = x[: 4 * len(per_row)].reshape(-1, 4)
        np.testing.assert_array_equal(scale_by_power_of_two(rows, per_row), np.ldexp(rows, per_row))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, ml_dtypes.bfloat16])
@pytest.mark.parametrize("n", [1, 5, 32])
def test_head_gram_is_exactly_symmetric(dtype, n: int) -> None:
    # head_statistics hands the Cholesky G's transpose (the same matrix, in Fortran order)
    rng = np.random.default_rng(n)
    w_query, w_key = rng.standard_normal((2, 6, n, 40)).astype(dtype)
    for kv_head in (np.arange(6), np.repeat(np.arange(2), 3)):
        G = head_gram(w_query, w_key[: kv_head.max() + 1], kv_head)
        np.testing.assert_array_equal(G, np.swapaxes(G, -1, -2))
